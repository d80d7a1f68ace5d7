package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kelseyhightower/envconfig"
	"github.com/mcp-bridge/mcp-bridge/connect"
)

// connectConfig is the configuration of `bridge connect`, the client mode.
// Its variables are BRIDGE_CONNECT_*, so that a host's server settings
// never leak into it, except the log settings and the message bound, which
// mean the same in both modes.
type connectConfig struct {
	Transport string `envconfig:"BRIDGE_CONNECT_TRANSPORT"`
	TokenFile string `envconfig:"BRIDGE_CONNECT_TOKEN_FILE"`
	// Token has no flag: a token on the command line is visible to every
	// user of the host in the process list.
	Token           string `envconfig:"BRIDGE_CONNECT_TOKEN"`
	Headers         string `envconfig:"BRIDGE_CONNECT_HEADERS"` // one per line
	AllowHTTP       bool   `envconfig:"BRIDGE_CONNECT_ALLOW_HTTP"`
	TLSCA           string `envconfig:"BRIDGE_CONNECT_TLS_CA"`
	TLSClientCert   string `envconfig:"BRIDGE_CONNECT_TLS_CLIENT_CERT"`
	TLSClientKey    string `envconfig:"BRIDGE_CONNECT_TLS_CLIENT_KEY"`
	MaxMessageBytes int    `envconfig:"BRIDGE_MAX_MESSAGE_BYTES"`
	LogFormat       string `envconfig:"BRIDGE_LOG_FORMAT" default:"text"`
	LogLevel        string `envconfig:"BRIDGE_LOG_LEVEL" default:"info"`

	headerFlags []string
	url         string
}

// connectFlagEnv names the variable of each flag, for --help.
var connectFlagEnv = map[string]string{
	"transport":         "BRIDGE_CONNECT_TRANSPORT",
	"token-file":        "BRIDGE_CONNECT_TOKEN_FILE",
	"header":            "BRIDGE_CONNECT_HEADERS",
	"allow-http":        "BRIDGE_CONNECT_ALLOW_HTTP",
	"tls-ca":            "BRIDGE_CONNECT_TLS_CA",
	"tls-client-cert":   "BRIDGE_CONNECT_TLS_CLIENT_CERT",
	"tls-client-key":    "BRIDGE_CONNECT_TLS_CLIENT_KEY",
	"max-message-bytes": "BRIDGE_MAX_MESSAGE_BYTES",
	"log-format":        "BRIDGE_LOG_FORMAT",
	"log-level":         "BRIDGE_LOG_LEVEL",
}

// headerFlag collects repeated --header values, never split on commas
// (header values may hold them).
type headerFlag struct{ dst *[]string }

func (h headerFlag) String() string     { return "" }
func (h headerFlag) Set(v string) error { *h.dst = append(*h.dst, v); return nil }

func newConnectFlagSet(c *connectConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge connect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Transport, "transport", c.Transport, "remote `transport`: auto (Streamable HTTP, falling back to HTTP+SSE on a 4xx answer to initialize), streamable or sse")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "`file` holding the bearer token sent to the remote (its first line; BRIDGE_CONNECT_TOKEN also takes it)")
	fs.Var(headerFlag{&c.headerFlags}, "header", "extra header `'Name: value'` sent to the remote (repeatable; the variable takes one per line); not Authorization, which belongs in a token file")
	fs.BoolVar(&c.AllowHTTP, "allow-http", c.AllowHTTP, "send a token or headers over plain http:// to a host that is not loopback (anyone on the path reads them)")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "trust the remote's certificate if a CA in this PEM `file` signed it (instead of the system's CAs)")
	fs.StringVar(&c.TLSClientCert, "tls-client-cert", c.TLSClientCert, "present this PEM client certificate `file` to the remote (mutual TLS; with --tls-client-key)")
	fs.StringVar(&c.TLSClientKey, "tls-client-key", c.TLSClientKey, "PEM private key `file` of --tls-client-cert")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest message in `bytes`, either way (0: 16 MiB)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format` on stderr: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: debug, info, warn or error")
	return fs
}

func connectUsage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, `Usage:
  bridge connect URL [flags]

Run as a stdio MCP server (JSON-RPC lines on stdin and stdout, logs on stderr)
that forwards every message to the remote MCP server at URL, over Streamable
HTTP or the legacy HTTP+SSE transport. Configure a stdio-only client to run
it as its server. It exits when stdin closes (ending the remote session), and
with status 1 and a message on stderr when the remote refuses it.

Flags (each also read from the environment variable shown; flags win):
`)
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(f)
		fmt.Fprintf(out, "  --%s %s\n        %s\n        env %s", f.Name, name, text, connectFlagEnv[f.Name])
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(out, "   default %s", f.DefValue)
		}
		fmt.Fprintln(out)
	})
	fmt.Fprint(out, `  env BRIDGE_CONNECT_TOKEN
        the bearer token sent to the remote (no flag: tokens on a command line are visible to every local user)
`)
}

// runConnect is `bridge connect`: it returns the exit status.
func runConnect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := parseConnectConfig(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge connect: %v\nRun 'bridge connect --help' for usage.\n", err)
		return 2
	}
	opts, err := c.options()
	if err != nil {
		fmt.Fprintf(stderr, "bridge connect: %v\nRun 'bridge connect --help' for usage.\n", err)
		return 2
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // checked by parseConnectConfig
	hopts := &slog.HandlerOptions{Level: level}
	logger := slog.New(slog.NewTextHandler(stderr, hopts))
	if c.LogFormat == "json" {
		logger = slog.New(slog.NewJSONHandler(stderr, hopts))
	}
	opts.Logger = logger

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger.Debug("forwarding stdio to the remote", "url", c.url, "transport", opts.Transport)
	err = connect.Run(ctx, stdin, stdout, opts)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "bridge connect: %v\n", err)
		return 1
	}
	return 0
}

// parseConnectConfig reads the environment, then the flags, which may come
// before or after URL.
func parseConnectConfig(args []string, out io.Writer) (*connectConfig, error) {
	c := &connectConfig{Transport: connect.DefaultTransport}
	if err := envconfig.Process("", c); err != nil {
		return nil, fmt.Errorf("reading %s_* environment variables: %w", envPrefix, err)
	}
	fs := newConnectFlagSet(c, out)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				connectUsage(fs, out)
			}
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		if c.url != "" {
			return nil, fmt.Errorf("one URL only: got %q and %q", c.url, fs.Arg(0))
		}
		c.url, args = fs.Arg(0), fs.Args()[1:]
	}
	if c.url == "" {
		return nil, errors.New("no remote URL: bridge connect https://host/mcp")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("--max-message-bytes %d: want a positive size", c.MaxMessageBytes)
	}
	return c, nil
}

// options turns the configuration into connect.Options, reading the token.
func (c *connectConfig) options() (*connect.Options, error) {
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote URL %q: want http:// or https:// and a host, as in https://example.com/mcp", c.url)
	}
	switch c.Transport {
	case connect.TransportAuto, connect.TransportStreamable, connect.TransportSSE:
	default:
		return nil, fmt.Errorf("--transport %q: want auto, streamable or sse", c.Transport)
	}
	o := &connect.Options{URL: c.url, Transport: c.Transport, MaxMessageBytes: c.MaxMessageBytes, Header: http.Header{}}

	o.Token, o.TokenSource = strings.TrimSpace(c.Token), "BRIDGE_CONNECT_TOKEN"
	if c.TokenFile != "" {
		if o.Token != "" {
			return nil, errors.New("both BRIDGE_CONNECT_TOKEN and --token-file give a token: keep one")
		}
		if o.Token, err = readConnectToken(c.TokenFile); err != nil {
			return nil, err
		}
		o.TokenSource = "--token-file " + c.TokenFile
	}

	var lines []string
	for _, l := range strings.Split(c.Headers, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	for i, l := range append(lines, c.headerFlags...) {
		name, value, ok := strings.Cut(l, ":")
		name = strings.TrimSpace(name)
		if !ok || !validHeaderName(name) {
			return nil, fmt.Errorf("--header %q: want 'Name: value'", l)
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
		if name == "Authorization" && (i >= len(lines) || o.Token != "") {
			return nil, errors.New("--header Authorization: put a bearer token in BRIDGE_CONNECT_TOKEN or a --token-file instead (a command line is visible to every local user)")
		}
		o.Header.Add(name, strings.TrimSpace(value))
	}

	if o.HTTPClient, err = c.httpClient(); err != nil {
		return nil, err
	}
	if u.Scheme == "http" && !connect.IsLoopbackURL(u) && !c.AllowHTTP && (o.Token != "" || len(o.Header) > 0) {
		return nil, fmt.Errorf("refusing to send a token or headers to %s over plain http: anyone on the path reads them; use https://, or pass --allow-http", u.Host)
	}
	return o, nil
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		// RFC 9110 token characters.
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// readConnectToken reads the first line of a token file that is not empty
// or a # comment, like --auth-token-file on the server side.
func readConnectToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	return "", fmt.Errorf("--token-file %s holds no token", path)
}

// httpClient is nil (the default) unless TLS flags are given.
func (c *connectConfig) httpClient() (*http.Client, error) {
	if c.TLSCA == "" && c.TLSClientCert == "" && c.TLSClientKey == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", c.TLSCA)
		}
	}
	if (c.TLSClientCert == "") != (c.TLSClientKey == "") {
		return nil, errors.New("--tls-client-cert and --tls-client-key go together: give both")
	}
	if c.TLSClientCert != "" {
		pair, err := tls.LoadX509KeyPair(c.TLSClientCert, c.TLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("loading --tls-client-cert %s and --tls-client-key %s: %w", c.TLSClientCert, c.TLSClientKey, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = conf
	return &http.Client{Transport: t}, nil
}

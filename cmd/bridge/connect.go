package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kelseyhightower/envconfig"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
	"github.com/mcp-bridge/mcp-bridge/internal/logx"
)

// connectConfig is the configuration of `bridge connect`, the client mode:
// connect.Settings, whose tags name its variables, BRIDGE_CONNECT_*, so that
// a host's server settings never leak into it, except the log settings and
// the message bound, which mean the same in both modes.
type connectConfig struct {
	connect.Settings
	LogFormat string      `envconfig:"BRIDGE_LOG_FORMAT" default:"text"`
	LogLevel  string      `envconfig:"BRIDGE_LOG_LEVEL" default:"info"`
	format    logx.Format // LogFormat and LogLevel, read by parseConnectConfig
	level     slog.Level
}

// connectFlagEnv names the variable of each flag, for --help: the
// envconfig tag of the field it sets.
var connectFlagEnv = func() map[string]string {
	c := &connectConfig{}
	env := flagx.Vars(c, newConnectFlagSet(c, io.Discard))
	env["header"] = "BRIDGE_CONNECT_HEADERS" // --header adds to its lines
	return env
}()

// connectFlags is the one group of flags of bridge connect's --help, with
// the variables that have no flag.
var connectFlags = &flagx.Group{ID: "connect", Title: "Flags (each also read from the environment variable shown; flags win)", EnvOnly: [][2]string{
	{"BRIDGE_CONNECT_TOKEN", "the bearer token sent to the remote (no flag: tokens on a command line are visible to every local user)"},
	{"BRIDGE_CONNECT_CLIENT_SECRET", "the secret of --oauth-client-id (no flag, for the same reason)"},
}}

func newConnectFlagSet(c *connectConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge connect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	in := connectFlags.In // every flag is in the one group of the help
	fs.StringVar(&c.Transport, "transport", c.Transport, in("remote `transport`: auto (Streamable HTTP, falling back to HTTP+SSE on a 4xx answer to initialize), streamable or sse"))
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, in("`file` holding the bearer token sent to the remote (its first line; BRIDGE_CONNECT_TOKEN also takes it)"))
	fs.Var(&flagx.Repeat{Dst: &c.HeaderFlags}, "header", in("extra header `'Name: value'` sent to the remote (repeatable; the variable takes one per line); not Authorization, which belongs in a token file"))
	fs.BoolVar(&c.AllowHTTP, "allow-http", c.AllowHTTP, in("send a token or headers over plain http:// to a host that is not loopback (anyone on the path reads them)"))
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, in("trust the remote's certificate if a CA in this PEM `file` signed it (instead of the system's CAs)"))
	fs.StringVar(&c.TLSClientCert, "tls-client-cert", c.TLSClientCert, in("present this PEM client certificate `file` to the remote (mutual TLS; with --tls-client-key)"))
	fs.StringVar(&c.TLSClientKey, "tls-client-key", c.TLSClientKey, in("PEM private key `file` of --tls-client-cert"))
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, in("largest message in `bytes`, either way (0: 16 MiB)"))
	fs.DurationVar(&c.EventTimeout, "event-timeout", c.EventTimeout, in("longest `duration` one SSE event or JSON answer of the remote may take to arrive whole once it began (a slow drip is cut; 0: 1m)"))
	fs.BoolVar(&c.OAuth, "oauth", c.OAuth, in("log in with OAuth 2.1 when the remote answers 401 (implied by any other --oauth-* flag)"))
	fs.StringVar(&c.OAuthFlow, "oauth-flow", c.OAuthFlow, in("OAuth `flow`: code (a browser on this machine; the default), device (a browser elsewhere: SSH, containers) or client-credentials (a service, no user)"))
	fs.StringVar(&c.OAuthClientID, "oauth-client-id", c.OAuthClientID, in("OAuth client `id` registered at the authorization server (default: a Client ID Metadata Document, or dynamic registration)"))
	fs.StringVar(&c.OAuthClientSecretFile, "oauth-client-secret-file", c.OAuthClientSecretFile, in("`file` holding the secret of --oauth-client-id (its first line; BRIDGE_CONNECT_CLIENT_SECRET also takes it)"))
	fs.StringVar(&c.OAuthClientMetadataURL, "oauth-client-metadata-url", c.OAuthClientMetadataURL, in("https `URL` of this client's Client ID Metadata Document, used as its client_id where the authorization server takes one"))
	fs.StringVar(&c.OAuthScope, "oauth-scope", c.OAuthScope, in("OAuth `scopes` to ask for, space-separated (default: those the remote's 401 or metadata names)"))
	fs.StringVar(&c.TokenStore, "token-store", c.TokenStore, in("`directory` of the OAuth token files, one of mode 0600 per issuer, resource and client (default: mcp-bridge/tokens under the user's configuration directory)"))
	fs.BoolVar(&c.NoBrowser, "no-browser", c.NoBrowser, in("print the OAuth authorization URL on stderr instead of opening a browser"))
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, in("log `format` on stderr: text or json"))
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, in("log `level`: debug, info, warn or error"))
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
`)
	help := &flagx.Help{Groups: []*flagx.Group{connectFlags}, Env: func(name string) string { return connectFlagEnv[name] }}
	help.Grouped(out, fs)
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
	opts, err := c.Options()
	if err != nil {
		fmt.Fprintf(stderr, "bridge connect: %v\nRun 'bridge connect --help' for usage.\n", err)
		return 2
	}
	opts.Logger = logx.New(stderr, c.format, c.level)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts.Logger.Debug("forwarding stdio to the remote", "url", c.URL, "transport", opts.Transport)
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
	c := &connectConfig{Settings: connect.Settings{Transport: connect.DefaultTransport}}
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
		if c.URL != "" {
			return nil, fmt.Errorf("one URL only: got %q and %q", c.URL, fs.Arg(0))
		}
		c.URL, args = fs.Arg(0), fs.Args()[1:]
	}
	if c.URL == "" {
		return nil, errors.New("no remote URL: bridge connect https://host/mcp")
	}
	var err error
	if err = c.format.UnmarshalText([]byte(c.LogFormat)); err != nil {
		return nil, fmt.Errorf("--log-format %q: %w", c.LogFormat, err)
	}
	if c.level, err = logx.ParseLevel(c.LogLevel); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", c.LogLevel, err)
	}
	if err = c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

package connect

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"time"
)

// Settings are `bridge connect`'s settings as a user gives them, in flags
// or environment variables: the names of the files to read, header lines,
// the OAuth choices. Settings.Options checks them and reads the files;
// cmd/bridge only maps its flags and variables here: each field's envconfig
// tag is its variable.
type Settings struct {
	// URL is the remote MCP endpoint: http:// or https:// and a host.
	URL string `ignored:"true"`
	// Transport is TransportAuto, TransportStreamable or TransportSSE
	// (required: the command gives DefaultTransport when not told).
	Transport string `envconfig:"BRIDGE_CONNECT_TRANSPORT"`
	// Token is a bearer token given directly (BRIDGE_CONNECT_TOKEN);
	// TokenFile a file holding one (--token-file: its first line that is
	// not empty or a # comment). At most one of them.
	Token     string `envconfig:"BRIDGE_CONNECT_TOKEN"`
	TokenFile string `envconfig:"BRIDGE_CONNECT_TOKEN_FILE"`
	// Headers are extra headers, one 'Name: value' per line
	// (BRIDGE_CONNECT_HEADERS); they may hold Authorization when no token
	// is given. HeaderFlags are more (--header), never Authorization: a
	// command line is visible to every local user.
	Headers     string   `envconfig:"BRIDGE_CONNECT_HEADERS"`
	HeaderFlags []string `ignored:"true"`
	// AllowHTTP lets a token or headers go over plain http:// to a host
	// that is not loopback.
	AllowHTTP bool `envconfig:"BRIDGE_CONNECT_ALLOW_HTTP"`
	// TLSCA is a PEM file of the CAs to trust instead of the system's;
	// TLSClientCert and TLSClientKey a client certificate and its key
	// (both or neither). All empty: the default HTTP client.
	TLSCA         string `envconfig:"BRIDGE_CONNECT_TLS_CA"`
	TLSClientCert string `envconfig:"BRIDGE_CONNECT_TLS_CLIENT_CERT"`
	TLSClientKey  string `envconfig:"BRIDGE_CONNECT_TLS_CLIENT_KEY"`
	// MaxMessageBytes and EventTimeout are Options'. The message bound's
	// variable is the server mode's: it means the same in both.
	MaxMessageBytes int           `envconfig:"BRIDGE_MAX_MESSAGE_BYTES"`
	EventTimeout    time.Duration `envconfig:"BRIDGE_CONNECT_EVENT_TIMEOUT"`
	// OAuth turns the OAuth client on, as does any other OAuth setting.
	OAuth bool `envconfig:"BRIDGE_CONNECT_OAUTH"`
	// OAuthFlow, OAuthClientID, OAuthClientMetadataURL, TokenStore and
	// NoBrowser are OAuthOptions' (Flow, ClientID, ...). OAuthScope holds
	// the scopes, space-separated.
	OAuthFlow              string `envconfig:"BRIDGE_CONNECT_OAUTH_FLOW"`
	OAuthClientID          string `envconfig:"BRIDGE_CONNECT_OAUTH_CLIENT_ID"`
	OAuthClientMetadataURL string `envconfig:"BRIDGE_CONNECT_OAUTH_CLIENT_METADATA_URL"`
	OAuthScope             string `envconfig:"BRIDGE_CONNECT_OAUTH_SCOPE"`
	TokenStore             string `envconfig:"BRIDGE_CONNECT_TOKEN_STORE"`
	NoBrowser              bool   `envconfig:"BRIDGE_CONNECT_NO_BROWSER"`
	// ClientSecret is the client's secret given directly
	// (BRIDGE_CONNECT_CLIENT_SECRET); OAuthClientSecretFile a file holding
	// it (--oauth-client-secret-file). At most one of them, and only with
	// OAuthClientID.
	ClientSecret          string `envconfig:"BRIDGE_CONNECT_CLIENT_SECRET"`
	OAuthClientSecretFile string `envconfig:"BRIDGE_CONNECT_OAUTH_CLIENT_SECRET_FILE"`
}

// Validate checks the values that need nothing read to be checked: the
// bounds. Its errors name the flag at fault, as Options' do.
func (c *Settings) Validate() error {
	if c.EventTimeout < 0 {
		return fmt.Errorf("--event-timeout %v: want a positive duration", c.EventTimeout)
	}
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("--max-message-bytes %d: want a positive size", c.MaxMessageBytes)
	}
	return nil
}

// Options checks the settings (Validate first) and turns them into
// Options, reading the token, the client secret and the TLS files they
// name. Its errors name the flag or variable at fault.
func (c *Settings) Options() (*Options, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote URL %q: want http:// or https:// and a host, as in https://example.com/mcp", c.URL)
	}
	switch c.Transport {
	case TransportAuto, TransportStreamable, TransportSSE:
	default:
		return nil, fmt.Errorf("--transport %q: want auto, streamable or sse", c.Transport)
	}
	o := &Options{URL: c.URL, Transport: c.Transport, MaxMessageBytes: c.MaxMessageBytes, EventTimeout: c.EventTimeout, Header: http.Header{}}

	o.Token, o.TokenSource = strings.TrimSpace(c.Token), "BRIDGE_CONNECT_TOKEN"
	if c.TokenFile != "" {
		if o.Token != "" {
			return nil, errors.New("both BRIDGE_CONNECT_TOKEN and --token-file give a token: keep one")
		}
		if o.Token, err = readTokenFile(c.TokenFile); err != nil {
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
	for i, l := range append(lines, c.HeaderFlags...) {
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

	if o.OAuth, err = c.oauthOptions(); err != nil {
		return nil, err
	}
	if o.OAuth != nil && o.Token != "" {
		return nil, errors.New("both a bearer token and OAuth are configured: keep one")
	}
	if o.HTTPClient, err = c.httpClient(); err != nil {
		return nil, err
	}
	if u.Scheme == "http" && !IsLoopbackURL(u) && !c.AllowHTTP && (o.Token != "" || len(o.Header) > 0 || o.OAuth != nil) {
		return nil, fmt.Errorf("refusing to send a token or headers to %s over plain http: anyone on the path reads them; use https://, or pass --allow-http", u.Host)
	}
	return o, nil
}

// readTokenFile reads the first line of a token file that is not empty
// or a # comment, like --auth-token-file on the server side.
func readTokenFile(path string) (string, error) {
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
func (c *Settings) httpClient() (*http.Client, error) {
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

// oauthOptions is nil unless OAuth is asked for.
func (c *Settings) oauthOptions() (*OAuthOptions, error) {
	if !c.OAuth && c.OAuthFlow == "" && c.OAuthClientID == "" && c.OAuthClientSecretFile == "" && c.OAuthClientMetadataURL == "" &&
		c.OAuthScope == "" && c.TokenStore == "" && !c.NoBrowser && c.ClientSecret == "" {
		return nil, nil
	}
	o := &OAuthOptions{Flow: c.OAuthFlow, ClientID: c.OAuthClientID, ClientMetadataURL: c.OAuthClientMetadataURL,
		TokenStore: c.TokenStore, NoBrowser: c.NoBrowser, ClientSecret: strings.TrimSpace(c.ClientSecret)}
	switch o.Flow {
	case "", FlowCode, FlowDevice, FlowClientCredentials:
	default:
		return nil, fmt.Errorf("--oauth-flow %q: want code, device or client-credentials", o.Flow)
	}
	if c.OAuthClientSecretFile != "" {
		if o.ClientSecret != "" {
			return nil, errors.New("both BRIDGE_CONNECT_CLIENT_SECRET and --oauth-client-secret-file give a client secret: keep one")
		}
		secret, err := readSecretFile(c.OAuthClientSecretFile)
		if err != nil {
			return nil, err
		}
		o.ClientSecret = secret
	}
	if o.ClientSecret != "" && o.ClientID == "" {
		return nil, errors.New("a client secret without --oauth-client-id: give the client's id")
	}
	if f := strings.Fields(c.OAuthScope); len(f) > 0 {
		o.Scopes = f
	}
	return o, nil
}

// readSecretFile reads the first line of a secret file that is not empty
// or a # comment.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--oauth-client-secret-file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("--oauth-client-secret-file %s holds no secret", path)
}

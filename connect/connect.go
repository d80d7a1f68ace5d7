// Package connect is the bridge's client mode, the reverse of the bridge:
// a stdio MCP server (JSON-RPC lines on stdin and stdout) that forwards
// every message to a remote MCP server over Streamable HTTP, or over the
// legacy HTTP+SSE transport of revision 2024-11-05, so that a client that
// only speaks stdio reaches a remote server.
//
// Messages pass through untouched: the forwarder reads only their envelope
// (id, method) and never rewrites an id, so server-to-client requests
// (sampling, elicitation, roots), notifications, progress and cancellation
// reach the other side as they were sent. A message of revision 2026-07-28
// gets the HTTP headers that revision derives from it (headers.go), and a
// cancelled request of that revision has its stream closed instead.
//
// With Options.OAuth the forwarder is an OAuth 2.1 client (oauth.go):
// the remote's 401 leads to a login, tokens are kept in a store
// (tokenstore.go) and refreshed. What the remote sends is bounded as it
// arrives, and only JSON-RPC in UTF-8 reaches stdout.
//
// Settings (settings.go) are the command's settings as a user gives them
// (files to read, header lines, OAuth choices); Settings.Options checks
// them and builds Options, so that cmd/bridge only maps its flags and
// BRIDGE_CONNECT_* variables.
//
// Streamable HTTP is spoken by a small client of this package rather than
// the Go SDK's StreamableClientTransport: used without the SDK's mcp.Client
// (which pass-through cannot use, since it would answer and rewrite
// messages), that transport never opens the standalone GET stream (only the
// client's unexported sessionUpdated hook does) and never sends
// MCP-Protocol-Version after initialize, and a request refused with an HTTP
// error disappears into an error value instead of becoming an answer with
// the request's id. The legacy transport has none of these gaps and is the
// SDK's SSEClientTransport.
package connect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Transports.
const (
	// TransportAuto tries Streamable HTTP and falls back to HTTP+SSE when
	// the initialize POST gets a 4xx status, as the spec's backwards
	// compatibility section describes.
	TransportAuto       = "auto"
	TransportStreamable = "streamable"
	TransportSSE        = "sse"
)

const (
	// DefaultTransport is used when Options.Transport is empty.
	DefaultTransport = TransportAuto
	// DefaultMaxMessageBytes bounds a message either way when
	// Options.MaxMessageBytes is zero.
	DefaultMaxMessageBytes = 16 << 20
	// DefaultRetry is the delay before resuming a broken stream when the
	// server announced none with the SSE retry field.
	DefaultRetry = time.Second
	// maxRetries bounds the resumptions of one stream in a row that bring
	// no new event.
	maxRetries = 5
	// deleteTimeout bounds the DELETE that ends the session at exit.
	deleteTimeout = 5 * time.Second
	// DefaultEventTimeout bounds, when Options.EventTimeout is zero, how
	// long one SSE event or one JSON answer may take to arrive whole once
	// its first byte arrived.
	DefaultEventTimeout = time.Minute
)

// ErrUnauthorized is returned when the remote answers 401 or 403.
var ErrUnauthorized = errors.New("the remote refused the credentials")

// ErrSessionGone is returned when the remote answers 404 for the session:
// it ended it, and a stdio server cannot start a new one for its client.
var ErrSessionGone = errors.New("the remote ended the session")

// Options configure Run. The zero value of each field is documented.
type Options struct {
	// URL is the remote MCP endpoint. Required.
	URL string
	// Transport is TransportAuto, TransportStreamable or TransportSSE.
	// Empty: DefaultTransport.
	Transport string
	// Token is sent as "Authorization: Bearer Token" to the URL's host
	// (never to another host a redirect or an SSE endpoint names).
	// Empty: no Authorization header.
	Token string
	// TokenSource names where Token came from (an environment variable or
	// a file), for the message when the remote refuses it. Empty: "the
	// token".
	TokenSource string
	// Header holds extra headers sent to the URL's host with every
	// request. Nil: none.
	Header http.Header
	// HTTPClient makes the requests. Nil: a client with the default
	// transport and no timeout (streams are long-lived).
	HTTPClient *http.Client
	// MaxMessageBytes bounds each message read from stdin or from the
	// remote. Zero: DefaultMaxMessageBytes.
	MaxMessageBytes int
	// EventTimeout bounds how long one SSE event, one SSE line, or one
	// JSON answer may take to arrive whole once its first byte arrived: a
	// remote that drips an event byte by byte gets its stream closed. The
	// wait between events is not bounded (a tool may work for long).
	// Zero: DefaultEventTimeout.
	EventTimeout time.Duration
	// OAuth, when set, makes bridge connect an OAuth 2.1 client: it logs
	// in when the remote answers 401 (or 403 insufficient_scope), and
	// sends the token it got instead of Token. Nil: Token only.
	OAuth *OAuthOptions
	// Logger receives what the forwarder has to say; never stdout, which
	// carries the protocol. Nil: slog.Default().
	Logger *slog.Logger
}

// Run forwards the JSON-RPC lines read from in to the remote, and writes
// what the remote sends as lines to out, until in ends (then it ends the
// remote session with DELETE and returns nil), ctx is done, or the remote
// fails for good (then it returns why).
//
// When Run returns before in ends, a goroutine may still be blocked
// reading in; the caller exits the process (or closes in).
func Run(ctx context.Context, in io.Reader, out io.Writer, opts *Options) error {
	o := *opts
	if o.Transport == "" {
		o.Transport = DefaultTransport
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.EventTimeout <= 0 {
		o.EventTimeout = DefaultEventTimeout
	}
	if o.TokenSource == "" {
		o.TokenSource = "the token"
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("remote URL %q: want http:// or https:// and a host", o.URL)
	}
	switch o.Transport {
	case TransportAuto, TransportStreamable, TransportSSE:
	default:
		return fmt.Errorf("transport %q: want auto, streamable or sse", o.Transport)
	}
	base := o.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	ht := &headerTransport{base: base.Transport, scheme: u.Scheme, host: u.Host, token: o.Token, header: o.Header}
	if ht.base == nil {
		ht.base = http.DefaultTransport
	}
	if o.OAuth != nil {
		if o.Token != "" {
			return errors.New("both a token and OAuth are configured: keep one")
		}
		if ht.oauth, err = newOAuthClient(o.OAuth, o.URL, base, o.Logger); err != nil {
			return err
		}
	}
	client := *base
	client.Transport = ht

	// runCtx ends every stream; its cause is what Run returns.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f := &forwarder{
		opts:   &o,
		client: &client,
		auth:   ht,
		out:    &lineWriter{w: out},
		ctx:    runCtx,
		fail:   cancel,
		log:    o.Logger,
	}

	// lines is closed by the reader at the end of in. The reader is the
	// only goroutine Run does not wait for (see above).
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		readErr <- readLines(runCtx, in, o.MaxMessageBytes, lines)
	}()

	var fw transport
	if o.Transport == TransportSSE {
		l, err := f.dialSSE()
		if err != nil {
			return err
		}
		fw = l
	} else {
		fw = newStreamable(f, o.Transport == TransportAuto)
	}
	defer func() { fw.close() }()

	for {
		select {
		case <-runCtx.Done():
			return context.Cause(runCtx)
		case line, ok := <-lines:
			if !ok {
				if runCtx.Err() != nil { // the remote failed meanwhile
					return context.Cause(runCtx)
				}
				if err := <-readErr; err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				f.log.Debug("stdin closed: ending the remote session")
				return nil
			}
			env, err := parseEnvelope(line)
			if err != nil {
				f.log.Warn("skipping a stdin line that is not a JSON-RPC message", "err", err)
				f.answerError(env.ID, codeFor(err), err.Error())
				continue
			}
			err = fw.send(env, line)
			if errors.Is(err, errFallback) {
				f.log.Info("the remote refused Streamable HTTP's initialize with a 4xx status: falling back to HTTP+SSE (2024-11-05)", "url", o.URL)
				fw.close()
				l, dialErr := f.dialSSE()
				if dialErr != nil {
					fw = nopTransport{}
					return dialErr
				}
				fw = l
				err = fw.send(env, line)
			}
			if err != nil {
				return err
			}
		}
	}
}

// transport is how messages reach the remote.
type transport interface {
	// send forwards one message; an error is fatal.
	send(env *envelope, raw []byte) error
	// close ends streams and the session; it waits for what send started.
	close()
}

var errFallback = errors.New("fall back to HTTP+SSE")

// nopTransport stands for a transport already closed.
type nopTransport struct{}

func (nopTransport) send(*envelope, []byte) error { return nil }
func (nopTransport) close()                       {}

// forwarder holds what both transports share.
type forwarder struct {
	opts   *Options
	client *http.Client
	auth   *headerTransport
	out    *lineWriter
	ctx    context.Context
	fail   context.CancelCauseFunc
	log    *slog.Logger
}

// unauthorized is the fatal error for a 401 or 403 answer to what.
func (f *forwarder) unauthorized(status int, challenge, what string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s answered %d %s to %s", ErrUnauthorized, f.opts.URL, status, http.StatusText(status), what)
	if challenge != "" {
		fmt.Fprintf(&b, " (WWW-Authenticate: %s)", challenge)
	}
	if f.auth.oauth != nil {
		if err := f.auth.oauthFailure(); err != nil {
			fmt.Fprintf(&b, "; the OAuth login failed: %v", err)
		} else {
			b.WriteString("; it refused the token OAuth gave too")
		}
		return errors.New(b.String())
	}
	if f.opts.Token == "" {
		b.WriteString("; no token was sent: give one in BRIDGE_CONNECT_TOKEN or a file named by --token-file")
		if status == http.StatusUnauthorized && strings.Contains(challenge, "resource_metadata") {
			b.WriteString(", or log in with --oauth (the remote names its authorization server)")
		}
	} else if status == http.StatusUnauthorized {
		fmt.Fprintf(&b, "; the token from %s is missing or invalid there", f.opts.TokenSource)
	} else {
		fmt.Fprintf(&b, "; the token from %s is not allowed to do that", f.opts.TokenSource)
	}
	return errors.New(b.String())
}

// answerError writes a JSON-RPC error answering the request id, if any:
// a request refused on the way must not leave its client waiting.
func (f *forwarder) answerError(id json.RawMessage, code int, msg string) {
	if !isID(id) {
		return
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{"2.0", id, rpcError{Code: code, Message: msg}})
	if err == nil {
		f.deliver(b)
	}
}

// deliver writes one message of the remote to stdout; a failed write to
// stdout means the client is gone, which ends Run.
func (f *forwarder) deliver(msg []byte) {
	if err := f.out.write(msg); err != nil {
		f.fail(fmt.Errorf("writing stdout: %w", err))
	}
}

// JSON-RPC error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInternalError  = -32603
)

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// envelope is the part of a message the forwarder reads.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// isRequest reports whether the message expects an answer.
func (e *envelope) isRequest() bool { return e.Method != "" && isID(e.ID) }

func isID(id json.RawMessage) bool { return len(id) > 0 && string(id) != "null" }

type parseError struct{ msg string }

func (e *parseError) Error() string { return e.msg }

func codeFor(err error) int {
	var pe *parseError
	if errors.As(err, &pe) {
		return codeParseError
	}
	return codeInvalidRequest
}

// parseEnvelope reads the envelope of one line. On error the envelope holds
// the id when one could be read, to answer it.
func parseEnvelope(line []byte) (*envelope, error) {
	env := &envelope{}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		// Batches exist only in 2025-03-26 and are not forwarded: the
		// answer to each element would need its own stream bookkeeping.
		return env, errors.New("JSON-RPC batches are not forwarded: send one message per line")
	}
	if err := json.Unmarshal(line, env); err != nil {
		if !json.Valid(line) {
			return env, &parseError{fmt.Sprintf("not JSON: %v", err)}
		}
		return env, fmt.Errorf("not a JSON-RPC message: %v", err)
	}
	return env, nil
}

// metaProtocolVersion is the revision a request names in its
// _meta (SEP-2575, revision 2026-07-28), which the HTTP header must repeat.
func metaProtocolVersion(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var v string
	if json.Unmarshal(p.Meta["io.modelcontextprotocol/protocolVersion"], &v) != nil {
		return ""
	}
	return v
}

// readLines sends each non-empty line of in, up to max bytes, on lines.
func readLines(ctx context.Context, in io.Reader, max int, lines chan<- []byte) error {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(r, max)
		if len(bytes.TrimSpace(line)) > 0 {
			select {
			case lines <- line:
			case <-ctx.Done():
				return nil
			}
		}
		if errors.Is(err, errLineTooLong) {
			return fmt.Errorf("a message longer than %d bytes (raise --max-message-bytes): %w", max, err)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its end, refusing more than max bytes.
// At the end of r it returns what it read with io.EOF.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+2 { // +2: the line end
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		return line, err
	}
}

// lineWriter writes whole lines, one message each, from any goroutine.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) write(msg []byte) error {
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 {
		return nil // an empty line is no message
	}
	if bytes.ContainsAny(msg, "\r\n") {
		// stdio framing: "Messages are delimited by newlines, and MUST
		// NOT contain embedded newlines." JSON allows them between tokens.
		var b bytes.Buffer
		if err := json.Compact(&b, msg); err != nil {
			return fmt.Errorf("a message of the remote is not JSON: %w", err)
		}
		msg = b.Bytes()
	}
	buf := make([]byte, 0, len(msg)+1)
	buf = append(append(buf, msg...), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(buf)
	return err
}

// headerTransport adds the token and the extra headers to requests for the
// remote's scheme and host only: a redirect or a legacy SSE endpoint
// elsewhere never gets them.
type headerTransport struct {
	base   http.RoundTripper
	scheme string // a redirect from https to http on the same host gets nothing
	host   string
	token  string
	header http.Header

	oauth *oauthClient // nil without OAuth

	mu        sync.Mutex
	status    int    // the last 401 or 403 answer, for the legacy transport's errors
	challenge string // its WWW-Authenticate
	oauthErr  error  // why the last OAuth login failed
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != t.host || req.URL.Scheme != t.scheme {
		return t.base.RoundTrip(req)
	}
	orig := req
	req = req.Clone(req.Context())
	for k, vs := range t.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	sent := t.token
	if t.oauth != nil {
		sent = t.oauth.token(req.Context())
	}
	if sent != "" {
		req.Header.Set("Authorization", "Bearer "+sent)
	}
	resp, err := t.base.RoundTrip(req)
	// With OAuth, a refusal is answered by a refresh, a login or a step
	// up, and the request sent again: twice at most (a refresh the remote
	// still refuses, then a login).
	for try := 0; t.oauth != nil && err == nil && try < 2 && refusal(resp.StatusCode) &&
		(orig.Body == nil || orig.Body == http.NoBody || orig.GetBody != nil); try++ {
		aerr := t.oauth.unauthorized(req.Context(), resp, sent)
		if errors.Is(aerr, errNoRetry) {
			break
		}
		t.mu.Lock()
		t.oauthErr = aerr
		t.mu.Unlock()
		if aerr != nil {
			break
		}
		drain(resp)
		req = req.Clone(req.Context())
		if orig.GetBody != nil {
			if req.Body, err = orig.GetBody(); err != nil {
				return nil, err
			}
		}
		sent = t.oauth.token(req.Context())
		req.Header.Set("Authorization", "Bearer "+sent)
		resp, err = t.base.RoundTrip(req)
	}
	if err == nil && refusal(resp.StatusCode) {
		t.mu.Lock()
		t.status, t.challenge = resp.StatusCode, resp.Header.Get("WWW-Authenticate")
		t.mu.Unlock()
	}
	return resp, err
}

func refusal(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// oauthFailure returns why the last OAuth login failed, if it did.
func (t *headerTransport) oauthFailure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.oauthErr
}

// refused returns the last 401 or 403 status seen, if any.
func (t *headerTransport) refused() (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status, t.challenge
}

// IsLoopbackURL reports whether a URL names a loopback host, where plain
// HTTP does not cross a network.
func IsLoopbackURL(u *url.URL) bool {
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

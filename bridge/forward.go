package bridge

// Forwarding among the instances of one deployment (session affinity). The
// session ID names the instance that owns the session (package affinity);
// any instance receiving a request whose ID names another owner
// reverse-proxies it there, streaming (SSE events are flushed as they
// arrive). The ID is read from Mcp-Session-Id, or, for the legacy HTTP+SSE
// transport, from the sessionId query parameter of a POST to the message
// endpoint (sse_legacy.go): the legacy SSE stream stays on the instance
// where its GET landed, and every POST of the session reaches it. Three
// rules keep this safe:
//
//   - Only IDs with a valid MAC are forwarded (affinity.Instance.Owner).
//     Without the secret nobody can make an instance send requests to an
//     address of their choosing (SSRF); an unknown, tampered or foreign ID
//     is served locally, where the session registry answers 404 because it
//     does not know it.
//   - A forwarded request carries HopHeader and is never forwarded again, so
//     a misconfigured address cannot loop.
//   - An owner that cannot be reached (its task stopped, its address now
//     refuses connections) is answered 404, which the MCP specification gives
//     as the signal to start a new session: "The server MAY terminate the
//     session at any time, after which it MUST respond to requests containing
//     that session ID with HTTP 404 Not Found" (basic/transports, 2025-06-18).
//
// A forwarded request never carries the client's credentials: an instance holding the secret can name any address as owner,
// and the secret used to reach every local server in its environment, so
// an owner is not trusted with the client's bearer token. Instead:
//
//   - The forwarding instance authenticates the client itself (all
//     instances accept the same tokens, ForwarderOptions.Tokens). A request
//     without a valid token is not forwarded: it is served locally, where
//     the bridge answers 401.
//   - It removes Authorization and adds ForwardAuthHeader, the client's
//     principal (the hex SHA-256 of its token, empty without tokens) signed
//     for the owner and the session (affinity.Instance.SignPrincipal).
//   - The owner verifies it against its own address, the session ID and
//     the time (affinity.Instance.VerifyPrincipal); then it puts back the one
//     of its own tokens whose hash is the principal, so the bridge
//     authenticates the request, and binds it to the session's principal,
//     exactly as if the client had come directly. A header that fails any
//     check leaves the request without Authorization: 401.
//
// So a forged owner receives a hash of the token, which is of no use at a
// real instance without the secret, and a header that no other owner, and
// no other session, accepts. An instance holding the secret is trusted to
// act for the clients whose requests reach it: that is what an instance
// is; keep the secret from anything else (the bridge keeps every BRIDGE_*
// variable from its servers).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// HopHeader marks a request that one instance forwarded to another. Its
// value is the forwarding instance's address, for the owner's logs. A request
// that carries it is never forwarded again.
const HopHeader = "Mcp-Bridge-Forwarded-By"

// ForwardAuthHeader carries a forwarded request's principal, signed for one
// owner and one session (affinity.Instance.SignPrincipal).
const ForwardAuthHeader = "Mcp-Bridge-Forward-Auth"

// DefaultForwardDialTimeout bounds how long a forwarding instance waits to
// connect to an owner before it declares the owner gone and answers 404.
const DefaultForwardDialTimeout = 5 * time.Second

// ForwarderOptions configure a Forwarder. Every zero value means the
// documented default.
type ForwarderOptions struct {
	// Tokens are the bearer tokens the bridge accepts, the same on every
	// instance. The forwarder checks them before forwarding and restores the
	// client's on the owner (see forward.go). Empty means the bridge checks
	// none: requests are forwarded, without Authorization.
	Tokens []string
	// Logger receives one line per forwarded request that fails. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Transport carries forwarded requests. Nil means a transport that
	// ignores HTTP_PROXY (instances talk to each other directly), connects
	// within DialTimeout and sets no response timeout (SSE streams are long).
	Transport http.RoundTripper
	// DialTimeout bounds connecting to an owner when Transport is nil.
	// Zero means DefaultForwardDialTimeout.
	DialTimeout time.Duration
}

// A Forwarder sends each request for a session owned by another instance
// to that instance, over HTTP. Its methods are safe for concurrent use.
type Forwarder struct {
	inst   *affinity.Instance
	self   string
	logger *slog.Logger
	proxy  *httputil.ReverseProxy
	// tokens maps the principal (hex SHA-256) of each accepted token to it.
	tokens map[string]string
	now    func() time.Time // time.Now; tests move it
	// ownTransport is the transport NewForwarder made, closed by Close;
	// nil when the caller supplied ForwarderOptions.Transport (the caller owns it).
	ownTransport *http.Transport
}

// NewForwarder returns a Forwarder for this instance of a deployment.
func NewForwarder(inst *affinity.Instance, opts *ForwarderOptions) *Forwarder {
	var o ForwarderOptions
	if opts != nil {
		o = *opts
	}
	f := &Forwarder{
		inst:   inst,
		self:   inst.Self(),
		logger: o.Logger,
		tokens: map[string]string{},
		now:    time.Now,
	}
	for _, t := range o.Tokens {
		if t != "" {
			f.tokens[principal(t)] = t
		}
	}
	if f.logger == nil {
		f.logger = slog.Default()
	}
	transport := o.Transport
	if transport == nil {
		dt := o.DialTimeout
		if dt <= 0 {
			dt = DefaultForwardDialTimeout
		}
		f.ownTransport = &http.Transport{
			// Proxy is nil on purpose: an HTTP_PROXY meant for the internet
			// must not carry traffic between instances of one deployment.
			DialContext:         (&net.Dialer{Timeout: dt, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     90 * time.Second,
		}
		transport = f.ownTransport
	}
	f.proxy = &httputil.ReverseProxy{
		Rewrite:   f.rewrite,
		Transport: transport,
		// -1 flushes after every write: an SSE event must reach the client
		// when the owner sends it, not when a buffer fills.
		FlushInterval: -1,
		ErrorHandler:  f.proxyError,
		ErrorLog:      log.New(slogWriter{f.logger}, "", 0),
	}
	return f
}

// Close releases idle connections to other instances. Call it after the HTTP
// server has shut down. Requests still being forwarded are not interrupted.
func (f *Forwarder) Close() {
	if f.ownTransport != nil {
		f.ownTransport.CloseIdleConnections()
	}
}

// Context keys of a request being forwarded, for rewrite and proxyError.
type (
	ownerKey   struct{} // the owner's address
	forwardKey struct{} // the client's principal
	stateKey   struct{} // a requestState (2026-07-28) sent it, not a session ID
)

// principal names a token without revealing it.
func principal(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// forwardedSession is the session ID that decides where a request goes:
// Mcp-Session-Id, or the sessionId of a POST to a legacy message endpoint
// (/message beside /mcp, /servers/NAME/message beside /servers/NAME/mcp).
// Both the forwarding instance and the owner read it here, so the signed
// principal is bound to the same ID on both.
func forwardedSession(req *http.Request) (id string, legacy bool) {
	if id := headerValue(req.Header, hdrSessionID); id != "" {
		return id, false
	}
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, DefaultLegacyMessagePath) {
		return req.URL.Query().Get(legacySessionParam), true
	}
	return "", false
}

// bearer returns the principal of the request's bearer token, and whether
// it is one of the accepted tokens. Without tokens, every request passes,
// with an empty principal.
func (f *Forwarder) bearer(req *http.Request) (string, bool) {
	if len(f.tokens) == 0 {
		return "", true
	}
	scheme, tok, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	p := principal(strings.TrimSpace(tok))
	// A map lookup of a hash: the time it takes says nothing useful about
	// the token.
	_, ok = f.tokens[p]
	return p, ok
}

// acceptForwarded replaces the credentials of a request that carries
// ForwardAuthHeader: the client's own token if the header verifies for this
// instance and the request's session, none otherwise.
func (f *Forwarder) acceptForwarded(req *http.Request) {
	v := req.Header.Get(ForwardAuthHeader)
	req.Header.Del(ForwardAuthHeader)
	req.Header.Del("Authorization")
	id, _ := forwardedSession(req)
	p, err := f.inst.VerifyPrincipal(v, id, f.now())
	if err == nil && p != "" { // "": no tokens on the forwarding instance
		tok, ok := f.tokens[p]
		if !ok {
			err = errors.New("its principal's token is not accepted here; do all instances share the same tokens?")
		} else {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	if err != nil {
		f.logger.Warn("affinity: refusing the credentials of a forwarded request",
			"session", session.LogForm(f.logger, id), "forwarded_by", req.Header.Get(HopHeader), "reason", err.Error())
	}
}

// Wrap returns a handler that forwards each request whose session ID names
// another instance to that instance, and hands every other request to next:
// requests without a session ID (initialize, GET /sse, /healthz), sessions
// this instance owns, IDs that fail verification, and requests another
// instance already forwarded.
func (f *Forwarder) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, ok := req.Header[ForwardAuthHeader]; ok {
			f.acceptForwarded(req)
		}
		id, _ := forwardedSession(req)
		if id == "" {
			next.ServeHTTP(w, req)
			return
		}
		owner, ok := f.inst.Owner(id)
		if !ok || owner == f.self {
			next.ServeHTTP(w, req)
			return
		}
		if from := headerValue(req.Header, HopHeader); from != "" {
			// The instance at `from` believed we own this session, but the
			// ID names someone else: our address differs from the one it
			// dialled (an alias, or a reused IP). Forwarding again could
			// loop; serving locally answers 404, so the client starts over.
			f.logger.Warn("affinity: not forwarding a request twice; serving it here",
				"session", session.LogForm(f.logger, id), "owner", owner, "self", f.self, "forwarded_by", from)
			next.ServeHTTP(w, req)
			return
		}
		p, ok := f.bearer(req)
		if !ok {
			// Only an authenticated client is forwarded: served here, the
			// bridge answers 401.
			next.ServeHTTP(w, req)
			return
		}
		// By default an HTTP/1 server reads and closes what is left of the
		// request body when the handler first writes its response. Here the
		// body is still being copied to the owner by the transport, which
		// reads it once more after the last byte to check for extra data:
		// if the owner answers first (it does, as soon as it has the whole
		// message), the two race, the transport's read fails, and it closes
		// the connection in the middle of the owner's SSE stream. Full
		// duplex leaves the body to the transport alone.
		_ = http.NewResponseController(w).EnableFullDuplex()
		ctx := context.WithValue(req.Context(), ownerKey{}, owner)
		ctx = context.WithValue(ctx, forwardKey{}, p)
		f.serveProxy(w, req.WithContext(ctx))
	})
}

// serveProxy forwards req. With full duplex, the transport may still be
// reading the request body when ReverseProxy returns (the owner answered,
// or the client went away, before the transport was done with the body),
// and net/http forbids reading a request body once its handler has
// returned: it panics ("invalid concurrent Body.Read call") and drops the
// client's connection. Seen in the legacy transport's tests, whose POSTs
// are answered 202 at once, when clients dropped their sessions. So the
// body is handed over in a heldBody, taken back (waiting for a read in
// flight), and read to its end within the handler, as net/http itself
// does without full duplex.
func (f *Forwarder) serveProxy(w http.ResponseWriter, req *http.Request) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		f.proxy.ServeHTTP(w, req)
		return
	}
	b := &heldBody{body: req.Body, left: req.ContentLength}
	req.Body = b
	f.proxy.ServeHTTP(w, req)
	b.takeBack(http.NewResponseController(w))
}

// errBodyTakenBack fails the transport's reads of a heldBody after its
// handler returned; the transport then drops its connection to the owner,
// which has answered already.
var errBodyTakenBack = errors.New("the forwarded request was answered before its body was sent")

// heldBody lends a request body to the transport until takeBack. Its
// reads stop at the declared length without touching the request body
// again, so that the transport's look for extra data cannot race the end
// of the handler in the common case, where the whole body was sent.
type heldBody struct {
	mu    sync.Mutex // held for each read of body
	body  io.ReadCloser
	left  int64 // bytes still to come; -1: unknown (chunked)
	taken bool  // takeBack was called: reads fail
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.left == 0:
		return 0, io.EOF
	case b.taken:
		return 0, errBodyTakenBack
	case b.left > 0 && int64(len(p)) > b.left:
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err == io.EOF {
		b.left = 0
	}
	return n, err
}

// Close does nothing: the request body is the server's to close.
func (b *heldBody) Close() error { return nil }

// maxBodyDrain bounds what takeBack reads of a body the owner did not
// take, as net/http bounds its own discarding (256 KiB). Beyond it,
// net/http closes the connection after the answer without reading more.
const maxBodyDrain = 256 << 10

// takeBack waits for a read in flight, fails the later ones, and reads the
// rest of the body to its end (see serveProxy), as net/http does for a
// handler without full duplex: a client sending the rest of its body is
// waited for as long there. The answer is flushed first when the body is
// still awaited: a client may wait for it before sending more.
func (b *heldBody) takeBack(rc *http.ResponseController) {
	if !b.mu.TryLock() {
		_ = rc.Flush()
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.left != 0 {
		_ = rc.Flush()
	}
	b.taken = true
	switch {
	case b.left < 0:
		_, _ = io.CopyN(io.Discard, b.body, maxBodyDrain)
	case b.left <= maxBodyDrain:
		// One byte beyond the declared length: the read that finds the end.
		_, _ = io.CopyN(io.Discard, b.body, b.left+1)
	}
}

// Forward sends a request to the instance owner, as Wrap does for sessions,
// for a front end that found the owner elsewhere than in the session ID: a
// retry of revision 2026-07-28 whose requestState names the instance that
// holds the parked call (Options.Forward). The caller must have verified
// the owner under the shared secret (a forged name is never forwarded),
// and req.Body must hold the whole body again. A request another instance
// already forwarded is not forwarded twice: it is answered 502.
func (f *Forwarder) Forward(w http.ResponseWriter, req *http.Request, owner string) {
	if from := headerValue(req.Header, HopHeader); from != "" || owner == f.self {
		f.logger.Warn("affinity: not forwarding a request twice (its requestState names another instance)",
			"owner", owner, "self", f.self, "forwarded_by", from)
		WriteError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
			"Bad Gateway: the bridge instance holding this request could not be reached; send the request again without requestState", nil)
		return
	}
	// The front end served the request behind the same authentication,
	// so its token is one of ours (or, without tokens, there is none):
	// the owner gets its principal, as Wrap passes it on.
	p, _ := f.bearer(req)
	_ = http.NewResponseController(w).EnableFullDuplex()
	ctx := context.WithValue(req.Context(), ownerKey{}, owner)
	ctx = context.WithValue(ctx, forwardKey{}, p)
	f.serveProxy(w, req.WithContext(context.WithValue(ctx, stateKey{}, true)))
}

func (f *Forwarder) rewrite(pr *httputil.ProxyRequest) {
	owner := pr.In.Context().Value(ownerKey{}).(string)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = owner
	// Keep the Host the client sent: the owner checks it (and Origin) the
	// same way whichever instance the load balancer picked.
	pr.Out.Host = pr.In.Host
	// ReverseProxy drops the X-Forwarded-* headers before Rewrite, so that
	// a client cannot spoof them. The ones on In were set by the load
	// balancer in front of us (its X-Forwarded-Proto says whether the
	// client used HTTPS); keep them and add this hop to the chain.
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port", "Forwarded"} {
		if v, ok := pr.In.Header[h]; ok {
			pr.Out.Header[h] = v
		}
	}
	if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		if prior := pr.Out.Header.Get("X-Forwarded-For"); prior != "" {
			pr.Out.Header.Set("X-Forwarded-For", prior+", "+ip)
		} else {
			pr.Out.Header.Set("X-Forwarded-For", ip)
		}
	}
	pr.Out.Header.Set(HopHeader, f.self)
	// The client's credentials stay here; the owner gets the principal,
	// signed for it alone (see the top of this file).
	pr.Out.Header.Del("Authorization")
	p, _ := pr.In.Context().Value(forwardKey{}).(string)
	id, _ := forwardedSession(pr.In)
	pr.Out.Header.Set(ForwardAuthHeader, f.inst.SignPrincipal(owner, id, p, f.now()))
}

// proxyError answers a request that could not be forwarded.
func (f *Forwarder) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	owner, _ := req.Context().Value(ownerKey{}).(string)
	id, legacy := forwardedSession(req)
	if req.Context().Err() != nil {
		// The client went away; there is nobody to answer.
		return
	}
	var op *net.OpError
	dial := errors.As(err, &op) && op.Op == "dial"
	switch {
	case dial && req.Context().Value(stateKey{}) != nil:
		f.logger.Info("affinity: the instance holding a parked request is unreachable", "owner", owner, "err", err)
		WriteError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
			"Bad Gateway: the bridge instance holding this request is gone; send the request again without requestState", nil)
	case dial:
		// Nobody listens at the owner's address any more: its task stopped
		// or is shutting down, and the session ended with it.
		f.logger.Info("affinity: the session's owner is unreachable; answering 404 so the client starts a new session",
			"session", session.LogForm(f.logger, id), "owner", owner, "err", err)
		// The answer of the Handler itself for an unknown session.
		restart := "start a new session with initialize"
		if legacy {
			restart = "open a new SSE stream"
		}
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: the bridge instance that held this session is gone; "+restart, nil)
	default:
		f.logger.Warn("affinity: forwarding to the session's owner failed",
			"session", session.LogForm(f.logger, id), "owner", owner, "err", err)
		WriteError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
			"Bad Gateway: the bridge instance holding this session did not answer; retry the request", nil)
	}
}

// slogWriter lets ReverseProxy's log.Logger write into slog.
type slogWriter struct{ l *slog.Logger }

func (s slogWriter) Write(p []byte) (int, error) {
	s.l.Warn("affinity: reverse proxy", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

// Package affinity keeps every request of an MCP session on the bridge
// instance that holds the session's child, when several instances run behind
// a load balancer that spreads requests among them.
//
// A session lives in one process: its child's stdio pipes, its in-flight
// requests and its event log cannot move. An AWS Application Load Balancer
// cannot route on a request header (Mcp-Session-Id), and many MCP clients
// keep no cookies, so neither header routing nor a stickiness cookie can be
// relied on. Instead the session ID itself names its owner:
//
//	<random>.<owner>.<mac>
//
// random is 128 bits from crypto/rand, owner is the owner's reachable
// "host:port", and mac is an HMAC-SHA256 over both under a secret that all
// instances of one deployment share. Each part is unpadded base64url, so the
// whole ID is visible ASCII (0x21-0x7E) as the MCP specification requires of
// session IDs.
//
// Any instance receiving a request whose ID names another owner
// reverse-proxies it there, streaming (SSE events are flushed as they
// arrive). Three rules keep this safe:
//
//   - Only IDs with a valid MAC are forwarded. Without the secret nobody can
//     make an instance send requests to an address of their choosing (SSRF);
//     an unknown, tampered or foreign ID is served locally, where the session
//     registry answers 404 because it does not know it.
//   - A forwarded request carries HopHeader and is never forwarded again, so
//     a misconfigured address cannot loop.
//   - An owner that cannot be reached (its task stopped, its address now
//     refuses connections) is answered 404, which the MCP specification gives
//     as the signal to start a new session: "The server MAY terminate the
//     session at any time, after which it MUST respond to requests containing
//     that session ID with HTTP 404 Not Found" (basic/transports, 2025-06-18).
//
// A forwarded request never carries the client's credentials (issue 13,
// item 2): an instance holding the secret can name any address as owner,
// and the secret used to reach every local server in its environment, so
// an owner is not trusted with the client's bearer token. Instead:
//
//   - The forwarding instance authenticates the client itself (all
//     instances accept the same tokens, Options.Tokens). A request without
//     a valid token is not forwarded: it is served locally, where the
//     bridge answers 401.
//   - It removes Authorization and adds ForwardAuthHeader:
//     "<unix time>.<principal>.<mac>", where principal is the hex SHA-256 of
//     the client's token (empty without tokens) and mac an HMAC-SHA256,
//     under the shared secret, over the owner's address, the session ID,
//     the time and the principal.
//   - The owner checks the MAC against its own address and the session ID,
//     and the time within ForwardAuthMaxAge; then it puts back the one of
//     its own tokens whose hash is the principal, so the bridge
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
//
// All instances of a deployment must share the secret. Changing it ends
// every session: their IDs no longer verify, so they are served where they
// land and answered 404.
package affinity

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// SessionHeader is the MCP session header; the router reads nothing else.
const SessionHeader = "Mcp-Session-Id"

// HopHeader marks a request that one instance forwarded to another. Its
// value is the forwarding instance's address, for the owner's logs. A request
// that carries it is never forwarded again.
const HopHeader = "Mcp-Bridge-Forwarded-By"

// ForwardAuthHeader carries a forwarded request's principal, authenticated
// for one owner and one session; see the package doc.
const ForwardAuthHeader = "Mcp-Bridge-Forward-Auth"

// ForwardAuthMaxAge bounds how old (or, with clocks apart, how far in the
// future) a ForwardAuthHeader may be. It covers clock skew between instances
// and the time a request body takes to arrive: the header is checked before
// the body is read.
const ForwardAuthMaxAge = 2 * time.Minute

// MinSecretBytes is the shortest accepted Secret.
const MinSecretBytes = 32

// DefaultDialTimeout bounds how long a forwarding instance waits to connect
// to an owner before it declares the owner gone and answers 404.
const DefaultDialTimeout = 5 * time.Second

// Sizes of the ID parts, in bytes before encoding.
const (
	randomBytes = 16 // 128 bits
	macBytes    = 16 // HMAC-SHA256 truncated to 128 bits
)

// macDomain separates these MACs from any other use of the same secret and
// versions the format: a later format uses another string.
const macDomain = "mcp-bridge affinity session id v1\x00"

// forwardDomain separates the forwarded-principal MACs from the session IDs'.
const forwardDomain = "mcp-bridge affinity forwarded principal v1\x00"

// b64 is strict so that each ID has one spelling: the lenient decoder
// ignores the unused low bits of the last character, and the registry looks
// sessions up by the exact string.
var b64 = base64.RawURLEncoding.Strict()

// Options configures a Router. Self and Secret are required.
type Options struct {
	// Self is this instance's address as the other instances reach it,
	// "host:port" ("10.0.3.7:8080"). It is written into every session ID this
	// instance mints. It must not be an unspecified address such as 0.0.0.0.
	// On ECS, ResolveSelf finds it through the task metadata endpoint.
	Self string
	// Secret authenticates the owner address in session IDs. Every instance
	// of one deployment must use the same secret; at least MinSecretBytes.
	Secret []byte
	// Tokens are the bearer tokens the bridge accepts, the same on every
	// instance. The router checks them before forwarding and restores the
	// client's on the owner (see the package doc). Empty means the bridge
	// checks none: requests are forwarded, without Authorization.
	Tokens []string
	// Logger receives one line per forwarded request that fails. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Transport carries forwarded requests. Nil means a transport that
	// ignores HTTP_PROXY (instances talk to each other directly), connects
	// within DialTimeout and sets no response timeout (SSE streams are long).
	Transport http.RoundTripper
	// DialTimeout bounds connecting to an owner when Transport is nil.
	// Zero means DefaultDialTimeout.
	DialTimeout time.Duration
}

// A Router mints session IDs that name this instance and forwards requests
// for sessions owned by other instances. Its methods are safe for concurrent
// use.
type Router struct {
	self   string
	secret []byte
	logger *slog.Logger
	proxy  *httputil.ReverseProxy
	// tokens maps the principal (hex SHA-256) of each accepted token to it.
	tokens map[string]string
	now    func() time.Time // time.Now; tests move it
	// ownTransport is the transport New made, closed by Close; nil when the
	// caller supplied Options.Transport (the caller owns it then).
	ownTransport *http.Transport
}

// New returns a Router, or an error saying which option is wrong.
func New(opts *Options) (*Router, error) {
	if opts == nil {
		return nil, errors.New("affinity: options are required (Self and Secret)")
	}
	if err := checkAddr(opts.Self); err != nil {
		return nil, fmt.Errorf("affinity: this instance's address %q: %w; set it to the host:port other instances reach it at", opts.Self, err)
	}
	if len(opts.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("affinity: the secret is %d bytes, need at least %d shared by all instances (for example the output of `openssl rand -hex 32`)", len(opts.Secret), MinSecretBytes)
	}
	r := &Router{
		self:   opts.Self,
		secret: bytes.Clone(opts.Secret),
		logger: opts.Logger,
		tokens: map[string]string{},
		now:    time.Now,
	}
	for _, t := range opts.Tokens {
		if t != "" {
			r.tokens[principal(t)] = t
		}
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	transport := opts.Transport
	if transport == nil {
		dt := opts.DialTimeout
		if dt <= 0 {
			dt = DefaultDialTimeout
		}
		r.ownTransport = &http.Transport{
			// Proxy is nil on purpose: an HTTP_PROXY meant for the internet
			// must not carry traffic between instances of one deployment.
			DialContext:         (&net.Dialer{Timeout: dt, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     90 * time.Second,
		}
		transport = r.ownTransport
	}
	r.proxy = &httputil.ReverseProxy{
		Rewrite:   r.rewrite,
		Transport: transport,
		// -1 flushes after every write: an SSE event must reach the client
		// when the owner sends it, not when a buffer fills.
		FlushInterval: -1,
		ErrorHandler:  r.proxyError,
		ErrorLog:      log.New(slogWriter{r.logger}, "", 0),
	}
	return r, nil
}

// Self returns the address this instance writes into the IDs it mints.
func (r *Router) Self() string { return r.self }

// Close releases idle connections to other instances. Call it after the HTTP
// server has shut down. Requests still being forwarded are not interrupted.
func (r *Router) Close() {
	if r.ownTransport != nil {
		r.ownTransport.CloseIdleConnections()
	}
}

// NewID returns a fresh session ID owned by this instance. It is meant for
// session.Options.NewID.
func (r *Router) NewID() (string, error) {
	random := make([]byte, randomBytes)
	if _, err := rand.Read(random); err != nil {
		return "", fmt.Errorf("affinity: cannot read random bytes for a session ID: %w", err)
	}
	head := b64.EncodeToString(random) + "." + b64.EncodeToString([]byte(r.self))
	return head + "." + b64.EncodeToString(r.mac(head)), nil
}

// Owner returns the owner address named by a session ID, and whether the ID
// was minted by an instance holding the same secret. It returns false for
// any ID it did not verify; such IDs are never forwarded.
func (r *Router) Owner(id string) (string, bool) {
	// The MAC covers everything before the last dot, so split there.
	dot := strings.LastIndexByte(id, '.')
	if dot < 0 {
		return "", false
	}
	head, tag := id[:dot], id[dot+1:]
	parts := strings.Split(head, ".")
	if len(parts) != 2 {
		return "", false
	}
	got, err := b64.DecodeString(tag)
	if err != nil || len(got) != macBytes || !hmac.Equal(got, r.mac(head)) {
		return "", false
	}
	if random, err := b64.DecodeString(parts[0]); err != nil || len(random) != randomBytes {
		return "", false
	}
	owner, err := b64.DecodeString(parts[1])
	if err != nil || checkAddr(string(owner)) != nil {
		return "", false
	}
	return string(owner), true
}

func (r *Router) mac(head string) []byte {
	m := hmac.New(sha256.New, r.secret)
	m.Write([]byte(macDomain))
	m.Write([]byte(head))
	return m.Sum(nil)[:macBytes]
}

type ownerKey struct{}

// forwardKey holds the forwarded request's principal, for rewrite.
type forwardKey struct{}

// principal names a token without revealing it.
func principal(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// bearer returns the principal of the request's bearer token, and whether
// it is one of the accepted tokens. Without tokens, every request passes,
// with an empty principal.
func (r *Router) bearer(req *http.Request) (string, bool) {
	if len(r.tokens) == 0 {
		return "", true
	}
	scheme, tok, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	p := principal(strings.TrimSpace(tok))
	// A map lookup of a hash: the time it takes says nothing useful about
	// the token.
	_, ok = r.tokens[p]
	return p, ok
}

// forwardMAC authenticates a principal for one owner, session and time.
func (r *Router) forwardMAC(owner, session, ts, principal string) string {
	m := hmac.New(sha256.New, r.secret)
	for _, s := range []string{forwardDomain, owner, session, ts, principal} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return b64.EncodeToString(m.Sum(nil)[:macBytes])
}

// acceptForwarded replaces the credentials of a request that carries
// ForwardAuthHeader: the client's own token if the header verifies for this
// instance and the request's session, none otherwise.
func (r *Router) acceptForwarded(req *http.Request) {
	v := req.Header.Get(ForwardAuthHeader)
	req.Header.Del(ForwardAuthHeader)
	req.Header.Del("Authorization")
	why := func() string {
		parts := strings.Split(v, ".")
		if len(parts) != 3 {
			return "malformed"
		}
		ts, p, mac := parts[0], parts[1], parts[2]
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return "malformed"
		}
		want := r.forwardMAC(r.self, req.Header.Get(SessionHeader), ts, p)
		if !hmac.Equal([]byte(mac), []byte(want)) {
			return "its MAC does not verify for this instance and session"
		}
		if age := r.now().Sub(time.Unix(sec, 0)); age > ForwardAuthMaxAge || age < -ForwardAuthMaxAge {
			return "it is too old, or the instances' clocks are apart by more than " + ForwardAuthMaxAge.String()
		}
		if p == "" {
			return "" // no tokens on the forwarding instance
		}
		tok, ok := r.tokens[p]
		if !ok {
			return "its principal's token is not accepted here; do all instances share the same tokens?"
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return ""
	}()
	if why != "" {
		r.logger.Warn("affinity: refusing the credentials of a forwarded request",
			"session", req.Header.Get(SessionHeader), "forwarded_by", req.Header.Get(HopHeader), "reason", why)
	}
}

// Wrap returns a handler that forwards each request whose session ID names
// another instance to that instance, and hands every other request to next:
// requests without a session ID (initialize, /healthz), sessions this
// instance owns, IDs that fail verification, and requests another instance
// already forwarded.
func (r *Router) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, ok := req.Header[ForwardAuthHeader]; ok {
			r.acceptForwarded(req)
		}
		id := req.Header.Get(SessionHeader)
		if id == "" {
			next.ServeHTTP(w, req)
			return
		}
		owner, ok := r.Owner(id)
		if !ok || owner == r.self {
			next.ServeHTTP(w, req)
			return
		}
		if from := req.Header.Get(HopHeader); from != "" {
			// The instance at `from` believed we own this session, but the
			// ID names someone else: our address differs from the one it
			// dialled (an alias, or a reused IP). Forwarding again could
			// loop; serving locally answers 404, so the client starts over.
			r.logger.Warn("affinity: not forwarding a request twice; serving it here",
				"session", session.LogForm(r.logger, id), "owner", owner, "self", r.self, "forwarded_by", from)
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
		p, ok := r.bearer(req)
		if !ok {
			// Only an authenticated client is forwarded: served here, the
			// bridge answers 401.
			next.ServeHTTP(w, req)
			return
		}
		_ = http.NewResponseController(w).EnableFullDuplex()
		ctx := context.WithValue(req.Context(), ownerKey{}, owner)
		ctx = context.WithValue(ctx, forwardKey{}, p)
		r.proxy.ServeHTTP(w, req.WithContext(ctx))
	})
}

func (r *Router) rewrite(pr *httputil.ProxyRequest) {
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
	pr.Out.Header.Set(HopHeader, r.self)
	// The client's credentials stay here; the owner gets the principal,
	// authenticated for it alone (see the package doc).
	pr.Out.Header.Del("Authorization")
	ts := strconv.FormatInt(r.now().Unix(), 10)
	p, _ := pr.In.Context().Value(forwardKey{}).(string)
	pr.Out.Header.Set(ForwardAuthHeader, ts+"."+p+"."+r.forwardMAC(owner, pr.In.Header.Get(SessionHeader), ts, p))
}

// proxyError answers a request that could not be forwarded.
func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	owner, _ := req.Context().Value(ownerKey{}).(string)
	id := req.Header.Get(SessionHeader)
	if req.Context().Err() != nil {
		// The client went away; there is nobody to answer.
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && req.Context().Value(stateKey{}) != nil {
		r.logger.Info("affinity: the instance holding a parked request is unreachable", "owner", owner, "err", err)
		bridge.WriteError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
			"Bad Gateway: the bridge instance holding this request is gone; send the request again without requestState", nil)
		return
	}
	if errors.As(err, &op) && op.Op == "dial" {
		// Nobody listens at the owner's address any more: its task stopped
		// or is shutting down, and the session ended with it.
		r.logger.Info("affinity: the session's owner is unreachable; answering 404 so the client starts a new session",
			"session", session.LogForm(r.logger, id), "owner", owner, "err", err)
		// The answer of the Handler itself for an unknown session.
		bridge.WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: the bridge instance that held this session is gone; start a new session with initialize", nil)
		return
	}
	r.logger.Warn("affinity: forwarding to the session's owner failed",
		"session", session.LogForm(r.logger, id), "owner", owner, "err", err)
	bridge.WriteError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
		"Bad Gateway: the bridge instance holding this session did not answer; retry the request", nil)
}

// checkAddr accepts "host:port" with a non-empty host that other instances
// can dial, and a numeric port.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return errors.New("an unspecified address cannot be dialled by other instances")
	}
	for _, c := range host {
		if c <= 0x20 || c >= 0x7f {
			return errors.New("the host has a character outside visible ASCII")
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("the port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// slogWriter lets ReverseProxy's log.Logger write into slog.
type slogWriter struct{ l *slog.Logger }

func (s slogWriter) Write(p []byte) (int, error) {
	s.l.Warn("affinity: reverse proxy", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

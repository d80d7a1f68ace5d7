// Package bridge is the bridge's HTTP front end: everything HTTP, for
// every era of MCP a client may speak, in front of the packages that hold
// the sessions and the children.
//
// A Handler serves one configured server's endpoint (by default /mcp):
//
//   - MCP Streamable HTTP of revisions 2025-03-26 through 2025-11-25, in
//     front of the sessions of package session (bridge.go);
//   - revision 2026-07-28, stateless, on the same endpoint: a POST with
//     that MCP-Protocol-Version and no Mcp-Session-Id is served by package
//     pool, with the revision's headers, _meta and status codes, and
//     keep-alives on its long calls (stateless.go,
//     stateless_keepalive.go);
//   - the legacy HTTP+SSE transport of revision 2024-11-05, beside it
//     (/sse and /message), on sessions of the same registry
//     (sse_legacy.go);
//
// and, on the same listener, /healthz, /readyz, /metrics (Options.Metrics)
// and the OAuth protected resource metadata. Servers serves several
// configured servers from one listener, each under /servers/NAME/ by a
// Handler of its own, replaced and drained on a reload (servers.go). A
// Forwarder sends a request to the bridge instance that owns its session
// or its parked call, when several instances share a load balancer
// (forward.go). The listener's limits (connections, header and body
// deadlines) are LimitOptions (limit.go), its connection limit leaves
// descriptors to the servers (ConnectionLimit, fdlimit.go), and its TLS
// certificate is reloaded in place (NewTLSConfig, tls.go).
//
// It owns methods and status codes, the Accept, Content-Type, Origin,
// Host, Authorization, Mcp-Session-Id, MCP-Protocol-Version and
// Last-Event-ID headers, body limits and SSE framing; it authenticates
// each request with package auth. Status codes are chosen here only;
// packages session and pool report sentinel errors.
//
// Every SSE event of a 2025 session carries the ID of its position in the
// session's event log and is written to the connection only after it
// entered the log, so a broken connection loses nothing: the client
// resumes with GET and Last-Event-ID.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Defaults of Options.
const (
	DefaultPath     = "/mcp"
	DefaultSSERetry = time.Second
	// DefaultBodyReadTimeout bounds the reading of one POST body: a client
	// that stalls mid-body would otherwise hold its connection forever.
	// 16 MiB (the default message limit) arrives within it at about 4.5 Mbit/s.
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds each write to a client: one SSE event
	// (with its flush) or one JSON answer. A client that stops reading
	// loses its connection after it; an open stream is never cut by it,
	// however long it waits between events.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultMaxBodyBytesInFlight bounds the memory held by POST bodies
	// being read, all connections together: 16 bodies of 16 MiB (the
	// default message limit) at once.
	DefaultMaxBodyBytesInFlight = 256 << 20
	// DefaultIdleTimeout is how long a keep-alive connection may wait for
	// its next request (http.Server.IdleTimeout, set by the command).
	DefaultIdleTimeout = 90 * time.Second
	// DefaultSSEKeepAlive is how long an SSE stream may stay quiet before
	// it gets a comment line: below the idle timeouts of the usual proxies
	// and load balancers (60 s for an AWS ALB and nginx's
	// proxy_read_timeout, 30 s for some), which otherwise cut a stream
	// that waits for a slow tool or for the server's next notification.
	// The same as the stateless front end's.
	DefaultSSEKeepAlive = pool.DefaultKeepAlive
)

// Options configure a Handler. Every zero value means the documented default.
type Options struct {
	// Path is the MCP endpoint. Empty means DefaultPath.
	Path string
	// AllowedOrigins lists the Origin values accepted besides loopback
	// origins (http://localhost:*, http://127.0.0.1:*, http://[::1]:*).
	// "*" accepts any origin. A request without Origin is accepted (it does
	// not come from a browser page).
	AllowedOrigins []string
	// AllowedHosts, when not empty, lists the Host header values accepted
	// (with or without port; "*" accepts any). Nil accepts any Host. The
	// command sets it to the loopback names when listening on loopback: a
	// DNS rebinding attack reaches the bridge with the attacker's host name.
	AllowedHosts []string
	// AuthTokens, when not empty, are the bearer tokens accepted; a request
	// without one of them gets 401. Empty means no authentication. Ignored
	// when Auth is set.
	AuthTokens []string
	// Auth authenticates requests (static tokens, OAuth 2.1) and serves the
	// protected resource metadata. Nil means AuthTokens alone.
	Auth *auth.Authenticator
	// JSONResponse answers requests with one application/json body instead
	// of an SSE stream. Messages the server sends meanwhile then go to the
	// standalone (GET) stream, and the answer cannot be resumed.
	JSONResponse bool
	// SSEPollAfter, when positive, closes the connection of an SSE stream
	// after this long without ending the stream: the client resumes it with
	// GET and Last-Event-ID ("polling", revision 2025-11-25). Zero keeps
	// connections open until the stream ends.
	SSEPollAfter time.Duration
	// SSERetry is the reconnection delay announced with the retry field
	// when SSEPollAfter is set. Zero means DefaultSSERetry.
	SSERetry time.Duration
	// SSEKeepAlive is how long an SSE stream (of a session, or of the
	// legacy transport) may stay quiet before the handler writes a comment
	// line on it, so that proxies with an idle timeout leave it open. A
	// comment carries no event ID: resumption is unaffected. Zero means
	// DefaultSSEKeepAlive; negative means none.
	SSEKeepAlive time.Duration
	// BodyReadTimeout bounds the reading of a POST body, from the end of
	// its headers; a body still incomplete then gets 408 and the connection
	// closes. It applies to the body only, never to a stream. Zero means
	// DefaultBodyReadTimeout; negative means no limit.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each write to the client: one SSE event with its
	// flush, or one JSON answer; a client that does not take it within
	// that time loses its connection (it may resume with Last-Event-ID).
	// Time between events does not count. Zero means DefaultWriteTimeout;
	// negative means no limit.
	WriteTimeout time.Duration
	// MaxBodyBytesInFlight bounds the buffers of POST bodies being read,
	// over all connections: a body that would go beyond gets 503 with
	// Retry-After, so that clients stalling near the end of large bodies
	// cannot hold unbounded memory. Zero means DefaultMaxBodyBytesInFlight;
	// negative means no limit.
	MaxBodyBytesInFlight int64
	// Stateless serves revision 2026-07-28 requests (see stateless.go).
	// Nil answers them with a 400 that makes clients fall back to
	// initialize.
	Stateless *pool.Pool
	// Forward sends a stateless request to the instance that holds its
	// parked call (a retry whose verified requestState names another
	// instance): Forwarder.Forward. Nil answers such retries 503.
	Forward func(w http.ResponseWriter, r *http.Request, instance string)
	// AcceptSessionID lets an initialize request carry Mcp-Session-Id: the
	// session is created under that ID (session.Registry.CreateWithID)
	// instead of a new random one. For platforms that mint session IDs and
	// add them to every request, the first included (Bedrock AgentCore
	// Runtime). The risk: the client chooses its session ID, which is then
	// only as unguessable as the client makes it. False refuses such an
	// initialize with 400, as the spec's flow has it.
	AcceptSessionID bool
	// Logger receives the handler's logs. Nil means slog.Default().
	Logger *slog.Logger
	// NoLegacySSE turns off the legacy HTTP+SSE transport (revision
	// 2024-11-05), which is otherwise served beside Path: GET /sse and
	// POST /message beside /mcp (sse_legacy.go).
	NoLegacySSE bool
	// Metrics, if set, is served at GET /metrics behind the same Host,
	// Origin and bearer-token checks as the MCP endpoint (package metrics
	// makes one). Nil serves no /metrics here.
	Metrics http.Handler
	// TraceContext, if set, sees the headers and the parsed messages of
	// every POST before they reach a session, and may replace messages (to
	// carry the W3C traceparent header into params._meta, package
	// tracing). Nil means nothing is done: tracing off costs nothing.
	TraceContext func(h http.Header, msgs []jsonrpc.Message)
}

// A Handler is the bridge's HTTP front end.
type Handler struct {
	reg    *session.Registry
	opts   Options
	logger *slog.Logger
	auth   *auth.Authenticator
	mux    *http.ServeMux
	// refusals logs refused tokens at a bounded rate.
	refusals *refusalLog

	ssePath, msgPath string // the legacy transport's endpoints, or ""
	// notFound answers a request for a path no route serves, after the
	// checks of guard: serveWrongPath by default, the Servers' own answer
	// for its edge.
	notFound func(http.ResponseWriter, *http.Request, auth.Tag)

	allowedNames []string // opts.AllowedHosts without IPv6 brackets, by index
	// allowedHost is the Host of a request hostAllowed allowed last: a
	// client sends the same Host on every request, and the check's
	// case-insensitive comparisons with every allowed name and the
	// split of the port cost about 1.5k instructions a request
	// (bridge-bench -only instr). The answer for a Host never changes:
	// AllowedHosts is fixed once the handler is made.
	allowedHost atomic.Pointer[string]

	draining  atomic.Bool
	bodyBytes atomic.Int64 // capacity of the buffers of bodies being read
	// keepAlives is the one timer of every response's keep-alives: the
	// stateless responses' (streamKeeper) and the SSE streams' (keepAlive);
	// nil: SSEKeepAlive negative.
	keepAlives *peer.Timeouts
	// primeTimers are stopped timers for primeFlushDelay, and quiets
	// stopped keep-alive deadlines (*quiet), reused across requests. The
	// handler's own, not the package's: a timer or channel made inside a
	// testing/synctest bubble must not be used outside it, and the
	// handler of a test in a bubble lives in it. (Since Go 1.23 a stopped
	// or reset timer's channel holds no stale value.)
	primeTimers, quiets sync.Pool
}

// NewHandler returns the HTTP handler of the MCP endpoint, /healthz and /readyz.
func NewHandler(reg *session.Registry, opts *Options) *Handler {
	h := &Handler{reg: reg}
	if opts != nil {
		h.opts = *opts
	}
	o := &h.opts
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.SSERetry <= 0 {
		o.SSERetry = DefaultSSERetry
	}
	if o.SSEKeepAlive == 0 {
		o.SSEKeepAlive = DefaultSSEKeepAlive
	}
	if o.BodyReadTimeout == 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxBodyBytesInFlight == 0 {
		o.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h.logger = o.Logger
	h.refusals = newRefusalLog()
	if o.SSEKeepAlive > 0 {
		h.keepAlives = peer.NewTimeouts(o.SSEKeepAlive)
	}
	h.primeTimers.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	h.quiets.New = func() any { return &quiet{c: make(chan time.Time, 1)} }
	// Trimmed once here rather than on every request (hostAllowed).
	for _, a := range o.AllowedHosts {
		h.allowedNames = append(h.allowedNames, strings.Trim(a, "[]"))
	}
	h.auth = o.Auth
	if h.auth == nil {
		// Static tokens alone need no network: New cannot fail.
		h.auth, _ = auth.New(context.Background(), &auth.Options{StaticTokens: o.AuthTokens, Logger: o.Logger})
	}
	// The standard mux answers 405 with an Allow header for other methods
	// on the endpoint: "The server MUST either return Content-Type:
	// text/event-stream in response to this HTTP GET, or else return HTTP
	// 405 Method Not Allowed".
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("POST "+o.Path, h.guard(h.servePost))
	h.mux.HandleFunc("GET "+o.Path, h.guard(h.serveGet))
	h.mux.HandleFunc("DELETE "+o.Path, h.guard(h.serveDelete))
	h.mux.HandleFunc("OPTIONS "+o.Path, h.servePreflight)
	// The mux serves HEAD with the GET handler, which would open (and take
	// over) the standalone stream and never end: HEAD is no method of the
	// transport.
	h.mux.HandleFunc("HEAD "+o.Path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", "GET, POST, DELETE, OPTIONS")
		WriteError(w, http.StatusMethodNotAllowed, nil, jsonrpc.CodeInvalidRequest,
			"Method Not Allowed: use GET, POST or DELETE", nil)
	})
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	h.mux.HandleFunc("GET /readyz", h.serveReady)
	h.legacyRoutes()
	if o.Metrics != nil {
		h.mux.HandleFunc("GET /metrics", h.guard(func(w http.ResponseWriter, r *http.Request, _ auth.Tag) {
			o.Metrics.ServeHTTP(w, r)
		}))
	}
	for _, p := range h.auth.MetadataPaths() {
		h.mux.HandleFunc("GET "+p, h.auth.ServeMetadata)
		h.mux.HandleFunc("OPTIONS "+p, h.auth.ServeMetadata)
	}
	h.notFound = h.serveWrongPath
	h.mux.HandleFunc("/", h.serveUnrouted)
	return h
}

// serveUnrouted answers what no route serves. A path served for other
// methods gets 405 with Allow, as the mux itself answers when no route
// catches everything; any other path gets a JSON-RPC error naming the
// endpoint (a client configured with "/" or "/mcp/" got Go's
// bare "404 page not found", which says nothing of where MCP is), after
// the checks of every request, so that only a client that may use the
// bridge learns its paths.
func (h *Handler) serveUnrouted(w http.ResponseWriter, r *http.Request) {
	var allow []string
	probe := *r
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost} {
		probe.Method = m
		if _, pattern := h.mux.Handler(&probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(w, http.StatusMethodNotAllowed, nil, jsonrpc.CodeInvalidRequest,
			"Method Not Allowed: use "+strings.Join(allow, ", "), nil)
		return
	}
	h.guard(h.notFound)(w, r)
}

// serveWrongPath is the 404 of a path that is not the endpoint.
func (h *Handler) serveWrongPath(w http.ResponseWriter, r *http.Request, _ auth.Tag) {
	msg := "Not Found: no MCP endpoint at " + strconv.Quote(r.URL.Path) + "; this bridge serves MCP at " + strconv.Quote(h.opts.Path)
	if h.ssePath != "" {
		msg += " (and the HTTP+SSE transport of revision 2024-11-05 at " + strconv.Quote(h.ssePath) + ")"
	}
	WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest, msg, nil)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A stream leaves a write deadline on its connection for the end of
	// its response, which net/http writes after the handler returned;
	// net/http lifts it once that is written (conn.serve clears the
	// connection's write deadline after each response), so the next
	// request on a kept-alive connection starts without one.
	boundUnreadBody(w, r, h.opts.BodyReadTimeout)
	h.mux.ServeHTTP(w, r)
}

// deadline is the write deadline of one response (WriteTimeout), for each
// front end's writes to renew.
func (h *Handler) deadline(w http.ResponseWriter) writeDeadline {
	return writeDeadline{rc: http.NewResponseController(w), timeout: h.opts.WriteTimeout}
}

// startSSE sends the headers of an SSE response, with the Date of
// setDate: net/http's own formatting of it was 1.9k instructions of each
// call, for about 1.2k more that writing one more header of the map costs
// (cg_diff, bridge-bench -only instr, 50 sessions).
func startSSE(w http.ResponseWriter) {
	hd := w.Header()
	setDate(hd)
	hd["Content-Type"] = sseContentType
	hd["Cache-Control"] = sseCacheControl
	hd["X-Accel-Buffering"] = sseNoBuffering
	w.WriteHeader(http.StatusOK)
}

// writeDeadline renews one response's write deadline (WriteTimeout) before
// each write that may reach the network. Setting a deadline updates a
// runtime timer, which the profile of a short call showed three times per
// request; a deadline set less than WriteTimeout/16 ago is kept, so each
// write still gets at least 15/16 of the timeout and a quick answer sets
// one deadline, not three.
type writeDeadline struct {
	rc      *http.ResponseController
	timeout time.Duration // <= 0: no deadline
	at      time.Time     // the deadline set last
}

func (d *writeDeadline) extend() {
	if d.timeout <= 0 {
		return
	}
	at := time.Now().Add(d.timeout)
	// (A zero d.at, the response's first write, is tested apart: Sub of a
	// time without a monotonic reading takes the long way.)
	if !d.at.IsZero() && at.Sub(d.at) < d.timeout/16 {
		return
	}
	d.at = at
	d.rc.SetWriteDeadline(at)
}

// Drain makes the handler refuse new sessions and report not ready, at
// shutdown. Open streams stay open: a client whose standalone stream ended
// would try to reconnect, fail against a closed listener, and give up the
// calls it still has in flight.
func (h *Handler) Drain() { h.draining.Store(true) }

func (h *Handler) serveReady(w http.ResponseWriter, _ *http.Request) {
	if h.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ready\n")
}

// Revisions whose MCP-Protocol-Version this transport serves.
var supportedVersions = []string{"2025-03-26", "2025-06-18", "2025-11-25"}

// The first revision whose clients expect priming events and may resume.
const primingVersion = "2025-11-25"

// guard checks what every request to the endpoint must pass: Origin, then
// authentication.
func (h *Handler) guard(next func(http.ResponseWriter, *http.Request, auth.Tag)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.hostAllowed(r.Host) {
			h.logger.Warn("refused a request for a disallowed Host (DNS rebinding?)", "host", r.Host,
				"hint", "add it to --allowed-hosts if clients legitimately use this name")
			WriteError(w, http.StatusForbidden, nil, jsonrpc.CodeInvalidRequest,
				"Forbidden: Host "+strconv.Quote(r.Host)+" is not allowed", nil)
			return
		}
		origin := headerValue(r.Header, hdrOrigin)
		if origin != "" {
			// "Servers MUST validate the Origin header on all incoming
			// connections to prevent DNS rebinding attacks. If the Origin
			// header is present and invalid, servers MUST respond with
			// HTTP 403 Forbidden."
			if !h.originAllowed(origin, r.Host) {
				h.logger.Warn("refused a request from a disallowed Origin", "origin", origin,
					"hint", "add it to --allowed-origins if this browser origin is trusted")
				WriteError(w, http.StatusForbidden, nil, jsonrpc.CodeInvalidRequest,
					"Forbidden: Origin "+strconv.Quote(origin)+" is not allowed", nil)
				return
			}
			h.corsHeaders(w, origin)
		}
		var owner auth.Tag // a session's owner: the tag of its principal ("" without authentication)
		if h.auth.Enabled() {
			var ok bool
			if r, owner, ok = h.authenticate(w, r); !ok {
				return
			}
		}
		next(w, r, owner)
	}
}

func (h *Handler) originAllowed(origin, host string) bool {
	for _, a := range h.opts.AllowedOrigins {
		if a == "*" || strings.EqualFold(a, origin) {
			return true
		}
	}
	// The request's own Host is no proof of same origin: in a DNS
	// rebinding attack both name the attacker's domain.
	u, err := url.Parse(origin)
	return err == nil && isLoopbackName(u.Hostname())
}

func (h *Handler) hostAllowed(host string) bool {
	if len(h.opts.AllowedHosts) == 0 {
		return true
	}
	if last := h.allowedHost.Load(); last != nil && *last == host {
		return true
	}
	if !h.checkHost(host) {
		return false
	}
	h.allowedHost.Store(&host)
	return true
}

// checkHost is hostAllowed without its memory of the last Host allowed.
func (h *Handler) checkHost(host string) bool {
	name := host
	if hn, _, err := net.SplitHostPort(host); err == nil {
		name = hn
	}
	name = strings.Trim(name, "[]")
	for i, a := range h.opts.AllowedHosts {
		if a == "*" || strings.EqualFold(a, host) || strings.EqualFold(h.allowedNames[i], name) {
			return true
		}
	}
	return false
}

// HostAllowed is the endpoint's Host check for another listener (such as
// --metrics-listen): whether host, a request's Host, is one of allowed
// (names, or name:port; "*" allows any), case-insensitively, with or
// without its port. An empty allowed allows any, as AllowedHosts does.
func HostAllowed(allowed []string, host string) bool {
	h := Handler{opts: Options{AllowedHosts: allowed}}
	for _, a := range allowed {
		h.allowedNames = append(h.allowedNames, strings.Trim(a, "[]"))
	}
	return h.hostAllowed(host)
}

// LoopbackHosts are the names of the loopback interface.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

func isLoopbackName(name string) bool {
	return slices.Contains(LoopbackHosts, strings.ToLower(strings.Trim(name, "[]")))
}

func (h *Handler) corsHeaders(w http.ResponseWriter, origin string) {
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	hd.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, WWW-Authenticate")
}

// servePreflight answers CORS preflight requests of allowed browser origins.
func (h *Handler) servePreflight(w http.ResponseWriter, r *http.Request) {
	origin := headerValue(r.Header, hdrOrigin)
	if origin == "" || !h.originAllowed(origin, r.Host) {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	h.corsHeaders(w, origin)
	w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	w.Header().Set("Access-Control-Allow-Headers",
		"Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name")
	w.Header().Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// accepts reports whether an Accept header admits the media type. It runs
// on every request, so it compares in place rather than splitting the
// header and parsing each part (mime.ParseMediaType): parameters such as q
// are not weighed, only the media ranges listed.
func accepts(header, want string) bool {
	typ, _, _ := strings.Cut(want, "/")
	for header != "" {
		var part string
		part, header, _ = strings.Cut(header, ",")
		mt := mediaType(part)
		if strings.EqualFold(mt, want) || mt == "*/*" ||
			(len(mt) == len(typ)+2 && strings.EqualFold(mt[:len(typ)], typ) && mt[len(typ):] == "/*") {
			return true
		}
	}
	return false
}

// mediaType is the media type of a Content-Type or of one Accept range:
// what comes before any parameters, without surrounding white space.
func mediaType(v string) string {
	mt, _, _ := strings.Cut(v, ";")
	return strings.TrimSpace(mt)
}

// Header names in the form net/http stores them (textproto's canonical
// form). Header.Get canonicalizes its argument, which allocates twice for
// any other spelling, such as the spec's "MCP-Protocol-Version" and
// "Last-Event-ID": on every request.
const (
	hdrSessionID       = "Mcp-Session-Id"
	hdrProtocolVersion = "Mcp-Protocol-Version"
	hdrLastEventID     = "Last-Event-Id"
	hdrOrigin          = "Origin"
	hdrAccept          = "Accept"
	hdrContentType     = "Content-Type"
)

// headerValue is h.Get(key) for a key already in canonical form, as are
// the hdr constants: Header.Get canonicalizes its key on every call, a
// scan of the key each time, for the half dozen headers every request
// reads.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// checkVersion validates MCP-Protocol-Version: "If the server receives a
// request with an invalid or unsupported MCP-Protocol-Version, it MUST
// respond with 400 Bad Request." An absent header means 2025-03-26.
// v is the header's value.
func checkVersion(v string, sess *session.Session) error {
	if v == "" || slices.Contains(supportedVersions, v) {
		return nil
	}
	if sess != nil && v == sess.ProtocolVersion() {
		return nil // an older revision the server itself negotiated
	}
	return fmt.Errorf("unsupported MCP-Protocol-Version %q; this bridge serves %s", v,
		strings.Join(supportedVersions, ", "))
}

// lookup finds the request's session: 400 without Mcp-Session-Id, 404 for
// an unknown or ended one, 403 for one bound to another token.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, owner auth.Tag) *session.Session {
	return h.lookupBy(w, owner, headerValue(r.Header, hdrSessionID), headerValue(r.Header, hdrProtocolVersion))
}

// lookupBy is lookup with the request's Mcp-Session-Id (id) and
// MCP-Protocol-Version (version) read already: a POST reads each of them
// once for all its checks (a header lookup is about 150 instructions).
func (h *Handler) lookupBy(w http.ResponseWriter, owner auth.Tag, id, version string) *session.Session {
	if id == "" {
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest,
			"Bad Request: Mcp-Session-Id header is required; start a session with an initialize request", nil)
		return nil
	}
	sess, err := h.reg.Get(id)
	if err == nil && sess.SingleStream() {
		err = session.ErrNotFound // a legacy HTTP+SSE session: not of this transport
	}
	if err != nil {
		// "The server MAY terminate the session at any time, after which it
		// MUST respond to requests containing that session ID with HTTP 404."
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: session "+strconv.Quote(id)+" does not exist or has ended; send a new initialize request", nil)
		return nil
	}
	if sess.Owner() != owner {
		h.logger.Warn("refused a request for a session created with another token", "session", sess.LogID())
		WriteError(w, http.StatusForbidden, nil, jsonrpc.CodeInvalidRequest,
			"Forbidden: this session belongs to another credential", nil)
		return nil
	}
	if err := checkVersion(version, sess); err != nil {
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest, "Bad Request: "+err.Error(), nil)
		return nil
	}
	return sess
}

// Text of the answer to a revision 2026-07-28 probe. Per that revision's
// Backward Compatibility section, a client falls back to initialize on "a
// 4xx without a recognized modern error body": the code here is the plain
// JSON-RPC -32600, not one of the modern -32020 to -32022.
const probeAnswer = "Bad Request: this server speaks MCP revisions 2025-03-26 through 2025-11-25 " +
	"(sessions); send an initialize request to start a session"

func (h *Handler) servePost(w http.ResponseWriter, r *http.Request, owner auth.Tag) {
	sid, version := headerValue(r.Header, hdrSessionID), headerValue(r.Header, hdrProtocolVersion)
	if h.isStateless(r, sid, version) {
		h.serveStateless(w, r, owner, version)
		return
	}
	if !postHeadersOK(w, r) {
		return
	}
	if headerValue(r.Header, hdrLastEventID) != "" {
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest,
			"Bad Request: Last-Event-ID belongs on a GET request (resumption is always via GET)", nil)
		return
	}
	var one [1]jsonrpc.Message // the messages of a POST of one, the usual case
	msgs, batch, ok := h.readMessages(w, r, &one)
	if !ok {
		return
	}
	if h.opts.TraceContext != nil {
		// Through a copy on the heap: what a func value is given escapes,
		// and one would put every POST's messages there, traced or not.
		traced := slices.Clone(msgs)
		h.opts.TraceContext(r.Header, traced)
		msgs = traced
	}

	// Revision 2026-07-28 clients probe with server/discover (or any request
	// carrying that revision's header and no session): answer so they fall
	// back to initialize. The probe never reaches a server.
	for i := range msgs {
		m := &msgs[i] // not a range value: that copies each Message
		if m.Env.Method == "server/discover" ||
			(sid == "" && version >= "2026-07-28" && m.Env.Method != "initialize") {
			WriteError(w, http.StatusBadRequest, jsonrpc.RawID(m.Data), jsonrpc.CodeInvalidRequest, probeAnswer,
				map[string]any{"supportedVersions": supportedVersions})
			return
		}
	}

	isInit := !batch && msgs[0].Env.Kind == jsonrpc.KindRequest && msgs[0].Env.Method == "initialize"
	if isInit && (sid == "" || h.opts.AcceptSessionID) {
		h.initialize(w, r, owner, msgs, sid)
		return
	}
	for i := range msgs {
		if m := &msgs[i]; m.Env.Method == "initialize" {
			WriteError(w, http.StatusBadRequest, jsonrpc.RawID(m.Data), jsonrpc.CodeInvalidRequest,
				"Bad Request: initialize must be sent alone and without Mcp-Session-Id (it starts a new session)", nil)
			return
		}
	}
	sess := h.lookupBy(w, owner, sid, version)
	if sess == nil {
		return
	}
	if batch && sess.ProtocolVersion() != "2025-03-26" {
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest,
			"Bad Request: JSON-RPC batches are only allowed in sessions of revision 2025-03-26; send one message per POST", nil)
		return
	}
	reader, err := sess.Post(msgs, h.postOptions(r))
	switch {
	case err == nil:
		// The common case, before the errors.Is walks below.
	case errors.Is(err, session.ErrRetired):
		h.retiredPost(w, err)
		return
	case errors.Is(err, session.ErrNotFound):
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: the session has ended; send a new initialize request", nil)
		return
	case errors.Is(err, session.ErrDuplicateID):
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest, "Bad Request: "+err.Error(), nil)
		return
	case errors.Is(err, session.ErrTooManyRequests):
		// 429: nothing of the POST reached the server, and the client may
		// send it again once answers come (the spec lets a server refuse
		// input with an HTTP error status and an id-less JSON-RPC error).
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusTooManyRequests, nil, jsonrpc.CodeServerError, "Too Many Requests: "+err.Error(), nil)
		return
	case errors.Is(err, session.ErrStdinFull):
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeServerError, "Service Unavailable: "+err.Error(), nil)
		return
	default:
		WriteError(w, http.StatusInternalServerError, nil, jsonrpc.CodeInternalError, err.Error(), nil)
		return
	}
	if reader == nil {
		// "If the input is a JSON-RPC response or notification: If the
		// server accepts the input, the server MUST return HTTP status code
		// 202 Accepted with no body."
		w.WriteHeader(http.StatusAccepted)
		return
	}
	h.answer(w, r, sess, reader, batch, sess.ProtocolVersion() >= primingVersion)
}

// initialize starts a session for an initialize request, under chosen
// (the request's Mcp-Session-Id, with AcceptSessionID) or a new ID.
func (h *Handler) initialize(w http.ResponseWriter, r *http.Request, owner auth.Tag, msgs []jsonrpc.Message, chosen string) {
	rawID := jsonrpc.RawID(msgs[0].Data)
	if h.draining.Load() {
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError,
			"Service Unavailable: the bridge is shutting down; retry against another instance", nil)
		return
	}
	var sess *session.Session
	var err error
	if chosen != "" {
		sess, err = h.reg.CreateWithID(r.Context(), owner, chosen)
	} else {
		sess, err = h.reg.Create(r.Context(), owner)
	}
	switch {
	case errors.Is(err, session.ErrRetired):
		WriteError(w, http.StatusNotFound, rawID, jsonrpc.CodeInvalidRequest, "Not Found: "+err.Error(), nil)
		return
	case errors.Is(err, session.ErrBadChosenID):
		WriteError(w, http.StatusBadRequest, rawID, jsonrpc.CodeInvalidRequest, "Bad Request: Mcp-Session-Id: "+err.Error(), nil)
		return
	case errors.Is(err, session.ErrIDInUse):
		// 409: the ID names a live session, which a new one never takes
		// over; the client may initialize under another ID.
		WriteError(w, http.StatusConflict, rawID, jsonrpc.CodeInvalidRequest,
			"Conflict: Mcp-Session-Id names a live session; initialize under another ID, or without one", nil)
		return
	case errors.Is(err, session.ErrTooManySessions), errors.Is(err, session.ErrShuttingDown):
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError, "Service Unavailable: "+err.Error(), nil)
		return
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		// Out of file descriptors is a passing overload, not a broken
		// server: the client may retry.
		h.logger.Error("out of file descriptors: cannot start an MCP server", "err", err,
			"hint", "raise the open-file limit (ulimit -n), or lower --max-sessions / --max-connections")
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError,
			"Service Unavailable: the bridge is out of file descriptors; retry later", nil)
		return
	case err != nil:
		status := http.StatusInternalServerError
		if errors.Is(err, session.ErrLaunch) {
			status = http.StatusBadGateway
		}
		WriteError(w, status, rawID, jsonrpc.CodeServerError, err.Error(), nil)
		return
	}
	reader, err := sess.Post(msgs, h.postOptions(r))
	if err != nil {
		WriteError(w, http.StatusInternalServerError, rawID, jsonrpc.CodeInternalError, err.Error(), nil)
		return
	}
	w.Header().Set(hdrSessionID, sess.ID())
	// The session learns the negotiated version from the server's answer;
	// whether this very stream is primed depends on what the client asked.
	h.answer(w, r, sess, reader, false, requestedVersion(msgs[0].Data) >= primingVersion)
}

// postOptions: answers sent as one JSON body carry no event ID, so no
// client could resume their stream, and it has room for nothing else.
func (h *Handler) postOptions(r *http.Request) session.PostOptions {
	opts := session.PostOptions{Resumable: !h.opts.JSONResponse}
	// Only authenticate (in guard) attaches a principal: without
	// authentication there is none to look for along the context's chain.
	if !h.auth.Enabled() {
		return opts
	}
	opts.Principal = auth.FromContext(r.Context())
	return opts
}

// requestedVersion is params.protocolVersion of an initialize request, or "".
func requestedVersion(data []byte) string {
	if params, ok := jsonrpc.Lookup(data, "params"); ok {
		if v, ok := jsonrpc.Lookup(params, "protocolVersion"); ok {
			s, _ := jsonrpc.StringValue(v)
			return s
		}
	}
	return ""
}

// errBodyBudget: a body would take the buffers of bodies being read beyond
// MaxBodyBytesInFlight.
var errBodyBudget = errors.New("too many bytes of request bodies in flight")

// bodyFirstBytes is the buffer of a body that declares at most this
// much, and the chunk a larger body is read into (readLargeBody). A declared length is never trusted for an
// allocation: a client that declares 4 MiB and sends nothing must not hold
// 4 MiB. What bodies hold together is bounded by
// MaxBodyBytesInFlight.
const bodyFirstBytes = 64 << 10

// bodyFailed answers a POST whose body could not be read (h.readBody).
func (h *Handler) bodyFailed(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if err == errBodyBudget {
		h.logger.Warn("refused a POST body: the bodies being read hold the memory allowed", "max_body_bytes_in_flight", h.opts.MaxBodyBytesInFlight,
			"hint", "raise --max-body-bytes-in-flight if these clients are legitimate")
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeServerError,
			"Service Unavailable: too many request bodies are being read at once (--max-body-bytes-in-flight); retry later", nil)
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		WriteError(w, http.StatusRequestTimeout, nil, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("Request Timeout: the body did not arrive within %s (--body-read-timeout)", h.opts.BodyReadTimeout), nil)
		return
	}
	if errors.As(err, &tooBig) {
		WriteError(w, http.StatusRequestEntityTooLarge, nil, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("Request Entity Too Large: a message may have at most %d bytes (--max-message-bytes)", tooBig.Limit), nil)
		return
	}
	WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeParseError, "Bad Request: reading the body: "+err.Error(), nil)
}

// Accept headers that list exactly the two media types a POST needs, as
// the MCP SDKs write them.
const (
	acceptBoth         = "application/json, text/event-stream"
	acceptBothSSEFirst = "text/event-stream, application/json"
)

// postHeadersOK checks a POST's Accept and Content-Type, answering 406 or
// 415 when they are wrong: "The client MUST include an Accept header,
// listing both application/json and text/event-stream as supported content
// types" (both eras).
func postHeadersOK(w http.ResponseWriter, r *http.Request) bool {
	acc := headerValue(r.Header, hdrAccept)
	// The spellings the SDKs send pass on one comparison: the check of
	// each media range costs about 0.5k instructions a request.
	if acc != acceptBoth && acc != acceptBothSSEFirst &&
		(!accepts(acc, "application/json") || !accepts(acc, "text/event-stream")) {
		WriteError(w, http.StatusNotAcceptable, nil, jsonrpc.CodeInvalidRequest,
			"Not Acceptable: the Accept header must list both application/json and text/event-stream", nil)
		return false
	}
	if ct := headerValue(r.Header, hdrContentType); ct != "application/json" && !strings.EqualFold(mediaType(ct), "application/json") {
		WriteError(w, http.StatusUnsupportedMediaType, nil, jsonrpc.CodeInvalidRequest,
			"Unsupported Media Type: the body must be application/json", nil)
		return false
	}
	return true
}

// readBody reads a request body of at most limit bytes, failing with
// *http.MaxBytesError beyond, and with an error matching
// os.ErrDeadlineExceeded if it is not complete within timeout (if
// positive). A body of declared length up to bodyFirstBytes is read into
// a slice of that size; a larger one into chunks taken as bytes arrive
// (at most bodyFirstBytes more than arrived), then copied into a slice of
// its size (readLargeBody).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (_ []byte, err error) {
	// A POST body is bounded by the sessions' message bound
	// (session.Options.MaxMessageBytes): one value bounds a message either
	// way, so what a client may send, the server may answer.
	limit, timeout := int64(h.reg.MaxMessageBytes()), h.opts.BodyReadTimeout
	n := r.ContentLength
	if n > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if timeout > 0 {
		// A deadline on this body only: http.Server.ReadTimeout would
		// also cut the SSE stream of the answer. It is lifted once the
		// body is read; after a failure it stays, so that net/http's
		// discarding of the rest of the body is bounded too.
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
			defer func() {
				if err == nil {
					rc.SetReadDeadline(time.Time{})
				}
			}()
		}
	}
	src, max := r.Body, n
	if n < 0 {
		// Unknown length (chunked): room for one byte beyond the limit,
		// which MaxBytesReader refuses.
		src, max = http.MaxBytesReader(w, r.Body, limit), limit+1
	}
	// held is what this body counts in MaxBodyBytesInFlight: the capacity
	// of its buffer, until it is read (then the message is the session's).
	var held int64
	defer func() { h.bodyBytes.Add(-held) }()
	grow := func(size int64) bool {
		if lim := h.opts.MaxBodyBytesInFlight; lim > 0 && h.bodyBytes.Add(size-held) > lim {
			h.bodyBytes.Add(held - size)
			return false
		}
		held = size
		return true
	}
	if max <= bodyFirstBytes {
		if !grow(max) {
			return nil, errBodyBudget
		}
		return readSmallBody(src, make([]byte, 0, held), n)
	}
	return readLargeBody(src, n, max, &held, grow)
}

// readSmallBody reads a body of at most cap(buf) bytes (n if not negative)
// into buf.
func readSmallBody(src io.Reader, buf []byte, n int64) ([]byte, error) {
	for len(buf) < cap(buf) {
		m, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		switch {
		case err == io.EOF && n >= 0 && int64(len(buf)) < n:
			return nil, io.ErrUnexpectedEOF
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
	return buf, nil // the declared length, all read
}

// bodyChunks holds the chunks readLargeBody reads into, for the next body:
// what is idle here was in use, and counted, before.
var bodyChunks = sync.Pool{New: func() any { return new([bodyFirstBytes]byte) }}

// readLargeBody reads a body larger than bodyFirstBytes (declared, or of
// unknown length, up to max) into chunks of bodyFirstBytes, then copies it
// into one buffer of its exact size. A buffer that
// doubles as bytes arrive leaves its earlier arrays to the collector, as
// much again as it holds, which MaxBodyBytesInFlight did not count: under
// the default 256 MiB, RSS reached 600 MB. Chunks are taken as bytes
// arrive (a declared length is never trusted for an allocation), each
// counted by grow as it is taken, and go back to bodyChunks once copied:
// no garbage. *held is what grow counted.
func readLargeBody(src io.Reader, n, max int64, held *int64, grow func(int64) bool) ([]byte, error) {
	var chunks []*[bodyFirstBytes]byte
	defer func() {
		for _, c := range chunks {
			bodyChunks.Put(c)
		}
	}()
	total := int64(0)
	for total < max {
		at := int(total % bodyFirstBytes)
		if at == 0 {
			if !grow(*held + bodyFirstBytes) {
				return nil, errBodyBudget
			}
			chunks = append(chunks, bodyChunks.Get().(*[bodyFirstBytes]byte))
		}
		end := min(bodyFirstBytes, at+int(max-total))
		m, err := src.Read(chunks[len(chunks)-1][at:end])
		total += int64(m)
		if err == io.EOF {
			if n >= 0 && total < n {
				return nil, io.ErrUnexpectedEOF
			}
			break
		}
		if err != nil {
			return nil, err
		}
	}
	// The copy takes the chunks' place in the count: they go back to
	// bodyChunks right after it, for the next body to take (and count).
	if !grow(total) {
		return nil, errBodyBudget
	}
	body := make([]byte, 0, total)
	for _, c := range chunks {
		body = append(body, c[:min(bodyFirstBytes, total-int64(len(body)))]...)
	}
	return body, nil
}

// readMessages reads a POST's body and splits it into its messages,
// answering the client itself when it cannot (413, 408, 400 with -32700 or
// -32600): ok is false then. A body of one message is parsed into one
// (parseBody).
func (h *Handler) readMessages(w http.ResponseWriter, r *http.Request, one *[1]jsonrpc.Message) (msgs []jsonrpc.Message, batch, ok bool) {
	body, err := h.readBody(w, r)
	if err != nil {
		h.bodyFailed(w, err)
		return nil, false, false
	}
	msgs, batch, err = parseBody(body, one)
	if err != nil {
		code := jsonrpc.CodeInvalidRequest
		if jsonrpc.IsParseError(err) {
			code = jsonrpc.CodeParseError
		}
		WriteError(w, http.StatusBadRequest, jsonrpc.RawID(body), code, "Bad Request: "+err.Error(), nil)
		return nil, batch, false
	}
	return msgs, batch, true
}

// parseBody splits a POST body into its messages. A body that is not a
// batch is parsed into one, the caller's (on its stack): a slice made here
// went to the heap, a few hundred bytes on every POST.
func parseBody(body []byte, one *[1]jsonrpc.Message) (msgs []jsonrpc.Message, batch bool, err error) {
	parts, batch, err := jsonrpc.SplitBatch(body)
	if err != nil {
		return nil, batch, err
	}
	if !batch {
		env, err := jsonrpc.Parse(body)
		if err != nil {
			return nil, false, err
		}
		one[0] = jsonrpc.Message{Data: body, Env: env}
		return one[:], false, nil
	}
	msgs = make([]jsonrpc.Message, len(parts))
	for i, p := range parts {
		env, err := jsonrpc.Parse(p)
		if err != nil {
			return nil, batch, err
		}
		msgs[i] = jsonrpc.Message{Data: p, Env: env}
	}
	return msgs, batch, nil
}

// answer writes the answer to a POST of requests: an SSE stream, or with
// JSONResponse one JSON body (an array for a batch).
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, sess *session.Session, reader *session.Reader, batch, prime bool) {
	if !h.opts.JSONResponse {
		h.stream(w, r, sess, reader, prime)
		return
	}
	defer reader.Detach()
	var one [1][]byte
	out := one[:0] // a single answer, the common case, allocates nothing
	for {
		_, data, err := reader.NextBefore(r.Context(), nil)
		if err == io.EOF {
			break
		}
		if err != nil {
			return // the client left: its stream is transient, so the answer is dropped when it comes
		}
		out = append(out, data)
	}
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	setDate(hd)
	dl := h.deadline(w)
	dl.extend()
	switch {
	case len(out) == 0:
		WriteError(w, http.StatusInternalServerError, nil, jsonrpc.CodeInternalError, "the request was cancelled or the session ended", nil)
	case batch:
		w.Write([]byte("["))
		for i, d := range out {
			if i > 0 {
				w.Write([]byte(","))
			}
			w.Write(d)
		}
		w.Write([]byte("]"))
	default:
		w.Write(out[0])
	}
}

// Header values set on every answer, shared rather than allocated per
// request (Header.Set allocates a slice). net/http copies a handler's
// header values when it writes them and never appends to them in place.
var (
	sseContentType  = []string{"text/event-stream"}
	sseCacheControl = []string{"no-cache, no-transform"}
	sseNoBuffering  = []string{"no"}
	jsonContentType = []string{"application/json"}
)

// frameBufs hold SSE events while they are framed, so that an event
// reaches the response in one Write: each Write on a response takes the
// connection's lock and does its checks. A buffer is held only
// while one event is framed, never for a stream's life.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// frameCopyMax is the largest event data framed by copying; larger data is
// written as it is, between its framing.
const frameCopyMax = 16 << 10

// writeEvent writes one SSE event: "id: <stream>_<seq>\ndata: <data>\n\n".
// Each event is one line of JSON, as the server wrote it, so one data
// field carries it.
func writeEvent(w io.Writer, stream int64, seq uint64, data []byte) error {
	bp := frameBufs.Get().(*[]byte)
	defer putFrameBuf(bp)
	b := append((*bp)[:0], "id: "...)
	b = appendEventID(b, stream, seq)
	b = append(b, "\ndata: "...)
	if len(data) > frameCopyMax {
		if _, err := w.Write(b); err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		b = b[:0]
	} else {
		b = append(b, data...)
	}
	b = append(b, "\n\n"...)
	*bp = b
	_, err := w.Write(b)
	return err
}

// writePrime writes the priming event: the reader's position as its ID, an
// empty data field, and a retry field unless retryMS is negative.
func writePrime(w io.Writer, reader *session.Reader, retryMS int64) error {
	bp := frameBufs.Get().(*[]byte)
	defer putFrameBuf(bp)
	b := append((*bp)[:0], "id: "...)
	b = appendEventID(b, reader.Stream(), reader.Pos())
	if retryMS >= 0 {
		b = append(b, "\nretry: "...)
		b = strconv.AppendInt(b, retryMS, 10)
	}
	b = append(b, "\ndata: \n\n"...)
	*bp = b
	_, err := w.Write(b)
	return err
}

func putFrameBuf(bp *[]byte) {
	if cap(*bp) <= 2*frameCopyMax {
		frameBufs.Put(bp)
	}
}

// stream writes a stream's events as SSE until it ends, the client leaves,
// or the poll interval closes the connection.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, sess *session.Session, reader *session.Reader, prime bool) {
	startSSE(w)
	dl := h.deadline(w)
	rc := dl.rc
	ka := keepAlive{ts: h.keepAlives, quiets: &h.quiets, w: w}
	var cancel context.CancelFunc // of the poll interval's context
	// One deferred call does all the cleanup: the compiler open-codes the
	// defers of a function only while defers times returns stay small, and
	// with four of them across this loop's returns each cost a runtime
	// defer record per request.
	defer func() {
		if cancel != nil {
			cancel()
		}
		ka.stop()
		// Each event gets WriteTimeout to reach the client: a
		// client that stops reading loses its connection instead of
		// holding it and this goroutine forever, also after its session
		// ended. The deadline is renewed before each event, so a stream
		// may wait for its next event as long as it takes. This last
		// renewal covers the end of the response, written by net/http
		// after this returns.
		dl.extend()
		reader.Detach()
	}()

	ctx := r.Context()
	poll := h.opts.SSEPollAfter > 0 && prime
	if poll {
		// Through a temporary: vet's lostcancel check does not see the
		// deferred cleanup call cancel.
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, h.opts.SSEPollAfter)
		cancel = stop
	}
	if prime {
		// "The server SHOULD immediately send an SSE event consisting of an
		// event ID and an empty data field in order to prime the client to
		// reconnect (using that event ID as Last-Event-ID)."
		retryMS := int64(-1)
		if poll {
			retryMS = h.opts.SSERetry.Milliseconds()
		}
		// No deadline yet: the priming event waits in net/http's buffer
		// (a few dozen bytes) for the first flush, which sets one.
		if err := writePrime(w, reader, retryMS); err != nil {
			return
		}
	}
	// The headers and the priming event go out with the first event if it
	// is ready within primeFlushDelay, else on their own when it expires: a
	// quick answer then costs one write to the connection instead of two
	// (the profile showed these writes as the bridge's main cost). Also on
	// a busy bridge, where the timer often expires: flushing at once there
	// instead cost more than the timer's wake-ups (BENCHMARKS.md, "A
	// seventh machine").
	seq, data, err := reader.NextBefore(readyCtx, nil)
	if err == context.Canceled {
		t := h.primeTimers.Get().(*time.Timer)
		t.Reset(primeFlushDelay)
		seq, data, err = reader.NextBefore(ctx, t.C)
		t.Stop()
		h.primeTimers.Put(t)
	}
	for {
		switch {
		case err == io.EOF:
			return // the end of the handler flushes what is buffered
		case err == session.ErrNotYet:
			// No event within primeFlushDelay: send the headers and the
			// priming event now, then wait as long as it takes.
			dl.extend()
			if err := rc.Flush(); err != nil {
				return
			}
			seq, data, err = ka.next(ctx, reader, &dl)
			continue
		case err != nil && errors.Is(err, session.ErrEventsPurged):
			h.logger.Warn("closing an SSE connection whose reader fell behind the session's event log",
				"session", sess.LogID(), "stream", reader.Stream(),
				"hint", "raise --log-max-events / --log-max-bytes or read the stream faster")
			return
		case err != nil:
			if poll && r.Context().Err() == nil {
				// "If the server does close the connection prior to
				// terminating the SSE stream, it SHOULD send an SSE event
				// with a standard retry field before closing the connection."
				dl.extend()
				io.WriteString(w, "retry: "+strconv.FormatInt(h.opts.SSERetry.Milliseconds(), 10)+"\n\n")
				rc.Flush()
			}
			return // superseded, or the client left: the stream stays in the log
		}
		dl.extend()
		if err := writeEvent(w, reader.Stream(), seq, data); err != nil {
			return
		}
		// Flush each event, batching only what is already there: events
		// waiting in the log, or the end of the stream, which the handler's
		// return writes with the final chunk (one write, not two). After "a
		// mid-stream write error" the connection ends; the client resumes.
		seq, data, err = reader.NextBefore(readyCtx, nil)
		if err == context.Canceled {
			if err := rc.Flush(); err != nil {
				return
			}
			seq, data, err = ka.next(ctx, reader, &dl)
		}
	}
}

// keepAliveComment is what a quiet SSE stream gets every SSEKeepAlive: a
// comment, which clients ignore ("Lines starting with a colon are
// comments", and a blank line after no data field dispatches no event).
// It has no id field, so the client's last event ID stays where it was.
const keepAliveComment = ": keep-alive\n\n"

// keepAlive writes keepAliveComment on one SSE stream each time it has
// been quiet for SSEKeepAlive. Its deadline is one of the handler's
// keepAlives (every stream's, one runtime timer): a timer of its own per
// stream cost an allocation and two updates of the runtime's timer heap
// on every POST whose answer took longer than primeFlushDelay, which is
// every POST on a busy bridge. The deadline is set at the stream's first
// wait for an event, not before: a quick answer, which never waits, costs
// nothing.
type keepAlive struct {
	ts     *peer.Timeouts // Handler.keepAlives; nil: never
	quiets *sync.Pool     // Handler.quiets
	w      io.Writer
	q      *quiet // from quiets, at the first wait
}

// quiet is the deadline of one stream's keep-alive: its Expire sends on c,
// which the stream's wait for its next event selects on. Reused across
// streams once stopped before it expired, so that c is empty.
type quiet struct {
	to peer.Timeout
	c  chan time.Time // capacity 1: Expire never blocks the timer
}

// Expire implements peer.Expirer. It never blocks the timer, which every
// stream shares: a value already in c wakes the stream as well.
func (q *quiet) Expire() {
	select {
	case q.c <- time.Time{}:
	default:
	}
}

// next waits for the reader's next event, writing keepAliveComment (with
// its flush, under the stream's write deadline dl) whenever the stream has
// been quiet for SSEKeepAlive. A failed write ends the wait with its
// error, as a client that left does.
func (k *keepAlive) next(ctx context.Context, reader *session.Reader, dl *writeDeadline) (uint64, []byte, error) {
	if k.ts == nil {
		return reader.NextBefore(ctx, nil)
	}
	if k.q == nil {
		k.q = k.quiets.Get().(*quiet)
	}
	for {
		k.ts.Start(&k.q.to, k.q)
		seq, data, err := reader.NextBefore(ctx, k.q.c)
		if err != session.ErrNotYet {
			if !k.ts.Stop(&k.q.to) {
				// It expired as the event came: its Expire has sent on
				// c or is about to. Not reused: a later stream would
				// take that for a quiet time it never had.
				k.q = nil
			}
			return seq, data, err
		}
		// ErrNotYet: the value was taken, the deadline is spent.
		dl.extend()
		if _, err := io.WriteString(k.w, keepAliveComment); err != nil {
			return 0, nil, err
		}
		if err := dl.rc.Flush(); err != nil {
			return 0, nil, err
		}
	}
}

// stop gives the deadline back, at the end of the stream: next left it
// stopped with nothing in c, or dropped it.
func (k *keepAlive) stop() {
	if k.q != nil {
		k.quiets.Put(k.q)
		k.q = nil
	}
}

// primeFlushDelay is how long the headers and the priming event of an SSE
// stream may wait in the buffer for the first event, so that a quick answer
// leaves in the same write. The spec asks for the priming event
// "immediately"; a millisecond is well within what a client can observe of
// a network round trip, and buys one write per request.
const primeFlushDelay = time.Millisecond

// readyCtx is already done: Reader.Next with it returns an event only if
// one is ready, and context.Canceled instead of waiting.
var readyCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (h *Handler) serveGet(w http.ResponseWriter, r *http.Request, owner auth.Tag) {
	if h.opts.Stateless != nil && headerValue(r.Header, hdrSessionID) == "" {
		methodNotAllowed(w)
		return
	}
	// "The client MUST include an Accept header, listing text/event-stream."
	if !accepts(headerValue(r.Header, hdrAccept), "text/event-stream") {
		WriteError(w, http.StatusNotAcceptable, nil, jsonrpc.CodeInvalidRequest,
			"Not Acceptable: the Accept header must list text/event-stream", nil)
		return
	}
	sess := h.lookup(w, r, owner)
	if sess == nil {
		return
	}
	prime := sess.ProtocolVersion() >= primingVersion
	var reader *session.Reader
	var err error
	if last := headerValue(r.Header, hdrLastEventID); last != "" {
		var stream int64
		var seq uint64
		if stream, seq, err = parseEventID(last); err == nil {
			reader, err = sess.Resume(stream, seq)
		}
	} else {
		reader, err = sess.Listen()
	}
	switch {
	case errors.Is(err, session.ErrStreamFinished):
		// The stream ended with nothing after this event (a cancelled
		// request's, whose answer the spec lets the server leave out). A
		// 200 stream that closes at once would be resumed again, forever,
		// by the TypeScript SDK's transports; 204 says there
		// is no content and no stream: they, and the Go SDK's, stop.
		// (The spec names no status for resuming a finished stream.)
		w.WriteHeader(http.StatusNoContent)
		return
	case errors.Is(err, session.ErrEventsPurged):
		// A clear refusal, never a silent partial replay.
		WriteError(w, http.StatusGone, nil, jsonrpc.CodeInvalidRequest,
			"Gone: the events after this Last-Event-ID were evicted from the session's log (--log-max-events, --log-max-bytes); the messages cannot be replayed", nil)
		return
	case errors.Is(err, session.ErrUnknownEvent):
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest,
			"Bad Request: Last-Event-ID "+strconv.Quote(headerValue(r.Header, hdrLastEventID))+" names no event of this session", nil)
		return
	case errors.Is(err, session.ErrNotFound):
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: the session has ended; send a new initialize request", nil)
		return
	case err != nil:
		WriteError(w, http.StatusInternalServerError, nil, jsonrpc.CodeInternalError, err.Error(), nil)
		return
	}
	h.stream(w, r, sess, reader, prime)
}

func (h *Handler) serveDelete(w http.ResponseWriter, r *http.Request, owner auth.Tag) {
	if h.opts.Stateless != nil && headerValue(r.Header, hdrSessionID) == "" {
		methodNotAllowed(w)
		return
	}
	sess := h.lookup(w, r, owner)
	if sess == nil {
		return
	}
	sess.Close(session.ErrDeleted)
	w.WriteHeader(http.StatusNoContent)
}

// WriteError writes a JSON-RPC error response with an HTTP status: the one
// writer of error answers of the program's HTTP front (the Forwarder, in
// front of the Handler, uses it too).
func WriteError(w http.ResponseWriter, status int, rawID []byte, code int, msg string, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(jsonrpc.ErrorResponse(rawID, code, msg, data))
}

// Path is the MCP endpoint's path.
func (h *Handler) Path() string { return h.opts.Path }

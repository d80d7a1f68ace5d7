package bridge

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Header names shared by the front end and the forwarder.
const (
	// SessionHeader is the MCP session header.
	SessionHeader = "Mcp-Session-Id"
	// HopHeader marks a request that one instance forwarded to another. Its
	// value is the forwarding instance's address, for the owner's logs. A
	// request that carries it is never forwarded again.
	HopHeader = "Mcp-Bridge-Forwarded-By"
)

// DefaultDialTimeout bounds how long a forwarding instance waits to connect
// to an owner before it declares the owner gone and answers 404.
const DefaultDialTimeout = 5 * time.Second

// ForwardOptions configure a Forwarder. Every zero value means the
// documented default.
type ForwardOptions struct {
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

// A Forwarder keeps every request of a session on the instance that holds
// it, when several instances run behind a load balancer (see package
// affinity, whose session IDs name their owner): a request whose session ID
// names another instance is reverse-proxied there, streaming.
type Forwarder struct {
	ids    *affinity.Router
	logger *slog.Logger
	proxy  *httputil.ReverseProxy
	// ownTransport is the transport NewForwarder made, closed by Close; nil
	// when the caller supplied ForwardOptions.Transport (the caller owns it
	// then).
	ownTransport *http.Transport
}

// NewForwarder returns a Forwarder for the session IDs of ids.
func NewForwarder(ids *affinity.Router, opts *ForwardOptions) *Forwarder {
	var o ForwardOptions
	if opts != nil {
		o = *opts
	}
	f := &Forwarder{ids: ids, logger: o.Logger}
	if f.logger == nil {
		f.logger = slog.Default()
	}
	transport := o.Transport
	if transport == nil {
		dt := o.DialTimeout
		if dt <= 0 {
			dt = DefaultDialTimeout
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

type ownerKey struct{}

// Wrap returns a handler that forwards each request whose session ID names
// another instance to that instance, and hands every other request to next:
// requests without a session ID (initialize, /healthz), sessions this
// instance owns, IDs that fail verification, and requests another instance
// already forwarded.
func (f *Forwarder) Wrap(next http.Handler) http.Handler {
	self := f.ids.Self()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.Header.Get(SessionHeader)
		if id == "" {
			next.ServeHTTP(w, req)
			return
		}
		owner, ok := f.ids.Owner(id)
		if !ok || owner == self {
			next.ServeHTTP(w, req)
			return
		}
		if from := req.Header.Get(HopHeader); from != "" {
			// The instance at `from` believed we own this session, but the
			// ID names someone else: our address differs from the one it
			// dialled (an alias, or a reused IP). Forwarding again could
			// loop; serving locally answers 404, so the client starts over.
			f.logger.Warn("affinity: not forwarding a request twice; serving it here",
				"session", session.LogForm(f.logger, id), "owner", owner, "self", self, "forwarded_by", from)
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
		f.proxy.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), ownerKey{}, owner)))
	})
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
	pr.Out.Header.Set(HopHeader, f.ids.Self())
}

// proxyError answers a request that could not be forwarded.
func (f *Forwarder) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	owner, _ := req.Context().Value(ownerKey{}).(string)
	id := req.Header.Get(SessionHeader)
	if req.Context().Err() != nil {
		// The client went away; there is nobody to answer.
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// Nobody listens at the owner's address any more: its task stopped
		// or is shutting down, and the session ended with it. The answer is
		// the one for any unknown session (lookup).
		f.logger.Info("affinity: the session's owner is unreachable; answering 404 so the client starts a new session",
			"session", session.LogForm(f.logger, id), "owner", owner, "err", err)
		writeError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: the bridge instance that held this session is gone; send a new initialize request", nil)
		return
	}
	f.logger.Warn("affinity: forwarding to the session's owner failed",
		"session", session.LogForm(f.logger, id), "owner", owner, "err", err)
	writeError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
		"Bad Gateway: the bridge instance holding this session did not answer; retry the request", nil)
}

// slogWriter lets ReverseProxy's log.Logger write into slog.
type slogWriter struct{ l *slog.Logger }

func (s slogWriter) Write(p []byte) (int, error) {
	s.l.Warn("affinity: reverse proxy", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

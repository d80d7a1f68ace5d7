package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// telemetry is the bridge's metrics and tracing, as the configuration asks:
// either may be off (nil), and then costs nothing per message.
type telemetry struct {
	metrics *metrics.Metrics // nil with --no-metrics
	server  *metrics.Server  // the one-command form's server
	tp      *sdktrace.TracerProvider
	tracer  *tracing.Tracer // nil unless an OTLP endpoint is configured
	logger  *slog.Logger
}

func newTelemetry(ctx context.Context, cfg *config, logger *slog.Logger) (*telemetry, error) {
	t := &telemetry{logger: logger}
	if !cfg.NoMetrics {
		t.metrics = metrics.New()
		if cfg.file == nil {
			// Under --config, each server has its view (forServer): no
			// series says server="default" there.
			t.server = t.metrics.Server(metrics.DefaultServer)
		}
	}
	tp, err := tracing.Setup(ctx, &tracing.Options{Endpoint: cfg.OTLPEndpoint})
	if err != nil {
		return nil, err
	}
	if tp != nil {
		// The SDK's own failures (an unreachable collector) go to our log.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("exporting spans", "err", err, "hint", "check --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
		}))
		t.tp = tp
		t.tracer = tracing.New(tp, metrics.DefaultServer)
		logger.Info("tracing on: spans go to the OTLP endpoint", "otlp_endpoint", cfg.OTLPEndpoint)
	}
	return t, nil
}

// launcher counts the children l starts (kind: local or docker).
func (t *telemetry) launcher(l sandbox.Launcher, kind string) sandbox.Launcher {
	if t == nil || t.server == nil {
		return l
	}
	return t.server.Launcher(l, kind)
}

// watchSpares exports the warm pool's hits and misses.
func (t *telemetry) watchSpares(p *sandbox.Spares) {
	if t == nil || t.server == nil {
		return
	}
	if err := t.server.WatchSpares(p); err != nil {
		t.logger.Error("cannot export the warm pool's metrics", "err", err)
	}
}

// watchRegistry exports what the sessions' event logs hold.
func (t *telemetry) watchRegistry(r *session.Registry) {
	if t.server == nil {
		return
	}
	if err := t.server.WatchRegistry(r); err != nil {
		t.logger.Error("cannot export the event logs' metrics", "err", err)
	}
}

// watchStateless exports the churn and the load of the 2026-07-28 pool.
func (t *telemetry) watchStateless(p *pool.Pool) {
	if t == nil || t.server == nil || p == nil {
		return
	}
	err := t.server.WatchStatelessPool(p)
	if err != nil {
		t.logger.Error("cannot export the stateless pool's metrics", "err", err)
	}
}

// intercept is the telemetry's part of the interception point: the span
// first (it sees the request as its client wrote it), then the counters,
// before any policy, so that both see its refusals.
func (t *telemetry) intercept() peer.Interceptor {
	var is []peer.Interceptor
	if t.tracer != nil {
		is = append(is, t.tracer.Intercept)
	}
	if t.server != nil {
		is = append(is, t.server.Intercept)
	}
	if len(is) == 0 {
		return nil
	}
	return peer.Chain(is...)
}

// observer is told of the sessions' lives, or nil.
func (t *telemetry) observer() session.Observer {
	switch {
	case t.tracer == nil && t.server == nil:
		return nil
	case t.tracer == nil:
		return t.server
	}
	return sessionObserver{t.server, t.tracer}
}

// sessionObserver counts sessions (when metrics are on) and ends the spans
// of a session's unanswered requests with it.
type sessionObserver struct {
	m *metrics.Server // may be nil
	t *tracing.Tracer
}

func (o sessionObserver) SessionStarted(s *session.Session) {
	if o.m != nil {
		o.m.SessionStarted(s)
	}
}

func (o sessionObserver) SessionEnded(s *session.Session, reason error) {
	if o.m != nil {
		o.m.SessionEnded(s, reason)
	}
	o.t.Forget(s)
}

func (o sessionObserver) EventEvicted(bytes int) {
	if o.m != nil {
		o.m.EventEvicted(bytes)
	}
}

func (o sessionObserver) Resumed(err error) {
	if o.m != nil {
		o.m.Resumed(err)
	}
}

// handler is what the main listener serves at /metrics (behind its Host
// and token checks), or nil when metrics are off or on --metrics-listen.
func (t *telemetry) handler(cfg *config) http.Handler {
	if t.metrics == nil || cfg.MetricsListen != "" {
		return nil
	}
	return t.metrics.Handler()
}

// traceContext is the bridge's TraceContext hook, or nil with tracing off.
func (t *telemetry) traceContext() func(http.Header, []jsonrpc.Message) {
	if t.tracer == nil {
		return nil
	}
	return tracing.HeaderToMeta
}

// serveMetrics serves /metrics on --metrics-listen, if set, until stop is
// called. That listener has no authentication: what it shows is counts,
// method names and the Go runtime's figures, never a session ID, token,
// tool name or message.
// It returns the address it listens on (nil when it does not).
func (t *telemetry) serveMetrics(cfg *config) (addr net.Addr, stop func(), err error) {
	if t.metrics == nil || cfg.MetricsListen == "" {
		return nil, func() {}, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w (choose another with --metrics-listen)", cfg.MetricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", t.metrics.Handler())
	srv := &http.Server{Handler: metricsHostCheck(cfg.AllowedHosts, mux, t.logger), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(t.logger.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.logger.Error("serving /metrics stopped", "err", err)
		}
	}()
	t.logger.Info("metrics listening", "url", "http://"+ln.Addr().String()+"/metrics")
	return ln.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// metricsHostCheck refuses with 403 a request to --metrics-listen whose
// Host is not allowed: a page of a DNS-rebinding name could read /metrics
// otherwise. The names allowed are those of
// --allowed-hosts, or the loopback names when it is not given (the main
// listener then allows any Host when it is not on loopback; this one has
// no authentication); and any IP address, which no DNS rebinding
// produces, so that a scraper may name its target by address.
func metricsHostCheck(allowed []string, next http.Handler, logger *slog.Logger) http.Handler {
	if len(allowed) == 0 {
		allowed = bridge.LoopbackHosts
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Host
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		if net.ParseIP(strings.Trim(name, "[]")) == nil && !bridge.HostAllowed(allowed, r.Host) {
			logger.Warn("refused a request for /metrics with a disallowed Host (DNS rebinding?)", "host", r.Host,
				"hint", "add it to --allowed-hosts if the scraper legitimately uses this name")
			http.Error(w, "Forbidden: Host "+strconv.Quote(r.Host)+" is not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// close flushes the last spans.
func (t *telemetry) close() {
	if t.tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		t.logger.Warn("flushing the last spans to the OTLP endpoint failed", "err", err)
	}
}

// guardCounts is what the guards count: metrics.Server's counters of the
// policy and pinning (mcp_bridge_policy_denials_total,
// mcp_bridge_pin_violations_total).
type guardCounts interface {
	PolicyDenied()
	PinViolation()
}

// counts is the server's guardCounts, or nil with metrics off.
func (t *telemetry) counts() guardCounts {
	if t.server == nil {
		return nil
	}
	return t.server
}

// countDenials counts the requests the policy after it refuses.
func countDenials(c guardCounts) peer.Interceptor {
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			err := next(m)
			if err != nil {
				// Declared here: errors.As moves d to the heap, which
				// would cost every message an allocation.
				var d *policy.Denial
				if errors.As(err, &d) {
					c.PolicyDenied()
				}
			}
			return err
		}
	}
}

// alert is what the pin enforcer of a connection tells of each item a
// server offered and it dropped: the audit log and the counter. Nil when
// neither is on.
func (g *guards) alert(session string) func(origin any, v pin.Violation) {
	if g.audit == nil && g.counts == nil {
		return nil
	}
	return func(origin any, v pin.Violation) {
		if g.counts != nil {
			g.counts.PinViolation()
		}
		if g.audit != nil {
			g.audit.Alert(session, origin, v.Kind, v.Name, v.Problem)
		}
	}
}

// forServer is the telemetry of the server called name of a --config
// file: its metrics and spans carry that name in their server label.
func (t *telemetry) forServer(name string) *telemetry {
	c := *t
	if t.metrics != nil {
		c.server = t.metrics.Server(name)
	}
	if t.tp != nil {
		c.tracer = tracing.New(t.tp, name)
	}
	c.tp = nil // close is the global telemetry's
	return &c
}

// drop removes the gauges of a server that has drained out of the
// configuration (metrics.Server.Drop).
func (t *telemetry) drop() {
	if t.server != nil {
		t.server.Drop()
	}
}

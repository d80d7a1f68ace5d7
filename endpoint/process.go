package endpoint

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/procs"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/session"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// ProcessOptions configure NewProcess: what every server of a process
// shares.
type ProcessOptions struct {
	// Telemetry are the process's metrics and tracing; without a Logger of
	// their own, they log to Logger.
	Telemetry TelemetryOptions
	// Auth authenticates requests (auth.New); its Logger is Logger.
	Auth auth.Options
	// AffinitySecret, when set, turns session affinity on: session IDs
	// name this instance, AffinitySelf (affinity.ResolveSelf, with the
	// port of Listen), and any instance forwards a request to its owner.
	// Without it the GOMAXPROCS governor (procs.Start) counts every
	// server's requests in flight; with it, forwarded requests are not in
	// flight here, so the governor stays off.
	AffinitySecret []byte
	AffinitySelf   string
	Listen         string
	// LogMaxTotalBytes bounds the sessions' event logs of every server
	// together (session.NewLogBudget).
	LogMaxTotalBytes int64
	// AuditLog, when set, is an audit log opened once for the servers
	// whose own AuditLog names it (Shared.Audit): a configuration's
	// global one. AuditArgs records arguments in it.
	AuditLog  string
	AuditArgs bool
	// Scopes are advertised in the protected resource metadata from the
	// start (a global policy's), so that clients can ask for them up
	// front.
	Scopes []string
	// Logger receives the process's logs; nil means slog.Default().
	Logger *slog.Logger
}

// A Process is what the servers of one process share (Shared, for Build,
// BuildAggregate and the sets), built from ProcessOptions; Close releases
// it, after the servers.
type Process struct {
	Shared    *Shared
	Telemetry *Telemetry
	fwd       *bridge.Forwarder
	closers   []func()
}

// NewProcess builds what the servers of a process share: telemetry (and
// /metrics on its own listener), authentication, session affinity or the
// governor, the event logs' budget, the shared audit log. An error about
// one option is an OptionError of the package that refused it.
func NewProcess(ctx context.Context, o *ProcessOptions) (_ *Process, err error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &Process{}
	defer func() {
		if err != nil {
			p.Close() // what was built, last first
		}
	}()
	to := o.Telemetry
	if to.Logger == nil {
		to.Logger = logger // the process's, unless the telemetry has its own
	}
	if p.Telemetry, err = NewTelemetry(ctx, &to); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, p.Telemetry.Close)
	_, stopMetrics, err := p.Telemetry.ServeMetrics()
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, stopMetrics)
	ao := o.Auth
	ao.Logger = logger
	sh := &Shared{
		Authenticates:  ao.Enabled(),
		StaticTokens:   ao.StaticTokens,
		Metrics:        p.Telemetry.Metrics,
		MetricsHandler: p.Telemetry.Handler(),
		Tracer:         p.Telemetry.Tracer,
		LogBudget:      session.NewLogBudget(o.LogMaxTotalBytes),
		Logger:         logger,
	}
	p.Shared = sh
	if len(o.AffinitySecret) > 0 {
		self, err := affinity.ResolveSelf(ctx, o.AffinitySelf, o.Listen, nil)
		if err != nil {
			return nil, &affinity.OptionError{Field: "Self", Err: err}
		}
		if sh.Affinity, err = affinity.New(&affinity.Options{Self: self, Secret: o.AffinitySecret}); err != nil {
			return nil, fmt.Errorf("session affinity: %w", err)
		}
		sh.AffinitySecret = o.AffinitySecret
		p.fwd = bridge.NewForwarder(sh.Affinity, &bridge.ForwarderOptions{Tokens: ao.StaticTokens, Logger: logger})
		p.closers = append(p.closers, p.fwd.Close)
		sh.Forward = p.fwd.Forward
		logger.Info("session affinity on: session IDs name this instance", "self", self)
	} else {
		inflight, stopGovernor := procs.Start(logger)
		p.closers = append(p.closers, stopGovernor)
		// Every registry's and pool's requests in flight count alike.
		sh.Inflight = procs.Sources(inflight)
	}
	authn, err := auth.New(ctx, &ao)
	if err != nil {
		return nil, err
	}
	sh.Auth, sh.Scopes = authn, authn.AdvertiseScopes
	authn.AdvertiseScopes(o.Scopes...)
	if authn.OAuth() {
		logger.Info("OAuth resource server on", "issuer", ao.Issuer, "resource", ao.ResourceURL)
	}
	if o.AuditLog != "" {
		// Opened once: the servers that share it write their names in
		// its lines.
		al, err := audit.Open(o.AuditLog, &audit.Options{Args: o.AuditArgs, Logger: logger})
		if err != nil {
			return nil, &OptionError{Field: "AuditLog", Err: err}
		}
		p.closers = append(p.closers, func() { al.Close() })
		sh.Audit, sh.AuditPath = al, o.AuditLog
	}
	return p, nil
}

// Handler is what the process's listener serves of h, the front end:
// with session affinity, a request for a session another instance owns
// is forwarded to it.
func (p *Process) Handler(h http.Handler) http.Handler {
	if p.fwd == nil {
		return h
	}
	return p.fwd.Wrap(h)
}

// Close releases what the process shares, last built first: call it once
// the servers are closed.
func (p *Process) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// TelemetryOptions configure the process's metrics and tracing
// (NewTelemetry).
type TelemetryOptions struct {
	// NoMetrics turns metrics off.
	NoMetrics bool
	// MetricsListen, when set, serves /metrics on this address, without
	// authentication, instead of on the main listener.
	MetricsListen string
	// AllowedHosts are the Host names /metrics on MetricsListen accepts
	// (metrics.Serve).
	AllowedHosts []string
	// OTLPEndpoint is the collector spans go to (tracing.Options.Endpoint).
	OTLPEndpoint string
	// Logger receives the exporter's failures; nil means slog.Default().
	Logger *slog.Logger
}

// Telemetry is the process's metrics and tracing: either may be off
// (nil). Each server's metrics and spans are made of them
// (Shared.Metrics, Shared.Tracer).
type Telemetry struct {
	Metrics *metrics.Metrics         // nil with NoMetrics
	Tracer  *sdktrace.TracerProvider // nil unless an OTLP endpoint is configured
	o       TelemetryOptions
	logger  *slog.Logger
}

// NewTelemetry sets up the metrics and tracing o asks for.
func NewTelemetry(ctx context.Context, o *TelemetryOptions) (*Telemetry, error) {
	t := &Telemetry{o: *o, logger: o.Logger}
	if t.logger == nil {
		t.logger = slog.Default()
	}
	if !o.NoMetrics {
		t.Metrics = metrics.New()
	}
	tp, err := tracing.Setup(ctx, &tracing.Options{Endpoint: o.OTLPEndpoint})
	if err != nil {
		return nil, err
	}
	if tp != nil {
		// The SDK's own failures (an unreachable collector) go to our log.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			t.logger.Warn("exporting spans", "err", err, "hint", "check --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
		}))
		t.Tracer = tp
		t.logger.Info("tracing on: spans go to the OTLP endpoint", "otlp_endpoint", o.OTLPEndpoint)
	}
	return t, nil
}

// Handler is what the main listener serves at /metrics (behind its Host
// and token checks), or nil when metrics are off or on MetricsListen.
func (t *Telemetry) Handler() http.Handler {
	if t.Metrics == nil || t.o.MetricsListen != "" {
		return nil
	}
	return t.Metrics.Handler()
}

// ServeMetrics serves /metrics on MetricsListen, if set, until stop is
// called (metrics.Serve). It returns the address it listens on (nil when
// it does not).
func (t *Telemetry) ServeMetrics() (addr net.Addr, stop func(), err error) {
	if t.Metrics == nil || t.o.MetricsListen == "" {
		return nil, func() {}, nil
	}
	l, err := metrics.Serve(t.o.MetricsListen, t.o.AllowedHosts, t.Metrics.Handler(), t.logger)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w (choose another with --metrics-listen)", t.o.MetricsListen, err)
	}
	t.logger.Info("metrics listening", "url", "http://"+l.Addr().String()+"/metrics")
	return l.Addr(), l.Close, nil
}

// Close flushes the last spans.
func (t *Telemetry) Close() {
	if t.Tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Tracer.Shutdown(ctx); err != nil {
		t.logger.Warn("flushing the last spans to the OTLP endpoint failed", "err", err)
	}
}

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

	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

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

package main

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

// telemetry is the process's metrics and tracing, as the configuration
// asks: either may be off (nil). Each server's metrics and spans are
// endpoint's (endpoint.Shared.Metrics, .Tracer).
type telemetry struct {
	metrics *metrics.Metrics         // nil with --no-metrics
	tp      *sdktrace.TracerProvider // nil unless an OTLP endpoint is configured
	logger  *slog.Logger
}

func newTelemetry(ctx context.Context, cfg *config, logger *slog.Logger) (*telemetry, error) {
	t := &telemetry{logger: logger}
	if !cfg.NoMetrics {
		t.metrics = metrics.New()
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
		logger.Info("tracing on: spans go to the OTLP endpoint", "otlp_endpoint", cfg.OTLPEndpoint)
	}
	return t, nil
}

// handler is what the main listener serves at /metrics (behind its Host
// and token checks), or nil when metrics are off or on --metrics-listen.
func (t *telemetry) handler(cfg *config) http.Handler {
	if t.metrics == nil || cfg.MetricsListen != "" {
		return nil
	}
	return t.metrics.Handler()
}

// serveMetrics serves /metrics on --metrics-listen, if set, until stop is
// called (metrics.Serve). It returns the address it listens on (nil when it
// does not).
func (t *telemetry) serveMetrics(cfg *config) (addr net.Addr, stop func(), err error) {
	if t.metrics == nil || cfg.MetricsListen == "" {
		return nil, func() {}, nil
	}
	l, err := metrics.Serve(cfg.MetricsListen, cfg.AllowedHosts, t.metrics.Handler(), t.logger)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w (choose another with --metrics-listen)", cfg.MetricsListen, err)
	}
	t.logger.Info("metrics listening", "url", "http://"+l.Addr().String()+"/metrics")
	return l.Addr(), l.Close, nil
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

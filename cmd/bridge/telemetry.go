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

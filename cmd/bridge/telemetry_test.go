package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// With --metrics-listen, /metrics is served there, without authentication,
// and not on the main listener.
func TestMetricsListen(t *testing.T) {
	cfg, err := parseConfig([]string{"--metrics-listen", "127.0.0.1:0", "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := newTelemetry(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tel.handler(cfg) != nil {
		t.Error("/metrics is also served on the main listener")
	}
	addr, stop, err := tel.serveMetrics(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "mcp_bridge_sessions_active") {
		t.Fatalf("GET /metrics on --metrics-listen: %s\n%s", resp.Status, body)
	}
}

// --no-metrics: no collectors, no interceptor, no observer; no OTLP
// endpoint: no tracing. A message then passes no interceptor at all.
func TestTelemetryOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	cfg, err := parseConfig([]string{"--no-metrics", "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := newTelemetry(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tel.intercept() != nil || tel.observer() != nil || tel.handler(cfg) != nil || tel.traceContext() != nil {
		t.Fatal("telemetry off still installs hooks")
	}
}

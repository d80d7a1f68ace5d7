package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/metrics"
)

// With --metrics-listen, /metrics is served there, without authentication,
// and not on the main listener.
func TestMetricsListen(t *testing.T) {
	cfg, err := parseConfig([]string{"--metrics-listen", "127.0.0.1:0", "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := endpoint.NewTelemetry(context.Background(), discardLogs(telemetryOptions(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	if tel.Handler() != nil {
		t.Error("/metrics is also served on the main listener")
	}
	tel.Metrics.Server(metrics.DefaultServer) // what serve's endpoint.Build registers
	addr, stop, err := tel.ServeMetrics()
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

// --no-metrics: no collectors; no OTLP endpoint: no tracing (what each
// server then installs: endpoint's TestTelemetryOff).
func TestTelemetryOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	cfg, err := parseConfig([]string{"--no-metrics", "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := endpoint.NewTelemetry(context.Background(), discardLogs(telemetryOptions(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	if tel.Metrics != nil || tel.Tracer != nil || tel.Handler() != nil {
		t.Fatal("telemetry off still collects")
	}
}

// --metrics-listen checks Host as the main listener does: a DNS-rebinding
// page (evil.example resolving to 127.0.0.1) must not read /metrics.
// Without --allowed-hosts the loopback names pass;
// with it, its names; an IP address, which no rebinding can produce,
// always.
func TestMetricsListenChecksHost(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		allowed []string
		refused []string
	}{
		{nil, []string{"localhost", "127.0.0.1", "[::1]", "10.1.2.3"}, []string{"evil.example", "metrics.example"}},
		{[]string{"--allowed-hosts", "metrics.example"}, []string{"metrics.example", "10.1.2.3"}, []string{"evil.example", "localhost"}},
		{[]string{"--listen", "0.0.0.0:0", "--insecure-no-auth"}, []string{"localhost", "10.1.2.3"}, []string{"evil.example"}},
	} {
		cfg, err := parseConfig(append(append([]string{"--metrics-listen", "127.0.0.1:0"}, tc.args...), "--", "true"))
		if err != nil {
			t.Fatal(err)
		}
		tel, err := endpoint.NewTelemetry(context.Background(), discardLogs(telemetryOptions(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		addr, stop, err := tel.ServeMetrics()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := strings.Cut(addr.String(), ":")
		get := func(host string) int {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/metrics", nil)
			req.Host = host + ":" + port
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, h := range tc.allowed {
			if code := get(h); code != http.StatusOK {
				t.Errorf("%v: Host %s: %d, want 200", tc.args, h, code)
			}
		}
		for _, h := range tc.refused {
			if code := get(h); code != http.StatusForbidden {
				t.Errorf("%v: Host %s: %d, want 403", tc.args, h, code)
			}
		}
		stop()
	}
}

// discardLogs gives o a logger that writes nowhere.
func discardLogs(o *endpoint.TelemetryOptions) *endpoint.TelemetryOptions {
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

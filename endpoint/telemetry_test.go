package endpoint

import (
	"log/slog"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/pin"
)

// Metrics and tracing off, and no guard: no interceptor, no observer, no
// trace context. A message then passes no interceptor at all.
func TestTelemetryOff(t *testing.T) {
	sh := &Shared{}
	logger := slog.New(slog.DiscardHandler)
	tel := newTelemetry(sh, "", logger)
	g, err := newGuards(&ServerOptions{Inspection: pin.Inspection{AllowHiddenUnicode: true, MaxDescriptionBytes: -1}}, sh, tel, logger)
	if err != nil {
		t.Fatal(err)
	}
	if i, _ := g.chain("s", nil, logger, nil, nil); i != nil {
		t.Error("an interceptor with telemetry and guards off")
	}
	if tel.observer() != nil || sh.HandlerOptions(bridge.Options{}).TraceContext != nil {
		t.Error("telemetry off still installs hooks")
	}
}

// A server's metrics carry its name, the one-command form's
// metrics.DefaultServer.
func TestTelemetryServerName(t *testing.T) {
	sh := &Shared{Metrics: metrics.New()}
	logger := slog.New(slog.DiscardHandler)
	if got := newTelemetry(sh, "", logger).server.Name(); got != metrics.DefaultServer {
		t.Errorf("one-command form: server %q, want %q", got, metrics.DefaultServer)
	}
	if got := newTelemetry(sh, "files", logger).server.Name(); got != "files" {
		t.Errorf("server files: %q", got)
	}
}

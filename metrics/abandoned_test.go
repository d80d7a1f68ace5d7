package metrics_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// A stateless call whose child dies before answering is closed once, as
// aborted, in metrics, and its span ends as aborted, in either era of
// child: the connection's end passes the call through the interception
// point as abandoned (peer.Message.Abandoned). A pool has no session whose
// end would forget it: before, the call stayed pending and its span open.
func TestStatelessCallOfAKilledChildIsClosedOnce(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			m := metrics.New()
			srvm := m.Server(metrics.DefaultServer)
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			tracer := tracing.New(tp, "default")
			logger := slog.New(slog.DiscardHandler)
			local := sandbox.NewLocal(&sandbox.LocalOptions{
				Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: logger,
			})
			p, err := pool.New(&pool.Options{
				Launch: func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) },
				Era:    era, Min: -1, Logger: logger,
				Peer: peer.Options{Intercept: peer.Chain(srvm.Intercept, tracer.Intercept)},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = p.Close(ctx)
				_ = tp.Shutdown(ctx)
			})
			data := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"crash","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
			env, err := jsonrpc.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			ans, err := p.Serve(ctxT(t), &pool.Request{Msg: jsonrpc.Message{Data: data, Env: env}, Caps: json.RawMessage(`{}`)},
				func([]byte) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if _, rpcErr, _ := jsonrpc.DecodeResponse(ans); rpcErr == nil {
				t.Fatalf("a call whose MCP server crashed: %s", ans)
			}
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := value(fams, "mcp_bridge_requests_total", "server", "default", "method", "tools/call", "outcome", "aborted"); got != 1 {
				t.Errorf("aborted tools/call = %v, want 1", got)
			}
			if got := value(fams, "mcp_bridge_request_duration_seconds", "server", "default", "method", "tools/call"); got != 1 {
				t.Errorf("tools/call durations = %v, want 1 (closed once)", got)
			}
			var ended int
			for _, s := range exp.GetSpans() {
				if s.Name == "tools/call crash" {
					ended++
					if s.Status.Code != codes.Error {
						t.Errorf("span status %v, want an error", s.Status)
					}
				}
			}
			if ended != 1 {
				t.Errorf("%d ended spans of the call, want 1", ended)
			}
		})
	}
}

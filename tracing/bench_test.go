package tracing_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// BenchmarkChain measures the interception point per request and its
// answer: with nothing, with metrics, with metrics and tracing off (the
// command installs no tracing interceptor then: the chain is the metrics
// one), and with tracing on (every request sampled, spans dropped by a
// no-op exporter).
//
//	go test -run '^$' -bench Chain -benchmem ./tracing/
func BenchmarkChain(b *testing.B) {
	req := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
	resp := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hello"}]}}`)
	reqEnv, _ := jsonrpc.Parse(req)
	respEnv, _ := jsonrpc.Parse(resp)
	m := metrics.New().Server("default")
	var tracingOff peer.Interceptor // what the command has without an endpoint
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	defer tp.Shutdown(b.Context())
	on := tracing.New(tp, "default")
	origin := &childtest.Client{Name: "bench"}
	for _, c := range []struct {
		name  string
		chain peer.Interceptor
	}{
		{"none", peer.Chain()},
		{"metrics", peer.Chain(m.Intercept)},
		{"metrics+tracing-off", peer.Chain(tracingOff, m.Intercept)},
		{"metrics+tracing-on", peer.Chain(on.Intercept, m.Intercept)},
	} {
		b.Run(c.name, func(b *testing.B) {
			end := func(*peer.Message) error { return nil }
			h := c.chain(end)
			b.ReportAllocs()
			for b.Loop() {
				in := peer.Message{Message: jsonrpc.Message{Data: req, Env: reqEnv}, Dir: peer.ToChild, Origin: origin, Method: "tools/call"}
				_ = h(&in)
				out := peer.Message{Message: jsonrpc.Message{Data: resp, Env: respEnv}, Dir: peer.FromChild, Origin: origin, Method: "tools/call"}
				_ = h(&out)
			}
		})
	}
}

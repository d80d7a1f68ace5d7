package metrics_test

import (
	"testing"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// BenchmarkIntercept is the interceptor's cost per request of a short
// call: the request on its way to the child and its answer back.
func BenchmarkIntercept(b *testing.B) {
	s := metrics.New().Server(metrics.DefaultServer)
	pass := func(*peer.Message) error { return nil }
	to, from := s.Intercept(pass), s.Intercept(pass)
	parse := func(data string) jsonrpc.Message {
		env, err := jsonrpc.Parse([]byte(data))
		if err != nil {
			b.Fatal(err)
		}
		return jsonrpc.Message{Data: []byte(data), Env: env}
	}
	req := parse(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	resp := parse(`{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`)
	origin := &childtest.Client{Name: "bench"}
	var m peer.Message
	b.ReportAllocs()
	for b.Loop() {
		m = peer.Message{Message: req, Dir: peer.ToChild, Origin: origin, Method: "tools/call"}
		if err := to(&m); err != nil {
			b.Fatal(err)
		}
		m = peer.Message{Message: resp, Dir: peer.FromChild, Origin: origin, Method: "tools/call"}
		if err := from(&m); err != nil {
			b.Fatal(err)
		}
	}
}

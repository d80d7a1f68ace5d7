package endpoint_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
)

// A Configuration of one server and one aggregate, in process: each is
// reached at its path; the aggregate's bounds hold (a session's second
// member gets -32603 naming the bound per session); a reload that
// removes the server and keeps the aggregate changes only the server; a
// 2026-07-28 call in flight on the aggregate's sibling server at
// shutdown (Drain, WaitIdle within the grace, Close) gets its answer.
func TestConfigurationApplyAndShutdown(t *testing.T) {
	sh := shared(t)
	conf := endpoint.NewConfiguration(&endpoint.SetOptions{
		Edge:       &bridge.Options{Path: bridge.DefaultPath},
		Grace:      time.Minute,
		StopBudget: 30 * time.Second,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	srv := httptest.NewServer(conf)
	closed := false
	t.Cleanup(func() {
		srv.Close()
		if !closed {
			_ = conf.Close(context.Background())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server := func(name string) endpoint.Member {
		return endpoint.Member{Name: name, Key: "1", Build: func(context.Context) (*endpoint.Endpoint, error) {
			return build(t, bridge.ServerPath(name), nil), nil
		}}
	}
	builds := 0
	agg := endpoint.AggregateSpec{Path: bridge.DefaultPath, Key: "1", Build: func(ctx context.Context) (*endpoint.Aggregate, error) {
		builds++
		return endpoint.BuildAggregate(ctx, sh, &endpoint.AggregateOptions{
			Front:   frontOptions(bridge.DefaultPath),
			Members: []endpoint.AggregateMember{{Server: everyOptions(t, "x")}, {Server: everyOptions(t, "y")}},
			Bounds:  endpoint.AggregateBounds{MaxChildrenPerSession: 1},
		}, bridge.DefaultPath)
	}}
	if _, _, err := conf.Apply(ctx, endpoint.Config{Servers: []endpoint.Member{server("a"), server("b")}, Aggregates: []endpoint.AggregateSpec{agg}}); err != nil {
		t.Fatal(err)
	}
	if got := conf.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Names: %v, want [a b]", got)
	}

	cs := connectVersion(t, srv.URL+bridge.DefaultPath, "2025-11-25")
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "x__test_simple_text"}); err != nil {
		t.Fatalf("the aggregate's first member: %v", err)
	}
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "y__test_simple_text"})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32603 || !strings.Contains(rpcErr.Message, "bound per session") {
		t.Fatalf("a second member with MaxChildrenPerSession 1: %v, want -32603 naming the bound", err)
	}

	servers, aggs, err := conf.Apply(ctx, endpoint.Config{Servers: []endpoint.Member{server("b")}, Aggregates: []endpoint.AggregateSpec{agg}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(servers.Removed, []string{"a"}) || !slices.Equal(aggs.Unchanged, []string{bridge.DefaultPath}) || builds != 1 {
		t.Fatalf("changes %+v and %+v, %d builds of the aggregate: want a removed, the aggregate kept", servers, aggs, builds)
	}
	if resp := post(t, srv.URL+bridge.ServerPath("zz"), newCall); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a server never configured: %d, want 404", resp.StatusCode)
	}

	c, done := startCall(t, ctx, srv.URL+bridge.ServerPath("b"))
	conf.Drain()
	now, stop := context.WithCancel(ctx)
	stop()
	if conf.WaitIdle(now) == nil {
		t.Fatal("WaitIdle returns with a 2026-07-28 call in flight")
	}
	c.Close()
	if err := conf.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := conf.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at shutdown: %v, want its answer", err)
	}
	if _, _, err := conf.Apply(ctx, endpoint.Config{}); !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
}

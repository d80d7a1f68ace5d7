package metrics_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// The 2026-07-28 pool's load is read at scrape time: its size, the calls
// on its children, the one parked while its client answers the child's
// question, and a request waiting for a child at --pool-max.
func TestStatelessPoolGauges(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: logger})
	p, err := pool.New(&pool.Options{
		Era:    pool.EraLegacy,
		Max:    1,
		Launch: func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) },
		Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	m := metrics.New()
	if err := m.Server(metrics.DefaultServer).WatchStatelessPool(p); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)

	check := func(when string, children, inflight, parked, waiting float64) {
		t.Helper()
		fams := scrape(t, srv.URL)
		for name, want := range map[string]float64{
			"mcp_bridge_pool_children":         children,
			"mcp_bridge_pool_calls_in_flight":  inflight,
			"mcp_bridge_pool_calls_parked":     parked,
			"mcp_bridge_pool_requests_waiting": waiting,
		} {
			if got := value(fams, name, "server", metrics.DefaultServer); got != want {
				t.Errorf("%s: %s = %v, want %v (pool stats %+v)", when, name, got, want, p.Stats())
			}
		}
	}
	check("before any request", 0, 0, 0, 0)

	// A call that asks the client a question holds its child alone
	// (exclusive) and is parked on it until the client retries.
	elicit := func(id int) *pool.Request {
		data := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"}}}`
		env, err := jsonrpc.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return &pool.Request{Principal: "alice", Msg: jsonrpc.Message{Data: []byte(data), Env: env}, Caps: json.RawMessage(`{"elicitation":{}}`)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ans, err := p.Serve(ctx, elicit(1), func([]byte) error { return nil })
	if err != nil || !strings.Contains(string(ans), `"resultType":"input_required"`) {
		t.Fatalf("first round: %s %v", ans, err)
	}
	check("with a parked call", 1, 1, 1, 0)

	// Another such call finds no free child and no room (Max 1): it waits.
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := p.Serve(wctx, elicit(2), func([]byte) error { return nil })
		done <- err
	}()
	if err := p.Await(ctx, func(s pool.Stats) bool { return s.Waiting == 1 }); err != nil {
		t.Fatal(err)
	}
	check("with a request waiting", 1, 1, 1, 1)
	wcancel()
	if err := <-done; err == nil {
		t.Error("the waiting request, cancelled, returned no error")
	}
	check("after the waiting request's cancellation", 1, 1, 1, 0)
}

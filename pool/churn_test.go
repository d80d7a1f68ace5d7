package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// A legacy pool is keyed by (principal, capabilities),
// and capabilities that differ in what no legacy child uses (experimental
// members, unknown ones) each started a process: 60 capability sets, 60
// starts. They now make one key, and the starts are counted.
func TestCapabilitySetsShareChildren(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Max: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 60 {
		r := toolCall(t, i+1, "echo", fmt.Sprintf(`{"text":"c%d"}`, i))
		r.Caps = json.RawMessage(fmt.Sprintf(`{"experimental":{"x%d":{}},"roots":{"listChanged":true,"v%d":1},"sampling":{"z%d":{}}}`, i, i, i))
		ans, err := p.Serve(ctx, r, noEmit)
		if err := answered(ans, err, fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Started != 1 {
		t.Fatalf("60 calls with as many capability sets started %d children, want 1 (%+v)", s.Started, s)
	}
}

// At Max, a request whose key has no child takes an idle child of its
// principal initialized with fewer capabilities than it declared (the
// child then asks for nothing the client lacks), rather than stop one and
// start another.
func TestReuseAtMaxWithFewerCapabilities(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Max: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, caps := range []string{`{}`, `{"elicitation":{}}`, `{"roots":{}}`, `{}`} {
		r := toolCall(t, i+1, "echo", `{"text":"x"}`)
		r.Caps = json.RawMessage(caps)
		ans, err := p.Serve(ctx, r, noEmit)
		if err := answered(ans, err, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Started != 1 || s.Evicted != 0 {
		t.Fatalf("%+v, want 1 child started, none stopped for another key", s)
	}
}

// memServer makes c a legacy MCP server in memory that answers initialize,
// and every tools/call with its arguments' text, until it exits.
func memServer(t testing.TB, c *memchild.Child) {
	go func() {
		for line := range c.Lines() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Arguments struct{ Text string } `json:"arguments"`
				} `json:"params"`
			}
			if json.Unmarshal([]byte(line), &m) != nil || m.ID == nil {
				continue
			}
			result := `{}`
			switch m.Method {
			case "initialize":
				result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"mem","version":"1"}}`
			case "tools/call":
				text, _ := json.Marshal(m.Params.Arguments.Text)
				result = `{"content":[{"type":"text","text":` + string(text) + `}]}`
			}
			c.Say(exitingTB{t}, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+result+`}`)
		}
	}()
}

// exitingTB ends the goroutine of a server whose write failed (it was
// stopped), rather than fail the test.
type exitingTB struct{ testing.TB }

func (exitingTB) Helper()               {}
func (exitingTB) Fatalf(string, ...any) { runtime.Goexit() }

// churnPool is a legacy pool of Max children in memory, in a synctest
// bubble; opts sets EvictIdle and Limits.
func churnPool(t *testing.T, max int, opts ...Options) *Pool {
	o := Options{Era: EraLegacy, Max: max, Min: -1, Cores: 1, Settle: -1, KeepAlive: -1,
		Logger: slog.New(slog.DiscardHandler),
		Launch: func(_ context.Context, name string) (peer.Process, error) {
			c := memchild.New(&memchild.Options{ID: name})
			memServer(t, c)
			return c, nil
		}}
	for _, x := range opts {
		o.EvictIdle, o.Limits = x.EvictIdle, x.Limits
	}
	p, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return p
}

// A pool serving more principals than Max in turn started a child per
// turn (principals never share a legacy child): 40 principals of 3 calls
// each, 8 children, and each waiting principal stopped an idle child of
// another at once. A child of another principal is now stopped only once
// it has been idle EvictIdle (1s by default), so at most Max children are
// started per EvictIdle; every principal's calls complete.
func TestChurnAcrossPrincipalsBounded(t *testing.T) {
	const principals, calls, max, hold = 40, 3, 8, time.Second
	synctest.Test(t, func(t *testing.T) {
		p := churnPool(t, max)
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, principals*calls)
		for i := range principals {
			wg.Go(func() {
				for j := range calls {
					text := fmt.Sprintf("p%d-%d", i, j)
					r := toolCall(t, j+1, "echo", fmt.Sprintf(`{"text":%q}`, text))
					r.Principal = auth.Tag(fmt.Sprintf("principal-%d", i))
					ans, err := p.Serve(t.Context(), r, noEmit)
					if err := answered(ans, err, text); err != nil {
						errs <- fmt.Errorf("%s: %w", text, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		elapsed := time.Since(start)
		s := p.Stats()
		// Max at first, then at most Max per hold.
		bound := int64(max) * (1 + int64(elapsed/hold))
		t.Logf("%d calls of %d principals: %d children started, %d stopped for others, in %v", principals*calls, principals, s.Started, s.Evicted, elapsed)
		if s.Started > bound {
			t.Fatalf("%d children started in %v, want at most %d (Max %d, then Max per %v)", s.Started, elapsed, bound, max, hold)
		}
	})
}

// Taking turns one call at a time, 40 principals over 8 children need a
// start per call whatever the pool keeps; those starts are now spread at
// most Max per EvictIdle.
func TestChurnInTurnRateBounded(t *testing.T) {
	const principals, rounds, max, hold = 40, 3, 8, time.Second
	synctest.Test(t, func(t *testing.T) {
		p := churnPool(t, max)
		start := time.Now()
		for j := range rounds {
			for i := range principals {
				text := fmt.Sprintf("p%d-%d", i, j)
				r := toolCall(t, j+1, "echo", fmt.Sprintf(`{"text":%q}`, text))
				r.Principal = auth.Tag(fmt.Sprintf("principal-%d", i))
				ans, err := p.Serve(t.Context(), r, noEmit)
				if err := answered(ans, err, text); err != nil {
					t.Fatal(err)
				}
			}
		}
		elapsed := time.Since(start)
		s := p.Stats()
		bound := int64(max) * (1 + int64(elapsed/hold))
		t.Logf("%d calls of %d principals in turn: %d children started, %d stopped for others, in %v", principals*rounds, principals, s.Started, s.Evicted, elapsed)
		if s.Started > bound {
			t.Fatalf("%d children started in %v, want at most %d (Max %d, then Max per %v)", s.Started, elapsed, bound, max, hold)
		}
	})
}

// A request that gets no child within its request timeout (every child
// in use by another principal within EvictIdle) is refused with ErrNoRoom,
// which the front end answers as peer.ErrBusy (503, Retry-After), naming
// the flags to raise.
func TestChurnWaitBoundedByRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := churnPool(t, 1, Options{EvictIdle: time.Hour, Limits: peer.Limits{RequestTimeout: 5 * time.Second}})
		r := toolCall(t, 1, "echo", `{"text":"a"}`)
		r.Principal = "alice"
		if ans, err := p.Serve(t.Context(), r, noEmit); answered(ans, err, "a") != nil {
			t.Fatal(answered(ans, err, "a"))
		}
		start := time.Now()
		r = toolCall(t, 2, "echo", `{"text":"b"}`)
		r.Principal = "bob"
		ans, err := p.Serve(t.Context(), r, noEmit)
		if !errors.Is(err, ErrNoRoom) || !errors.Is(err, peer.ErrBusy) {
			t.Fatalf("bob's call while alice's child is fresh: %s %v, want ErrNoRoom", ans, err)
		}
		for _, flag := range []string{"--pool-max", "--pool-max-per-principal", "--pool-evict-idle", "--request-timeout"} {
			if !strings.Contains(err.Error(), flag) {
				t.Errorf("the refusal does not name %s: %v", flag, err)
			}
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Errorf("bob waited %v, want the request timeout, 5s", waited)
		}
		if s := p.Stats(); s.Started != 1 || s.Evicted != 0 || s.Waiting != 0 {
			t.Fatalf("%+v, want alice's child only, kept", s)
		}
	})
}

// Requests waiting for room take it in turn: one arriving later, as a
// child is about to age, does not take the room an earlier one is owed.
func TestChurnRoomInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := churnPool(t, 1)
		call := func(principal auth.Tag, id int) error {
			r := toolCall(t, id, "echo", fmt.Sprintf(`{"text":%q}`, principal))
			r.Principal = principal
			ans, err := p.Serve(t.Context(), r, noEmit)
			return answered(ans, err, string(principal))
		}
		start := time.Now()
		if err := call("alice", 1); err != nil {
			t.Fatal(err)
		}
		done := make(chan string, 2)
		go func() {
			if err := call("bob", 2); err != nil {
				t.Error(err)
			}
			done <- "bob"
		}()
		time.Sleep(DefaultEvictIdle / 2) // fake time: bob waits for alice's child to age
		go func() {
			if err := call("carol", 3); err != nil {
				t.Error(err)
			}
			done <- "carol"
		}()
		if first := <-done; first != "bob" || time.Since(start) != DefaultEvictIdle {
			t.Fatalf("%s served first, at %v; want bob, once alice's child had been idle %v", first, time.Since(start), DefaultEvictIdle)
		}
		if <-done; time.Since(start) != 2*DefaultEvictIdle {
			t.Fatalf("carol served at %v, want once bob's child had been idle %v", time.Since(start), DefaultEvictIdle)
		}
	})
}

package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// One principal parking calls (each holds its legacy
// child until the client retries, up to StateTTL) took every child of the
// pool, and every other principal's request waited. A principal now holds
// at most its share (half of Max by default, with authentication) and is
// refused beyond it; the others still get children.
func TestPrincipalShareOfChildren(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Max: 4, PrivateCache: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	park := func(principal auth.Tag, id int) ([]byte, error) {
		r := request(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"}}}`, id))
		r.Principal = principal
		return p.Serve(ctx, r, noEmit)
	}
	share := p.share()
	if share != 2 {
		t.Fatalf("share of Max 4: %d, want 2", share)
	}
	for i := range share {
		if ans, err := park("mallory", i+1); err != nil || !strings.Contains(string(ans), `"resultType":"input_required"`) {
			t.Fatalf("mallory's parked call %d: %s %v", i+1, ans, err)
		}
	}
	ans, err := park("mallory", 99)
	if !errors.Is(err, ErrPrincipalShare) {
		t.Fatalf("mallory's call beyond her share of %d children: %.80s %v, want ErrPrincipalShare", share, ans, err)
	}
	// Another principal parks its own calls meanwhile: the rest of Max.
	for i := range p.opts.Max - share {
		if ans, err := park("alice", 10+i); err != nil || !strings.Contains(string(ans), `"resultType":"input_required"`) {
			t.Fatalf("alice's call %d beside mallory's parked ones: %s %v", i+1, ans, err)
		}
	}
	if s := p.Stats(); s.Parked != p.opts.Max || s.Children != p.opts.Max {
		t.Fatalf("%+v, want %d parked calls on as many children", s, p.opts.Max)
	}
}

// Without authentication every client is one principal: the share is all
// of Max, unless set.
func TestPrincipalShareDefault(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want int
	}{
		{Options{Max: 8}, 8},
		{Options{Max: 8, PrivateCache: true}, 4},
		{Options{Max: 1, PrivateCache: true}, 1},
		{Options{Max: 9, PrivateCache: true}, 4},
		{Options{Max: 8, MaxPerPrincipal: 3}, 3},
		{Options{Max: 8, MaxPerPrincipal: 20}, 8},
	} {
		p := testPool(t, c.opts)
		if got := p.share(); got != c.want {
			t.Errorf("%+v: share %d, want %d", c.opts, got, c.want)
		}
	}
}

// Modern children are shared, but a principal's slow calls made the pool
// grow to Max (each stalled child a reason for another), and every other
// principal's request then queued behind them. A principal whose calls
// occupy its share of stalled children now queues behind its own, and
// another principal's request gets a child of its own.
func TestPrincipalShareOfStalledModernChildren(t *testing.T) {
	// Children that handle one request at a time: a slow call stalls its
	// child, and a request queued behind it waits.
	sent := make(chan struct{}, 8) // a tools/call was written to a child
	p := testPoolOf(t, "sequential", Options{Era: EraModern, Cores: 1, Max: 4, PrivateCache: true, Peer: peer.Options{
		Intercept: func(next peer.Handler) peer.Handler {
			return func(m *peer.Message) error {
				err := next(m)
				if m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindRequest && m.Method == "tools/call" {
					sent <- struct{}{}
				}
				return err
			}
		},
	}})
	clock := &testClock{base: time.Now()}
	useClock(p, clock.now)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBlocker(t)
	slow := make(chan error, 4)
	for i := range 4 {
		clock.advance(StallAfter) // the children so far answered nothing for StallAfter
		r := toolCall(t, i+1, "block", b.args())
		r.Principal = "mallory"
		go func() {
			ans, err := p.Serve(ctx, r, noEmit)
			slow <- answered(ans, err, "unblocked")
		}()
		select {
		case <-sent:
		case err := <-slow:
			t.Fatalf("slow call %d: %v", i+1, err)
		}
	}
	if s := p.Stats(); s.Children > p.share() {
		t.Fatalf("mallory's 4 slow calls took %d children of Max %d (%+v), want at most her share %d", s.Children, p.opts.Max, s, p.share())
	}
	clock.advance(StallAfter)
	r := toolCall(t, 10, "echo", `{"text":"alice's"}`)
	r.Principal = "alice"
	ans, err := p.Serve(ctx, r, noEmit)
	if err := answered(ans, err, "alice's"); err != nil {
		t.Fatalf("alice beside mallory's slow calls: %v", err)
	}
	// Each slow call ends as it reaches its child (those queued behind
	// another once it ended).
	for range 4 {
		b.running().Close()
	}
	for range 4 {
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
	}
}

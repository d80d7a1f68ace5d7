package procs

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fakeProcs stands in for runtime.GOMAXPROCS: the test must not change the
// Ps of the test binary, and checks every value set.
type fakeProcs struct {
	mu  sync.Mutex
	set []int
}

func (f *fakeProcs) Set(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = append(f.set, n)
}

func (f *fakeProcs) Calls() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.set...)
}

func newTestGovernor(t *testing.T) (*governor, *fakeProcs, *atomic.Int64) {
	t.Helper()
	var clock atomic.Int64
	f := &fakeProcs{}
	g := newGovernor(4, time.Second, f.Set, slog.New(slog.NewTextHandler(io.Discard, nil)))
	g.now = func() time.Duration { return time.Duration(clock.Load()) }
	return g, f, &clock
}

func TestProcsGovernorFollowsConcurrency(t *testing.T) {
	g, f, clock := newTestGovernor(t)
	want := func(calls ...int) {
		t.Helper()
		got := f.Calls()
		if len(got) != len(calls) {
			t.Fatalf("GOMAXPROCS set to %v, want %v", got, calls)
		}
		for i := range got {
			if got[i] != calls[i] {
				t.Fatalf("GOMAXPROCS set to %v, want %v", got, calls)
			}
		}
	}

	clock.Store(int64(999 * time.Millisecond))
	g.tick()
	want() // not yet quiet for the hold
	clock.Store(int64(time.Second))
	g.tick()
	want(1) // quiet for a second: one P
	g.tick()
	want(1) // already there

	g.inflight(1)
	g.inflight(0)
	want(1) // one request at a time changes nothing
	g.inflight(2)
	want(1, 4) // a second request in flight: all Ps back, at once
	g.inflight(3)
	want(1, 4)

	clock.Store(int64(1999 * time.Millisecond))
	g.tick()
	want(1, 4) // the burst was at 1s: not quiet for a second yet
	clock.Store(int64(2 * time.Second))
	g.tick()
	want(1, 4, 1)
}

// Raising (on the request path) and lowering (on the tick) race; the state
// must end up saying what was set last, or the governor could stay on one
// P under load.
func TestProcsGovernorRace(t *testing.T) {
	g, f, clock := newTestGovernor(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 500 {
				if (i+j)%2 == 0 {
					g.inflight(2)
				} else {
					clock.Add(int64(time.Second))
					g.tick()
				}
			}
		}()
	}
	wg.Wait()
	calls := f.Calls()
	if len(calls) == 0 {
		t.Fatal("the governor never changed GOMAXPROCS")
	}
	last := calls[len(calls)-1]
	if g.low.Load() != (last == 1) {
		t.Fatalf("the governor thinks low=%v, but the last value set was %d", g.low.Load(), last)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i] == calls[i-1] {
			t.Fatalf("GOMAXPROCS set to %d twice in a row: %v", calls[i], calls[max(0, i-5):i+1])
		}
	}
}

// Start restores GOMAXPROCS and stops its goroutine.
func TestProcsGovernorStops(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	inflight, stop := Start(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if inflight == nil {
		t.Skip("Go runs on one P here: no governor")
	}
	inflight(2)
	stop()
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

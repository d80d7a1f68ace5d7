package peer_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// expiry records when it expired, on synctest's clock.
type expiry struct {
	mu    sync.Mutex
	at    []time.Duration
	start time.Time
}

func (e *expiry) Expire() {
	e.mu.Lock()
	e.at = append(e.at, time.Since(e.start))
	e.mu.Unlock()
}

func (e *expiry) fired() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Duration(nil), e.at...)
}

// Every deadline expires when it passes, as a timer of its own would: not
// earlier because the one timer was armed for a deadline stopped since,
// not later because it was armed for a later one; a restarted deadline
// counts from the restart; a stopped one never expires.
func TestTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ts := peer.NewTimeouts(10 * time.Second)
		defer ts.Close()
		var a, b, c, d peer.Timeout
		ea, eb, ec, ed := &expiry{start: start}, &expiry{start: start}, &expiry{start: start}, &expiry{start: start}

		ts.Start(&a, ea) // due at 10s; the timer is armed for it
		time.Sleep(2 * time.Second)
		ts.Start(&b, eb) // due at 12s
		time.Sleep(2 * time.Second)
		ts.Start(&c, ec) // due at 14s
		ts.Start(&d, ed) // due at 14s, stopped below
		if !ts.Stop(&a) {
			t.Fatal("Stop of a running deadline reported false")
		}
		time.Sleep(3 * time.Second)
		if !ts.Restart(&c) { // now due at 17s
			t.Fatal("Restart of a running deadline reported false")
		}
		ts.Stop(&d)

		time.Sleep(8 * time.Second) // at 15s: the timer fired at 10s for a, which had stopped
		synctest.Wait()
		if got := eb.fired(); len(got) != 1 || got[0] != 12*time.Second {
			t.Errorf("b expired at %v, want once at 12s", got)
		}
		if got := ec.fired(); len(got) != 0 {
			t.Errorf("c expired at %v, before its restarted deadline (17s)", got)
		}
		time.Sleep(5 * time.Second) // at 20s
		synctest.Wait()
		if got := ec.fired(); len(got) != 1 || got[0] != 17*time.Second {
			t.Errorf("c expired at %v, want once at 17s", got)
		}
		if got := append(ea.fired(), ed.fired()...); len(got) != 0 {
			t.Errorf("stopped deadlines expired at %v", got)
		}
		if ts.Stop(&b) || ts.Restart(&b) {
			t.Error("Stop or Restart of an expired deadline reported true")
		}

		// A Timeout is reused once expired; the list was empty, so the
		// timer is armed afresh.
		ts.Start(&b, eb) // at 20s: due at 30s
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := eb.fired(); len(got) != 2 || got[1] != 30*time.Second {
			t.Errorf("b, started again at 20s, expired at %v, want at 30s", got)
		}
	})
}

// After Close nothing expires, and Start does nothing.
func TestTimeoutsClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := peer.NewTimeouts(time.Second)
		var a, b peer.Timeout
		ea := &expiry{start: time.Now()}
		ts.Start(&a, ea)
		ts.Close()
		ts.Start(&b, ea)
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := ea.fired(); len(got) != 0 {
			t.Errorf("expired at %v after Close", got)
		}
		if ts.Stop(&a) || ts.Stop(&b) {
			t.Error("Stop after Close reported a running deadline")
		}
	})
}

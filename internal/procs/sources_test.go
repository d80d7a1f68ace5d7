package procs

import (
	"slices"
	"testing"
)

// One request in flight in a session registry and one in a stateless pool
// are two: the governor hears their sum, each source its own count.
func TestProcsSourcesSum(t *testing.T) {
	g, f, _ := newTestGovernor(t)
	g.change(true, 1) // on one P, as after Hold without load
	sources := Sources(g.inflight)
	sessions, stateless := sources(), sources()
	sessions(1)
	if got := f.Calls(); !slices.Equal(got, []int{1}) {
		t.Fatalf("one request in flight: GOMAXPROCS set %v, want only the drop to 1", got)
	}
	stateless(1)
	if got := f.Calls(); !slices.Equal(got, []int{1, 4}) {
		t.Fatalf("a session's request and a stateless call: GOMAXPROCS set %v, want 1 then 4", got)
	}
	stateless(0)
	sessions(0)
	if Sources(nil)() != nil {
		t.Fatal("without a governor, a source must be nil (no hook to call)")
	}
}

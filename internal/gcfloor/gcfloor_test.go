package gcfloor

import (
	"runtime"
	"slices"
	"sync"
	"testing"
)

// goal is the runtime's next heap goal at GOGC p (see percent).
func goal(live, roots uint64, p int) uint64 {
	return max(live+(live+roots)*uint64(p)/100, minimumHeap*uint64(p)/100)
}

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		live, roots uint64
		want        int
	}{
		{"no heap yet", 0, 0, base},
		{"small heap: the heap minimum reaches the floor", 1 * mib, 1 * mib, 400},
		{"mid heap: the percent reaches the floor", 5 * mib, 1 * mib, 183},
		{"half the floor: GOGC=100 waits as long", 7 * mib, 1 * mib, 112},
		{"over half the floor: GOGC=100", 9 * mib, 1 * mib, base},
		{"over the floor", 20 * mib, 1 * mib, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := percent(16*mib, tc.live, tc.roots)
			if p != tc.want {
				t.Fatalf("percent(16 MiB, %d, %d) = %d, want %d", tc.live, tc.roots, p, tc.want)
			}
			if g := goal(tc.live, tc.roots, p); tc.live > 0 && tc.live < 8*mib && (g < 15*mib || g > 16*mib) {
				t.Errorf("the goal at GOGC=%d is %.1f MiB, want about 16", p, float64(g)/mib)
			}
		})
	}
}

// TestCycles checks that the tuner sets GOGC after each collection, and
// that a stopped tuner restores GOGC=100 and sets nothing more.
func TestCycles(t *testing.T) {
	var (
		mu  sync.Mutex
		got []int
	)
	cycled := make(chan struct{}, 1)
	tu := newTuner(Floor, func(p int) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		select {
		case cycled <- struct{}{}:
		default:
		}
	})
	values := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	tu.cycle()
	<-cycled
	runtime.GC() // the sentinel is unreachable: its cleanup runs a cycle
	<-cycled     // (or a collection of the runtime's own ran one first)
	tu.stop()
	set := values()
	if len(set) < 3 {
		t.Fatalf("GOGC set %v: want a value at start, after a collection and at stop", set)
	}
	for _, p := range set[:len(set)-1] {
		if p < base {
			t.Errorf("GOGC set to %d, below %d (all: %v)", p, base, set)
		}
	}
	if last := set[len(set)-1]; last != base {
		t.Fatalf("stop set GOGC to %d, want %d (all: %v)", last, base, set)
	}
	tu.cycle() // as the armed sentinel's cleanup will, after stop
	if after := values(); len(after) != len(set) {
		t.Fatalf("a stopped tuner set GOGC: %v", after[len(set):])
	}
}

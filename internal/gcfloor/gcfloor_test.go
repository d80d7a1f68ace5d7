package gcfloor

import (
	"runtime"
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
	set := make(chan int, 16)
	tu := newTuner(Floor, func(p int) { set <- p })
	tu.cycle()
	if p := <-set; p < base {
		t.Fatalf("GOGC set to %d, below %d", p, base)
	}
	runtime.GC() // the sentinel is unreachable: its cleanup runs the next cycle
	if p := <-set; p < base {
		t.Fatalf("GOGC set to %d after a collection, below %d", p, base)
	}
	tu.stop()
	if p := <-set; p != base {
		t.Fatalf("stop set GOGC to %d, want %d", p, base)
	}
	tu.cycle() // as the armed sentinel's cleanup will, after stop
	select {
	case p := <-set:
		t.Fatalf("a stopped tuner set GOGC to %d", p)
	default:
	}
}

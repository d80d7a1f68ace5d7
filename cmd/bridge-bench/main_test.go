package main

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The interval for the median covers the true median in about 95 % of
// samples (here of a uniform distribution on [0, 1), median 0.5), and
// narrows as rounds are added.
func TestMedianInterval(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{15, 31, 101} {
		const trials = 2000
		covered, width := 0, 0.0
		for range trials {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = r.Float64()
			}
			slices.Sort(xs)
			lo, hi := medianInterval(xs)
			if lo > hi {
				t.Fatalf("n=%d: interval %v to %v", n, lo, hi)
			}
			if lo <= 0.5 && 0.5 <= hi {
				covered++
			}
			width += hi - lo
		}
		if c := float64(covered) / trials; c < 0.93 || c > 0.99 {
			t.Errorf("n=%d: the interval covered the median in %.3f of samples, want about 0.95", n, c)
		}
		t.Logf("n=%d: coverage %.3f, mean width %.3f", n, float64(covered)/trials, width/trials)
	}
	// Too few values for any confidence: their whole range.
	if lo, hi := medianInterval([]float64{1, 2, 3}); lo != 1 || hi != 3 {
		t.Errorf("3 values: %v to %v, want 1 to 3", lo, hi)
	}
}

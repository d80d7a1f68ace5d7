// Package gcfloor keeps Go's garbage collector from running while the
// bridge's heap is small (see Start). Like procs, it is a policy of the
// bridge's process, which cmd/bridge starts, not part of any library.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Floor is the heap size below which the collector waits: 16 MiB.
//
// Why (BENCHMARKS.md): with GOGC=100 the runtime collects each
// time the heap has grown by its live size, but never waits for less than
// 4 MiB. The bridge's live heap is small (about 1 MiB of it the package
// data of its dependencies) while every request allocates a few KiB, so
// under load it collected every thousand calls or so, and each cycle
// scans every goroutine's stack and that package data again: at 50
// concurrent clients the collector was the largest cost per call after
// the system calls. Waiting for 16 MiB makes cycles rarer for a bounded
// price in memory, and changes nothing once the live heap is over half of
// it (a bridge holding many sessions), where GOGC=100 already waits longer.
const Floor = 16 << 20

// base is GOGC when the environment does not set it.
const base = 100

// minimumHeap is the runtime's heap minimum at GOGC=100 (heapMinimum,
// runtime/mgcpacer.go), which it scales by GOGC/100.
const minimumHeap = 4 << 20

// percent returns the GOGC that puts the next heap goal at floor, for a
// heap of live bytes after the last cycle and roots bytes of stacks and
// globals scanned: never less than base, never more than puts the
// runtime's heap minimum over floor. The runtime's goal is
//
//	live + (live + stacks + globals) * GOGC/100, and at least 4 MiB * GOGC/100
//
// (gcControllerState.commit in runtime/mgcpacer.go).
func percent(floor, live, roots uint64) int {
	if live >= floor || live+roots == 0 {
		return base
	}
	most := floor * 100 / minimumHeap
	p := (floor - live) * 100 / (live + roots)
	return int(max(base, min(p, most)))
}

// A tuner sets GOGC from percent after every collection.
type tuner struct {
	floor   uint64
	set     func(int) // debug.SetGCPercent; tests record the values
	samples []metrics.Sample

	mu      sync.Mutex
	stopped bool
}

// sentinel is the object whose cleanup marks the end of a cycle: one with
// a pointer, so that the tiny allocator does not share its block.
type sentinel struct{ _ *int }

// cycle reads the heap as the last collection left it, sets GOGC, and
// arms the next cycle's sentinel.
func (t *tuner) cycle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.samples)
	live := t.samples[0].Value.Uint64()
	roots := t.samples[1].Value.Uint64() + t.samples[2].Value.Uint64()
	t.set(percent(t.floor, live, roots))
	runtime.AddCleanup(new(sentinel), (*tuner).cycle, t)
}

func newTuner(floor uint64, set func(int)) *tuner {
	return &tuner{floor: floor, set: set, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
}

// stop restores GOGC=100; a sentinel still armed finds t stopped.
func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.set(base)
}

// Start makes the collector wait for the heap to reach Floor while the
// live heap is under half of it, setting GOGC after each collection,
// unless the GOGC environment variable is set (the operator chose). A
// memory limit (GOMEMLIMIT) still applies: the runtime collects at the
// lower of the two goals. It returns a function that restores GOGC=100.
func Start() (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := newTuner(Floor, func(p int) { debug.SetGCPercent(p) })
	t.cycle()
	return t.stop
}

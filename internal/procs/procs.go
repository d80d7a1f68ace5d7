// Package procs sets GOMAXPROCS from the bridge's load (see Start and
// governor): one P while it serves one client request at a time, all of
// them as soon as two are in flight. It is internal: a policy of the
// bridge's process, which cmd/bridge starts, not part of any library.
package procs

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Hold is how long at most one request must have been in flight before
// the governor drops to one P. It checks every Hold, so the drop comes
// between Hold and twice Hold after the last two requests in flight.
const Hold = time.Second

// A governor sets GOMAXPROCS from the bridge's load: one P while it
// serves at most one client request at a time, all of them (the value Go
// chose at start) from the moment a second request is in flight, and back
// to one after Hold without two.
//
// Why (BENCHMARKS.md): with one request at a time nothing is
// parallel, but every answer crosses from the session's stdout reader to
// the waiting handler, and readying a goroutine while a P is idle wakes an
// idle thread to look for work (futex wake, a spin, futex sleep), on every
// call. With one P there is no idle P to wake: on 2 CPUs the bridge at one
// session spent about 40% less CPU per call and answered 25–45% more
// calls/s.
// Under concurrent load the same setting would serialise the bridge behind
// one thread (7% fewer calls/s at 50 sessions), so the governor gives the
// Ps back as soon as concurrency appears: on the request path, before the
// second request is written to its server.
//
// It is off when the GOMAXPROCS environment variable is set (the operator
// chose), when Go runs with one P anyway, and with session affinity (serve
// does not start it: requests forwarded to their owner are not counted).
type governor struct {
	max    int
	hold   time.Duration
	set    func(int) // runtime.GOMAXPROCS; tests count calls instead
	logger *slog.Logger

	low    atomic.Bool  // running on one P
	busyAt atomic.Int64 // g.now() when two requests were last in flight
	now    func() time.Duration

	mu sync.Mutex // orders changes: low always says what was set last
}

func newGovernor(max int, hold time.Duration, set func(int), logger *slog.Logger) *governor {
	start := time.Now()
	return &governor{max: max, hold: hold, set: set, logger: logger,
		now: func() time.Duration { return time.Since(start) }}
}

// inflight is session.Options.Inflight: n client requests are in flight.
// With two or more it raises GOMAXPROCS at once; otherwise it costs one
// atomic load.
func (g *governor) inflight(n int) {
	if n < 2 {
		return
	}
	g.busyAt.Store(int64(g.now()))
	if g.low.Load() {
		g.change(false, n)
	}
}

// tick drops to one P if no two requests were in flight for g.hold.
func (g *governor) tick() {
	if !g.low.Load() && g.now()-time.Duration(g.busyAt.Load()) >= g.hold {
		g.change(true, 1)
	}
}

func (g *governor) change(low bool, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.low.Load() == low {
		return
	}
	procs := g.max
	if low {
		procs = 1
	}
	g.set(procs)
	g.low.Store(low)
	g.logger.Debug("GOMAXPROCS changed with the load", "gomaxprocs", procs, "requests_in_flight", n)
}

// run ticks every g.hold until ctx is done, then restores g.max.
func (g *governor) run(ctx context.Context) {
	t := time.NewTicker(g.hold)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.change(false, 0)
			return
		case <-t.C:
			g.tick()
		}
	}
}

// Start starts a governor unless the GOMAXPROCS environment
// variable is set or Go runs on one P. It returns the session.Options
// Inflight hook (nil without a governor) and a stop function that restores
// GOMAXPROCS and waits for the governor's goroutine.
func Start(logger *slog.Logger) (inflight func(int), stop func()) {
	max := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || max < 2 {
		return nil, func() {}
	}
	g := newGovernor(max, Hold, func(n int) { runtime.GOMAXPROCS(n) }, logger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(ctx)
	}()
	return g.inflight, func() {
		cancel()
		<-done
	}
}

// Sources shares the governor's hook among several counters, such as the
// session registries and the stateless pools of the servers: each source
// it returns is told its own count, and hook hears the sum of all.
// Without a hook (nil), the sources are nil too.
func Sources(hook func(int)) func() func(int) {
	if hook == nil {
		return func() func(int) { return nil }
	}
	var total atomic.Int64
	return func() func(int) {
		var last atomic.Int64
		return func(n int) {
			old := last.Swap(int64(n))
			hook(int(total.Add(int64(n) - old)))
		}
	}
}

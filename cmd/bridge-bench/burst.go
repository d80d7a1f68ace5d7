package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The burst phase: what a crowd of clients arriving at once
// costs, not only warm sessions.
//
//   - burst: N clients (-burst, 50) open sessions at the same instant, each
//     on a connection of its own; each latency is from that instant to the
//     answer of its initialize. The sessions are then deleted (untimed) and
//     the round waits until the target's processes are back to what they
//     were, so that a teardown never overlaps the next measurement.
//   - window: N clients each open a session and make -burst-calls echo
//     calls on it, all started at once; calls/s over the whole run, from the
//     start instant to the last answer: session starts are inside the
//     measured window.
//
// Targets, in the same rounds (interleaved, every other round reversed):
// the hop floor (a bare net/http server starting one child per session),
// the bridge, the same bridge with --local-unsupervised (no supervisor:
// what the supervisor costs is the difference), and the -baseline build.
// A warm-up burst per target precedes the rounds (untimed), so that every
// process is started and has run its code once.

type burstTarget struct {
	name    string
	kind    string // "hop", "bridge", "unsupervised", "baseline"
	bin     string // the bridge binary, for its supervisors' memory; "" for the floor
	minimal string // the servers' binary
	start   func(ctx context.Context) (url string, pid int, stop func(), err error)

	url  string
	pid  int
	stop func()
	err  error

	bursts [][]time.Duration // latencies, one slice per round
	rates  []float64         // window calls/s, one per round
	mem    [][2]supMem       // its supervisors before the burst and with its sessions open, one pair per round
}

// supMem is the memory of a bridge's processes other than itself and the
// servers (its supervisors), with N sessions open.
type supMem struct {
	procs    int
	rss, pss int64
}

func burstRows(ctx context.Context, c *config, add func(string, string, string, string), fail func(string, error)) {
	bridge := func(bin, name, kind string, extra ...string) *burstTarget {
		return &burstTarget{name: name, kind: kind, bin: bin, minimal: c.minimal, start: func(ctx context.Context) (string, int, func(), error) {
			b, err := startBridge(ctx, bin, c.minimal, false, append([]string{"--max-sessions", "5000"}, extra...)...)
			if err != nil {
				return "", 0, nil, err
			}
			return b.url, b.pid, func() { b.stopAndReport(name, 60*time.Second) }, nil
		}}
	}
	ts := []*burstTarget{
		{name: "hop floor", kind: "hop", minimal: c.minimal, start: func(context.Context) (string, int, func(), error) {
			f, err := startFloor(c.minimal, "-hop")
			if err != nil {
				return "", 0, nil, err
			}
			return f.url, f.pid, f.close, nil
		}},
		bridge(c.bridge, "bridge", "bridge"),
		bridge(c.bridge, "bridge, --local-unsupervised", "unsupervised", "--local-unsupervised"),
	}
	if c.baseline != "" {
		ts = append(ts, bridge(c.baseline, "baseline bridge", "baseline"))
	}
	for _, t := range ts {
		logf("burst: starting %s", t.name)
		if t.url, t.pid, t.stop, t.err = t.start(ctx); t.err != nil {
			fail("burst: "+t.name, t.err)
			continue
		}
		defer t.stop()
		if _, err := t.burst(ctx, c.burst, nil); err != nil { // warm-up
			t.err = err
			fail("burst: "+t.name+" (warm-up)", err)
		}
	}
	for round := 1; round <= c.rounds && ctx.Err() == nil; round++ {
		order := slices.Clone(ts)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if t.err != nil {
				continue
			}
			logf("round %d: burst of %d sessions, %s", round, c.burst, t.name)
			var m *[2]supMem
			if t.bin != "" {
				m = &[2]supMem{}
			}
			lats, err := t.burst(ctx, c.burst, m)
			if err != nil {
				t.err = err
				fail(fmt.Sprintf("burst: %s (round %d)", t.name, round), err)
				continue
			}
			t.bursts = append(t.bursts, lats)
			if m != nil {
				t.mem = append(t.mem, *m)
			}
			logf("round %d: %d sessions opened inside the window, %d calls each, %s", round, c.burst, c.burstCalls, t.name)
			rate, err := t.window(ctx, c.burst, c.burstCalls)
			if err != nil {
				t.err = err
				fail(fmt.Sprintf("window: %s (round %d)", t.name, round), err)
				continue
			}
			t.rates = append(t.rates, rate)
		}
	}

	of := func(kind string) *burstTarget {
		for _, t := range ts {
			if t.kind == kind && len(t.bursts) > 0 {
				return t
			}
		}
		return nil
	}
	unsup, base, hop := of("unsupervised"), of("baseline"), of("hop")
	for _, t := range ts {
		if len(t.bursts) == 0 {
			continue
		}
		all := slices.Concat(t.bursts...)
		res := fmt.Sprintf("p50 %s, p99 %s over %d rounds", dur(percentile(all, 50)), dur(percentile(all, 99)), len(t.bursts))
		target, met := "", ""
		for _, o := range []*burstTarget{unsup, base, hop} {
			if o == nil || o == t || t.kind == "hop" || t.kind == "unsupervised" && o.kind != "hop" {
				continue
			}
			r50, s50 := latencyRatio(t.bursts, o.bursts, 50)
			r99, s99 := latencyRatio(t.bursts, o.bursts, 99)
			res += fmt.Sprintf("; p50 = %.2f x %s %s, p99 = %.2f x %s", r50, o.name, s50, r99, s99)
			if t.kind == "bridge" && o.kind == "unsupervised" {
				target, met = "p50 <= 1.25 x --local-unsupervised", yesNo(r50 <= 1.25)
			}
		}
		if len(t.mem) > 0 {
			// The last round's: a reading per round, not a median.
			m0, m := t.mem[len(t.mem)-1][0], t.mem[len(t.mem)-1][1]
			if m.procs > 0 {
				n := int64(c.burst)
				res += fmt.Sprintf("; its supervisors, with no session: %d processes, RSS %s, PSS %s; with %d sessions: %d processes, RSS %s, PSS %s; per session added: RSS %s, PSS %s",
					m0.procs, mib(m0.rss), mib(m0.pss), c.burst, m.procs, mib(m.rss), mib(m.pss), kib((m.rss-m0.rss)/n), kib((m.pss-m0.pss)/n))
			}
		}
		add(fmt.Sprintf("burst: %d clients open sessions at once, initialize answered, %s", c.burst, t.name), res, target, met)
	}
	for _, t := range ts {
		if len(t.rates) == 0 {
			continue
		}
		res := fmt.Sprintf("%s calls/s (median of %d rounds)", thousands(median(slices.Clone(t.rates))), len(t.rates))
		for _, o := range []*burstTarget{hop, unsup, base} {
			if o == nil || o == t || len(o.rates) == 0 || t.kind == "hop" || t.kind == "unsupervised" && o.kind != "hop" {
				continue
			}
			r, spread := rateRatio(t.rates, o.rates)
			res += fmt.Sprintf(" = %.2f x %s %s", r, o.name, spread)
		}
		add(fmt.Sprintf("%d sessions opened inside the measured window, %d echo calls each, %s", c.burst, c.burstCalls, t.name), res, "", "")
	}
}

// burst opens n sessions at one instant and returns, for each, the time
// from that instant to its initialize answered; then it deletes them and
// waits for the target's processes to settle. With m, it also reads the
// memory of the bridge's supervisors before and while the sessions are
// open.
func (t *burstTarget) burst(ctx context.Context, n int, m *[2]supMem) ([]time.Duration, error) {
	if m != nil {
		m[0] = t.supervisorMemory()
	}
	tr := newTransport(n)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	clients := make([]*mcpClient, n)
	lats := make([]time.Duration, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	var t0 time.Time
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			c := newMCPClient(hc, t.url)
			clients[i] = c
			ready.Done()
			<-release
			errs[i] = c.open(ctx)
			lats[i] = time.Since(t0)
		}()
	}
	ready.Wait()
	t0 = time.Now()
	close(release)
	done.Wait()
	if m != nil {
		m[1] = t.supervisorMemory()
	}
	_ = forEach(n, 8, func(i int) error { clients[i].close(context.WithoutCancel(ctx)); return nil })
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return lats, t.settle(ctx)
}

// window has n clients, started at one instant, each open a session and
// make calls echo calls; it returns calls/s from that instant to the last
// answer.
func (t *burstTarget) window(ctx context.Context, n, calls int) (float64, error) {
	tr := newTransport(n)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	clients := make([]*mcpClient, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			c := newMCPClient(hc, t.url)
			clients[i] = c
			ready.Done()
			<-release
			if errs[i] = c.initialize(ctx); errs[i] != nil {
				return
			}
			for range calls {
				if errs[i] = c.echo(ctx); errs[i] != nil {
					return
				}
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(release)
	done.Wait()
	el := time.Since(t0)
	_ = forEach(n, 8, func(i int) error { clients[i].close(context.WithoutCancel(ctx)); return nil })
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(n*calls) / el.Seconds(), t.settle(ctx)
}

// settle waits until no server runs under the target: the servers of
// deleted sessions have exited (a bridge's supervisor may stay).
func (t *burstTarget) settle(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := len(t.running(t.minimal))
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still runs %d servers 60s after their sessions were deleted", t.name, n)
		}
		if err := pace(ctx, time.Now().Add(5*time.Millisecond)); err != nil {
			return err
		}
	}
}

// running lists the target's descendants that run the binary bin.
func (t *burstTarget) running(bin string) []int {
	want, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil
	}
	want, _ = filepath.Abs(want)
	var out []int
	for _, pid := range descendants(t.pid) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == want {
			out = append(out, pid)
		}
	}
	return out
}

// supervisorMemory sums VmRSS and Pss of the target's descendants that run
// the bridge binary: its supervisors (the servers run the minimal server).
func (t *burstTarget) supervisorMemory() supMem {
	var m supMem
	for _, pid := range t.running(t.bin) {
		m.procs++
		m.rss += procField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
		m.pss += procField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	}
	return m
}

// procField reads a "Name: N kB" line of a /proc file, in bytes.
func procField(path, name string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			if f := strings.Fields(v); len(f) == 2 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// latencyRatio is the median over rounds of the ratio of two targets' p-th
// percentile latency in the same round, with its confidence interval (see
// spreadRatio).
func latencyRatio(a, b [][]time.Duration, p float64) (float64, string) {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if q := percentile(b[i], p); q > 0 {
			rs = append(rs, float64(percentile(a[i], p))/float64(q))
		}
	}
	return ratioSpread(rs)
}

// rateRatio is latencyRatio for rates.
func rateRatio(a, b []float64) (float64, string) {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			rs = append(rs, a[i]/b[i])
		}
	}
	return ratioSpread(rs)
}

func ratioSpread(rs []float64) (float64, string) {
	if len(rs) == 0 {
		return 0, ""
	}
	slices.Sort(rs)
	lo, hi := medianInterval(rs)
	if len(rs) < 6 {
		return median(rs), fmt.Sprintf("(median of %d rounds, too few for 95 %% confidence; all within %.2f to %.2f)", len(rs), lo, hi)
	}
	return median(rs), fmt.Sprintf("(median of %d rounds, 95 %% confidence %.2f to %.2f)", len(rs), lo, hi)
}

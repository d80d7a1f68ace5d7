// Command bridge-bench measures what the bridge costs and prints
// one table, every figure from the same run:
//
//   - floors: round trips straight over the stdio of the minimal server (no
//     HTTP); a bare Go HTTP server answering the same JSON itself (no
//     child); and the hop floor, a bare Go HTTP server forwarding each POST
//     to one minimal server per session, with none of a bridge's work;
//   - the bridge in front of the minimal server: calls/s and p50/p99 latency
//     at 1 and at many concurrent sessions, with SSE answers (the default)
//     and with --json-response; session start with and without --warm;
//     sessions opened by a burst of clients at once, against the same
//     bridge with --local-unsupervised; bridge memory per idle session; a
//     large tool result passing through;
//     the replay of a long stream;
//   - the bridge with --policy, --pin-file (of the minimal server, written
//     by bridge pin) and --audit-log, against the same bridge without them;
//   - optionally supergateway, side by side, with the same load generator.
//
// Throughput rounds interleave the targets (floor, bridge, ...) so that a
// change in the machine's load hits all of them alike; the rate shown is the
// median round, the latencies are over all rounds.
//
// It runs from the module (it builds ./cmd/bridge and the minimal server
// unless given -bridge and -minimal), uses loopback only, and stops by
// itself: every phase is bounded by counts and durations, the whole run by
// -timeout. Bridge memory is read from /proc/<pid>/status of the bridge
// process, so the children's memory is not counted.
//
//	go run ./cmd/bridge-bench
//	go run ./cmd/bridge-bench -supergateway PATH -node PATH
//	go run ./cmd/bridge-bench -profile /tmp/prof   # CPU and heap profiles of the bridge
//	go run ./cmd/bridge-bench -only instr -baseline OLD  # instructions per call (valgrind)
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/procs"
)

type config struct {
	bridge, minimal string
	baseline        string
	baseStateless   bool
	duration, warm  time.Duration
	rounds          int
	restart         bool
	concurrency     int
	starts          int
	burst           int
	burstCalls      int
	startInterval   time.Duration
	warmPool        int
	idle            int
	settle          time.Duration
	bigBytes        int
	bigCalls        int
	replayEvents    int
	sg, node        string
	profileDir      string
	only            string
	instrCases      string
	timeout         time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.bridge, "bridge", "", "bridge `binary` (default: build ./cmd/bridge into a temporary directory)")
	flag.StringVar(&c.baseline, "baseline", "", "another bridge `binary` (an earlier build) measured in the same rounds as the bridge, for before/after figures")
	flag.BoolVar(&c.baseStateless, "baseline-stateless", false, "with -baseline: measure its revision 2026-07-28 row (default --pool-max) too, in the same rounds; the baseline must serve that revision")
	flag.StringVar(&c.minimal, "minimal", "", "minimal server `binary` (default: build ./cmd/bridge-bench/minimal)")
	flag.DurationVar(&c.duration, "duration", 3*time.Second, "measurement window of each throughput figure, per round")
	flag.DurationVar(&c.warm, "warmup", 500*time.Millisecond, "warm-up before each throughput window")
	flag.IntVar(&c.rounds, "rounds", 5, "throughput rounds (targets interleaved; the median round is shown)")
	flag.BoolVar(&c.restart, "restart", false, "start every throughput target afresh each round, so that rounds also sample how a process happened to be laid out (for before/after and guards ratios)")
	flag.IntVar(&c.concurrency, "concurrency", 50, "concurrent sessions of the second throughput figure")
	flag.IntVar(&c.starts, "starts", 200, "session starts timed, per target")
	flag.IntVar(&c.burst, "burst", 50, "clients opening sessions at once in the burst phase")
	flag.IntVar(&c.burstCalls, "burst-calls", 300, "echo calls of each session opened inside the burst phase's measured window")
	flag.DurationVar(&c.startInterval, "start-interval", 20*time.Millisecond, "one session start every this long")
	flag.IntVar(&c.warmPool, "warm", 4, "also time session starts with the bridge's --warm N (0: skip)")
	flag.IntVar(&c.idle, "idle", 1000, "idle sessions held for the memory figure")
	flag.DurationVar(&c.settle, "settle", 2*time.Second, "pause before each memory reading")
	flag.IntVar(&c.bigBytes, "big", 10<<20, "`bytes` of the large tool result")
	flag.IntVar(&c.bigCalls, "big-calls", 5, "large results passed in a row")
	flag.IntVar(&c.replayEvents, "replay", 10000, "events in the replayed stream")
	flag.StringVar(&c.sg, "supergateway", "", "supergateway `script` to measure side by side (optional)")
	flag.StringVar(&c.node, "node", "node", "`node` binary that runs -supergateway")
	flag.StringVar(&c.profileDir, "profile", "", "build the bridge with a pprof hook and write CPU and heap profiles to `dir`")
	flag.StringVar(&c.only, "only", "", "comma-separated phases to run: floor,hop,ssehop,poolhop,bridge,json,stateless,guards,sg,start,burst,idle,big,replay, and, only when named, instr (instructions per call under valgrind) and aggregate (a call through /mcp against the member's own path) (default: all but instr and aggregate)")
	flag.StringVar(&c.instrCases, "instr-cases", "", "with -only instr: count only the cases whose description contains one of these comma-separated `words` (1 session, 50 sessions, 2025, stateless, --policy)")
	flag.StringVar(&instrOut, "instr-out", "", "with -only instr: keep each count's cachegrind file in `dir` (for cg_annotate, cg_diff)")
	flag.DurationVar(&c.timeout, "timeout", 20*time.Minute, "stop the whole run after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &c); err != nil {
		fmt.Fprintln(os.Stderr, "bridge-bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bridge-bench: "+format+"\n", args...)
}

func (c *config) phase(name string) bool {
	return c.only == "" || slices.Contains(strings.Split(c.only, ","), name)
}

// row is one line of the table.
type row struct {
	what, result, cpu, target, met string
}

func run(ctx context.Context, c *config) error {
	started := time.Now()
	loadStart := loadavg()
	dir, err := os.MkdirTemp("", "bridge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var prof *profiler
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
		prof = &profiler{dir: c.profileDir}
	}
	if c.bridge == "" || c.minimal == "" {
		logf("building the bridge and the minimal server")
		b, m, err := build(ctx, dir, prof != nil)
		if err != nil {
			return err
		}
		if c.bridge == "" {
			c.bridge = b
		}
		if c.minimal == "" {
			c.minimal = m
		}
	}

	var rows []row
	add := func(what, result, target, met string) {
		rows = append(rows, row{what: what, result: result, target: target, met: met})
		logf("%s: %s", what, result)
	}
	addCPU := func(what, result, cpu, target, met string) {
		rows = append(rows, row{what, result, cpu, target, met})
		logf("%s: %s (CPU µs/call %s)", what, result, cpu)
	}
	var bad []string // failures, reported under the table
	fail := func(what string, err error) {
		bad = append(bad, fmt.Sprintf("%s: %v", what, err))
		logf("FAILED %s: %v", what, err)
		rows = append(rows, row{what: what, result: "FAILED (see below)", met: "NO"})
	}

	tp := &throughput{c: c, prof: prof}
	if err := tp.run(ctx); err != nil {
		return err
	}
	tp.rows(addCPU, fail)

	if c.phase("start") {
		startRows(ctx, c, prof, add, fail)
	}
	if c.phase("burst") {
		burstRows(ctx, c, add, fail)
	}
	if c.phase("idle") {
		idleRows(ctx, c, prof, add, fail)
	}
	if c.phase("big") {
		bigRows(ctx, c, prof, add, fail)
	}
	if c.phase("replay") {
		replayRows(ctx, c, prof, add, fail)
	}
	if c.wantInstr() {
		instrRows(ctx, c, add, fail)
	}

	loadEnd := loadavg()
	printReport(c, rows, bad, started, loadStart, loadEnd, prof != nil)
	if ctx.Err() != nil {
		return fmt.Errorf("the run was cut short: %w", ctx.Err())
	}
	return nil
}

// target is something that answers MCP over HTTP in a throughput round.
type target struct {
	name      string
	phase     string
	base      bool    // the -baseline build
	stateless bool    // its clients speak revision 2026-07-28
	tool      string  // the echo tool's name there; empty: "echo"
	pair      *target // measured against it in the same rounds (aggregate rows)
	pairWhat  string  // what pair is, in the row
	start     func(ctx context.Context) (url string, stop func(), p *process, b *bridgeProc, err error)

	url  string
	stop func()
	pid  int // the process serving url
	b    *bridgeProc
	err  error
	res  map[int][]sample // by concurrency, one sample per round
	hwm  int64            // a bridge's peak RSS after the rounds (the highest, with -restart)

	busyUntil time.Time // the end of its last measurement with concurrent clients, or its start
}

type throughput struct {
	c      *config
	prof   *profiler
	stdio  map[int][]sample
	stdErr error
	ts     []*target
}

func (t *throughput) run(ctx context.Context) error {
	c := t.c
	bridgeArgs := []string{"--max-sessions", "5000"}
	bridgeTarget := func(bin, name, phase string, extra ...string) *target {
		return &target{name: name, phase: phase, start: func(ctx context.Context) (string, func(), *process, *bridgeProc, error) {
			b, err := startBridge(ctx, bin, c.minimal, t.prof != nil && bin == c.bridge, append(bridgeArgs, extra...)...)
			if err != nil {
				return "", nil, nil, nil, err
			}
			return b.url, func() { b.stopAndReport(name, 60*time.Second) }, b.process, b, nil
		}}
	}
	all := []*target{
		{name: "HTTP floor (bare Go server, no child)", phase: "floor", start: func(context.Context) (string, func(), *process, *bridgeProc, error) {
			f, err := startFloor(c.minimal, "-http")
			if err != nil {
				return "", nil, nil, nil, err
			}
			return f.url, f.close, f.process, nil, nil
		}},
		{name: "hop floor (HTTP to a stdio child per session, nothing else)", phase: "hop", start: func(context.Context) (string, func(), *process, *bridgeProc, error) {
			f, err := startFloor(c.minimal, "-hop")
			if err != nil {
				return "", nil, nil, nil, err
			}
			return f.url, f.close, f.process, nil, nil
		}},
		{name: sseHopName, phase: "ssehop", start: func(context.Context) (string, func(), *process, *bridgeProc, error) {
			f, err := startFloor(c.minimal, "-ssehop")
			if err != nil {
				return "", nil, nil, nil, err
			}
			return f.url, f.close, f.process, nil, nil
		}},
		statelessTarget(&target{name: fmt.Sprintf("pool hop floor (HTTP to %d stdio children shared by all clients, ids rewritten, nothing else)", runtime.NumCPU()), phase: "poolhop", start: func(context.Context) (string, func(), *process, *bridgeProc, error) {
			f, err := startFloor(c.minimal, "-poolhop")
			if err != nil {
				return "", nil, nil, nil, err
			}
			return f.url, f.close, f.process, nil, nil
		}}),
		bridgeTarget(c.bridge, "bridge, SSE answers", "bridge"),
		bridgeTarget(c.bridge, "bridge, --json-response", "json", "--json-response"),
		// Revision 2026-07-28: every client on one pool of children. The
		// pool's size matters on a small machine: the default, and one
		// child per core (fewer processes to wake per call).
		statelessTarget(bridgeTarget(c.bridge, "bridge, 2026-07-28 stateless clients on a pool (default --pool-max 8)", "stateless")),
		statelessTarget(bridgeTarget(c.bridge, fmt.Sprintf("bridge, 2026-07-28 stateless clients on a pool (--pool-max %d, one per core)", runtime.NumCPU()), "stateless", "--pool-max", strconv.Itoa(runtime.NumCPU()))),
	}
	if c.phase("guards") {
		g, cleanup, err := guardFlags(ctx, c)
		if err != nil {
			return err
		}
		defer cleanup()
		all = append(all, bridgeTarget(c.bridge, "bridge, SSE answers, --policy --pin-file --audit-log", "guards", g...))
	}
	if c.baseline != "" {
		// Interleaved with the bridge's rounds, so that the machine's load
		// changes hit both builds alike (see pairedRatio).
		all = append(all,
			bridgeTarget(c.baseline, "baseline bridge, SSE answers", "bridge"),
			bridgeTarget(c.baseline, "baseline bridge, --json-response", "json", "--json-response"))
		all[len(all)-2].base, all[len(all)-1].base = true, true
		if c.baseStateless {
			// Paired with the bridge's default-pool row (the first
			// stateless one), as the aggregate rows are with theirs.
			b := statelessTarget(bridgeTarget(c.baseline, "baseline bridge, 2026-07-28 stateless clients on a pool (default --pool-max 8)", "stateless"))
			b.base = true
			for _, tg := range all {
				if tg.phase == "stateless" && !tg.base {
					tg.pair, tg.pairWhat = b, "baseline"
					break
				}
			}
			all = append(all, b)
		}
	}
	if c.wantAggregate() {
		agg, cleanup, err := aggregateTargets(c)
		if err != nil {
			return err
		}
		defer cleanup()
		all = append(all, agg...)
	}
	if c.sg != "" {
		for _, stateful := range []bool{false, true} {
			name := "supergateway 4, stateless (default)"
			if stateful {
				name = "supergateway 4, --stateful"
			}
			all = append(all, &target{name: name, phase: "sg", start: func(ctx context.Context) (string, func(), *process, *bridgeProc, error) {
				p, url, err := startSupergateway(ctx, c.node, c.sg, c.minimal, stateful)
				if err != nil {
					return "", nil, nil, nil, err
				}
				return url, func() { p.stopAndReport(name, 10*time.Second) }, p, nil, nil
			}})
		}
	}
	for _, tg := range all {
		if !c.phase(tg.phase) {
			continue
		}
		tg.res = map[int][]sample{}
		t.ts = append(t.ts, tg)
	}
	t.stdio = map[int][]sample{}
	if len(t.ts) == 0 && !c.phase("floor") {
		return nil
	}
	for _, tg := range t.ts {
		tg.launch(ctx)
	}
	defer func() {
		for _, tg := range t.ts {
			if tg.b != nil && !tg.base {
				t.prof.fetch(ctx, tg.b.pprof, "/debug/pprof/allocs", "allocs-"+tg.phase)
			}
			if tg.stop != nil {
				tg.stop()
			}
		}
	}()
	levels := []int{1, c.concurrency}
	for round := 1; round <= c.rounds && ctx.Err() == nil; round++ {
		if c.restart && round > 1 {
			// A process's speed depends a little on where its code, stacks
			// and heap happened to land (address randomization, the
			// environment's size): the same build measured against itself
			// in one pair of processes gave 0.94 over 61 rounds. Fresh
			// processes every round sample that too.
			for _, tg := range t.ts {
				if tg.err == nil {
					tg.noteMemory()
					tg.stop()
					tg.launch(ctx)
				}
			}
		}
		for _, n := range levels {
			if c.phase("floor") && t.stdErr == nil {
				logf("round %d: stdio floor, %d sessions", round, n)
				s, err := stdioThroughput(ctx, c.minimal, n, c.warm, c.duration)
				if err != nil {
					t.stdErr = err
				} else {
					t.stdio[n] = append(t.stdio[n], s)
				}
			}
			// Every other round runs the targets in reverse order, so that
			// none is always measured first or right after another.
			order := slices.Clone(t.ts)
			if round%2 == 0 {
				slices.Reverse(order)
			}
			for _, tg := range order {
				if tg.err != nil {
					continue
				}
				if n == 1 && tg.b != nil {
					// A bridge runs on one P only after procs.Hold without
					// two requests in flight (its GOMAXPROCS governor): a
					// 1-session figure taken sooner after the same bridge's
					// concurrent one (the order reverses every other round)
					// would measure the governor's change, not the bridge.
					// It checks every procs.Hold, so it drops to one P
					// between Hold and twice Hold after the last two in
					// flight: waiting only Hold left up to 0.4 s of the default
					// window on two Ps, more or less in each process as
					// its ticker happened to fall.
					if err := pace(ctx, tg.busyUntil.Add(2*procs.Hold+100*time.Millisecond)); err != nil {
						break
					}
				}
				logf("round %d: %s, %d sessions", round, tg.name, n)
				var during func(time.Duration, time.Duration)
				if tg.b != nil && !tg.base && round == 1 {
					during = t.prof.cpu(ctx, tg.b, fmt.Sprintf("cpu-%s-c%d", tg.phase, n))
				}
				s, err := httpThroughput(ctx, tg.url, tg.tool, n, c.warm, c.duration, meterFor(tg.pid, nil), during, tg.stateless)
				if err != nil {
					tg.err = err
					continue
				}
				tg.res[n] = append(tg.res[n], s)
				if n > 1 {
					tg.busyUntil = time.Now()
				}
			}
		}
	}
	for _, tg := range t.ts {
		if tg.err == nil {
			tg.noteMemory()
		}
	}
	return nil
}

// launch starts the target; a failure is left in tg.err.
func (tg *target) launch(ctx context.Context) {
	logf("starting %s", tg.name)
	var p *process
	tg.url, tg.stop, p, tg.b, tg.err = tg.start(ctx)
	if tg.err != nil {
		logf("FAILED to start %s: %v", tg.name, tg.err)
		return
	}
	tg.pid = p.pid
	// A bridge's governor starts as if just busy (on all Ps): a 1-session
	// figure right after a (re)start waits for it as after 50 sessions.
	tg.busyUntil = time.Now()
}

// noteMemory keeps a bridge's peak RSS, the highest of its processes'.
func (tg *target) noteMemory() {
	if tg.b != nil {
		if _, hwm, err := tg.b.memory(); err == nil {
			tg.hwm = max(tg.hwm, hwm)
		}
	}
}

func statelessTarget(t *target) *target {
	t.stateless = true
	return t
}

// summary is the median round's rate and the latencies of all rounds.
type summary struct {
	ok       bool
	rate     float64
	p50, p99 time.Duration
	calls    int
	cpu      cpuSnap // per call
}

func summarize(ss []sample) summary {
	if len(ss) == 0 {
		return summary{}
	}
	rates := make([]float64, len(ss))
	var lats []time.Duration
	calls := 0
	var cpu cpuSnap
	for i, s := range ss {
		rates[i] = s.rate()
		lats = append(lats, s.lats...)
		calls += s.calls
		cpu.self += s.cpu.self
		cpu.target += s.cpu.target
		cpu.kids += s.cpu.kids
		cpu.vcsw += s.cpu.vcsw
		cpu.ivcsw += s.cpu.ivcsw
	}
	if calls > 0 {
		n := time.Duration(calls)
		// Switches per 100 calls, to keep them integers.
		per100 := func(sw int64) int64 { return (sw*100 + int64(calls)/2) / int64(calls) }
		cpu = cpuSnap{cpu.self / n, cpu.target / n, cpu.kids / n, per100(cpu.vcsw), per100(cpu.ivcsw)}
	}
	return summary{ok: true, rate: median(rates), p50: percentile(lats, 50), p99: percentile(lats, 99), calls: calls, cpu: cpu}
}

func (s summary) String() string {
	return fmt.Sprintf("%s calls/s, p50 %s, p99 %s", thousands(s.rate), dur(s.p50), dur(s.p99))
}

// cpuString is the CPU time per call: load generator / server / children;
// with the server's context switches per 100 calls where it has a
// process of its own.
func (s summary) cpuString() string {
	out := fmt.Sprintf("%d / %d / %d", s.cpu.self.Microseconds(), s.cpu.target.Microseconds(), s.cpu.kids.Microseconds())
	if s.cpu.vcsw+s.cpu.ivcsw > 0 {
		out += fmt.Sprintf(" (%d+%d sw)", s.cpu.vcsw, s.cpu.ivcsw)
	}
	return out
}

func (t *throughput) rows(add func(what, result, cpu, target, met string), fail func(string, error)) {
	c := t.c
	levels := []int{1, c.concurrency}
	sessions := func(n int) string {
		if n == 1 {
			return "1 session"
		}
		return fmt.Sprintf("%d sessions", n)
	}
	if c.phase("floor") {
		for _, n := range levels {
			what := "stdio floor (direct round trips, no HTTP), " + sessions(n)
			if s := summarize(t.stdio[n]); s.ok {
				add(what, s.String(), s.cpuString(), "", "")
			} else if t.stdErr != nil {
				fail(what, t.stdErr)
			}
		}
	}
	var floor, hop, sseHop, poolHop map[int][]sample
	for _, tg := range t.ts {
		switch tg.phase {
		case "floor":
			floor = tg.res
		case "hop":
			hop = tg.res
		case "ssehop":
			sseHop = tg.res
		case "poolhop":
			poolHop = tg.res
		}
	}
	for _, tg := range t.ts {
		for i, n := range levels {
			what := tg.name + ", " + sessions(n)
			s := summarize(tg.res[n])
			if !s.ok {
				if tg.err != nil {
					fail(what, tg.err)
				}
				continue
			}
			result := s.String()
			target, met := "", ""
			if ratio, ok := pairedRatio(tg.res[n], floor[n]); tg.phase != "floor" && ok {
				result += fmt.Sprintf(" = %.2f x HTTP floor", ratio)
				if tg.phase == "stateless" && !tg.base {
					// The target: >= 0.5 x the HTTP floor, and >= 1.5 x the
					// 2025 per-session rate, at many clients.
					if i == 1 {
						target = ">= 0.5 x floor, >= 1.5 x sessions"
						met = yesNo(ratio >= 0.5)
					}
					if r, ok := pairedRatio(tg.res[n], sessionRes(t.ts)[n]); ok {
						result += fmt.Sprintf(" = %.2f x 2025 sessions (SSE)", r)
						if i == 1 {
							met = yesNo(ratio >= 0.5 && r >= 1.5)
						}
					}
					// What any pool could reach here (the stateless
					// front end's own cost, apart from the shared hop).
					if r, ok := pairedRatio(tg.res[n], poolHop[n]); ok {
						result += fmt.Sprintf(" = %.2f x pool hop floor", r)
					}
				}
				if tg.phase == "ssehop" {
					// What SSE itself costs over plain JSON answers.
					if r, ok := pairedRatio(tg.res[n], hop[n]); ok {
						result += fmt.Sprintf(" = %.2f x hop floor", r)
					}
				}
				if tg.phase == "poolhop" {
					// The ceiling of the stateless 1.5 x target on this
					// machine: the pool hop floor against the sessions.
					if r, ok := pairedRatio(tg.res[n], sessionRes(t.ts)[n]); ok {
						result += fmt.Sprintf(" = %.2f x 2025 sessions (SSE)", r)
					}
				}
				if (tg.phase == "bridge" || tg.phase == "json") && !tg.base {
					want := []float64{0.6, 0.5}[i]
					target = fmt.Sprintf(">= %.1f x floor", want)
					met = yesNo(ratio >= want)
					// The bridge's own cost, apart from the hop any bridge
					// adds (the process and pipe per session).
					if r, ok := pairedRatio(tg.res[n], hop[n]); ok {
						result += fmt.Sprintf(" = %.2f x hop floor", r)
					}
					// SSE answers against the least SSE answers cost.
					if r, ok := pairedRatio(tg.res[n], sseHop[n]); ok && tg.phase == "bridge" {
						result += fmt.Sprintf(" = %.2f x SSE hop floor", r)
					}
				}
			}
			if b := baselineOf(t.ts, tg); b != nil && (tg.phase == "bridge" || tg.phase == "json") && !tg.base {
				if r, spread, ok := spreadRatio(tg.res[n], b.res[n]); ok {
					result += fmt.Sprintf(" = %.2f x baseline %s", r, spread)
				}
			}
			if tg.pair != nil {
				if r, spread, ok := spreadRatio(tg.res[n], tg.pair.res[n]); ok {
					result += fmt.Sprintf(" = %.2f x %s %s", r, tg.pairWhat, spread)
				}
			}
			if tg.phase == "guards" {
				// The interception point's cost: the same bridge without it,
				// in the same rounds.
				for _, b := range t.ts {
					if b.phase == "bridge" && !b.base {
						if r, spread, ok := spreadRatio(tg.res[n], b.res[n]); ok {
							result += fmt.Sprintf(" = %.2f x the bridge without them %s", r, spread)
							target, met = ">= 0.95 x without", yesNo(r >= 0.95)
						}
					}
				}
			}
			add(what, result, s.cpuString(), target, met)
		}
		if tg.hwm > 0 {
			// Each SSE answer stays in its session's log for resumption
			// (--log-max-events), so a busy bridge holds more than an idle one.
			add("... its peak RSS (VmHWM) over all these rounds", mib(tg.hwm), "", "", "")
		}
		if tg.err != nil && (len(tg.res[1]) > 0 || len(tg.res[c.concurrency]) > 0) {
			fail(tg.name+" (a later round)", tg.err)
		}
	}
}

// sseHopName is the SSE hop floor's row.
const sseHopName = "SSE hop floor (HTTP to a stdio child per session, answers as SSE events: " +
	"headers and a priming event flushed at once, the answer as an event with an ID, nothing else)"

// sessionRes is the 2025 per-session bridge's results (SSE answers).
func sessionRes(ts []*target) map[int][]sample {
	for _, tg := range ts {
		if tg.phase == "bridge" && !tg.base {
			return tg.res
		}
	}
	return nil
}

// baselineOf is the -baseline build's target measured like tg, if any.
func baselineOf(ts []*target, tg *target) *target {
	for _, b := range ts {
		if b.base && b.phase == tg.phase {
			return b
		}
	}
	return nil
}

// pairedRatio is the median over rounds of a target's rate divided by the
// floor's rate in the same round: rounds interleave the targets, so a
// change in the machine's load affects both sides of each quotient alike.
func pairedRatio(ts, fs []sample) (float64, bool) {
	rs := pairedRatios(ts, fs)
	if len(rs) == 0 {
		return 0, false
	}
	return median(rs), true
}

// pairedRatios is the ratio of each round (see pairedRatio), sorted.
func pairedRatios(ts, fs []sample) []float64 {
	var rs []float64
	for i := range min(len(ts), len(fs)) {
		if f := fs[i].rate(); f > 0 {
			rs = append(rs, ts[i].rate()/f)
		}
	}
	slices.Sort(rs)
	return rs
}

// spreadRatio is pairedRatio, and how precisely the rounds place it: a
// 95 % confidence interval for the median of rounds' ratios, from their
// order statistics (no assumption about their distribution). A target of
// a few percent is within the noise of one round on a small machine; the
// interval says whether enough rounds were run to tell.
func spreadRatio(ts, fs []sample) (r float64, spread string, ok bool) {
	rs := pairedRatios(ts, fs)
	if len(rs) == 0 {
		return 0, "", false
	}
	lo, hi := medianInterval(rs)
	if len(rs) < 6 {
		return median(rs), fmt.Sprintf("(median of %d rounds, too few for 95 %% confidence; all within %.2f to %.2f)", len(rs), lo, hi), true
	}
	return median(rs), fmt.Sprintf("(median of %d rounds, 95 %% confidence %.2f to %.2f)", len(rs), lo, hi), true
}

// medianInterval is a 95 % confidence interval for the median of the
// population sorted xs were drawn from: the order statistics around the
// middle whose ranks a binomial(n, 1/2) count falls between with about
// that probability (normal approximation, n/2 ± 1.96·√n/2). Under 6
// values it is their whole range, which holds the median with less than
// that probability (1 - 2/2ⁿ).
func medianInterval(xs []float64) (lo, hi float64) {
	n := len(xs)
	half := 1.96 * math.Sqrt(float64(n)) / 2
	j := int(math.Floor(float64(n)/2 - half)) // 1-based rank of lo
	k := int(math.Ceil(float64(n)/2 + half))  // and of hi
	return xs[max(j, 1)-1], xs[min(k, n)-1]
}

// median of xs (sorted in place); the mean of the middle two for an even count.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func startRows(ctx context.Context, c *config, prof *profiler, add func(string, string, string, string), fail func(string, error)) {
	logf("session starts: direct")
	direct, err := directStarts(ctx, c.minimal, c.starts, c.startInterval)
	if err != nil {
		fail("child start (spawn + initialize over stdio)", err)
		return
	}
	dp50, dp99 := percentile(direct, 50), percentile(direct, 99)
	add("child start alone (spawn + initialize over stdio)", fmt.Sprintf("p50 %s, p99 %s (%d starts, one per %s)",
		dur(dp50), dur(dp99), len(direct), c.startInterval), "", "")

	type variant struct {
		what  string
		warm  int
		extra []string
	}
	vs := []variant{{what: "session start through the bridge (cold: launch per session)"}}
	if c.warmPool > 0 {
		vs = append(vs, variant{what: fmt.Sprintf("session start through the bridge, --warm %d", c.warmPool), warm: c.warmPool,
			extra: []string{"--warm", fmt.Sprint(c.warmPool)}})
	}
	for _, v := range vs {
		logf("session starts: %s", v.what)
		b, err := startBridge(ctx, c.bridge, c.minimal, prof != nil, v.extra...)
		if err != nil {
			fail(v.what, err)
			continue
		}
		if v.warm > 0 {
			if err := waitChildren(ctx, b, v.warm, 30*time.Second); err != nil {
				fail(v.what, err)
				b.stop(30 * time.Second)
				continue
			}
		}
		profDone := make(chan struct{})
		if prof != nil && b.pprof != "" {
			secs := max(1, int(time.Duration(c.starts)*c.startInterval/time.Second))
			go func() {
				defer close(profDone)
				prof.fetch(ctx, b.pprof, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), fmt.Sprintf("cpu-start-warm%d", v.warm))
			}()
		} else {
			close(profDone)
		}
		d, err := bridgeStarts(ctx, b.url, c.starts, c.startInterval)
		<-profDone
		handouts := b.Handouts()
		b.stopAndReport(v.what, 30*time.Second)
		if err != nil {
			fail(v.what, err)
			continue
		}
		p50, p99 := percentile(d, 50), percentile(d, 99)
		over50, over99 := p50-dp50, p99-dp99
		res := fmt.Sprintf("p50 %s, p99 %s; minus the child's own start: p50 %s, p99 %s", dur(p50), dur(p99), dur(over50), dur(over99))
		if v.warm > 0 {
			res += fmt.Sprintf("; %d of %d sessions got a warm child", handouts, len(d))
			add(v.what, res, "no process launch waited for", yesNo(handouts == len(d)))
		} else {
			add(v.what, res, "<= 5ms + child start", yesNo(over50 <= 5*time.Millisecond && over99 <= 5*time.Millisecond))
		}
	}
}

func idleRows(ctx context.Context, c *config, prof *profiler, add func(string, string, string, string), fail func(string, error)) {
	what := fmt.Sprintf("bridge memory per idle session (%d sessions held)", c.idle)
	logf("%s", what)
	b, err := startBridge(ctx, c.bridge, c.minimal, prof != nil, "--max-sessions", fmt.Sprint(c.idle+100))
	if err != nil {
		fail(what, err)
		return
	}
	defer b.stopAndReport(what, 120*time.Second)
	r, err := idleMemory(ctx, b, c.idle, c.settle, prof)
	if err != nil {
		fail(what, err)
		return
	}
	per := (r.idle - r.base) / int64(r.n)
	add(what, fmt.Sprintf("%s each (RSS %s -> %s, %d children alive)", kib(per), mib(r.base), mib(r.idle), r.children),
		"<= 64 KiB", yesNo(per <= 64<<10 && r.children >= r.n))
	if r.statsBase != nil && r.statsIdle != nil {
		d := func(k string) string { return kib((r.statsIdle[k] - r.statsBase[k]) / int64(r.n)) }
		add("... of which, per session, in the Go runtime's view (profiling build)",
			fmt.Sprintf("HeapAlloc %s, HeapInuse %s, stacks %s, Sys %s", d("HeapAlloc"), d("HeapInuse"), d("Stack"), d("Sys")), "", "")
	}
	perStream := (r.streams - r.base) / int64(r.n)
	add(fmt.Sprintf("... the same %d sessions, each also holding a GET stream", c.idle),
		fmt.Sprintf("%s each (RSS %s)", kib(perStream), mib(r.streams)), "", "")
}

func bigRows(ctx context.Context, c *config, prof *profiler, add func(string, string, string, string), fail func(string, error)) {
	what := fmt.Sprintf("a %s tool result through the bridge", mib(int64(c.bigBytes)))
	logf("%s", what)
	limit := fmt.Sprint(2*c.bigBytes + 1<<20)
	b, err := startBridge(ctx, c.bridge, c.minimal, prof != nil, "--max-message-bytes", limit)
	if err != nil {
		fail(what, err)
		return
	}
	defer b.stopAndReport(what, 30*time.Second)
	profDone := make(chan struct{})
	if prof != nil && b.pprof != "" {
		go func() {
			defer close(profDone)
			prof.fetch(ctx, b.pprof, "/debug/pprof/profile?seconds=2", "cpu-big")
		}()
	} else {
		close(profDone)
	}
	r, err := bigResult(ctx, b, c.bigBytes, c.bigCalls)
	<-profDone
	if err != nil {
		fail(what, err)
		return
	}
	if h := prof.heap(ctx, b); h != nil {
		h("heap-big")
	}
	add(what, fmt.Sprintf("%s end to end (%.0f MiB/s); bridge peak RSS (VmHWM) %s = %.2f x the result; "+
		"RSS before the call %s (of which %s file-backed: the executable), growth to the peak %s = %.2f x",
		dur(r.first), float64(r.size)/(1<<20)/r.first.Seconds(), mib(r.hwmFirst), float64(r.hwmFirst)/float64(r.size),
		mib(r.base), mib(r.file), mib(r.hwmFirst-r.base), float64(r.hwmFirst-r.base)/float64(r.size)),
		"peak RSS <= 3 x size", yesNo(r.hwmFirst <= 3*int64(r.size)))
	add(fmt.Sprintf("... %d such results in a row", r.calls),
		fmt.Sprintf("fastest %s; bridge peak RSS %s = %.2f x the result", dur(r.best), mib(r.hwmAll), float64(r.hwmAll)/float64(r.size)),
		"", "")
}

func replayRows(ctx context.Context, c *config, prof *profiler, add func(string, string, string, string), fail func(string, error)) {
	what := fmt.Sprintf("replay of %s events (GET with Last-Event-ID)", thousands(float64(c.replayEvents)))
	logf("%s", what)
	b, err := startBridge(ctx, c.bridge, c.minimal, prof != nil, "--log-max-events", fmt.Sprint(2*c.replayEvents+16))
	if err != nil {
		fail(what, err)
		return
	}
	defer b.stopAndReport(what, 30*time.Second)
	r, err := replay(ctx, b, c.replayEvents)
	if err != nil {
		fail(what, err)
		return
	}
	add(what, fmt.Sprintf("%s for %s events (%s events/s, %s of SSE)", dur(r.replay), thousands(float64(r.replayedEvents)),
		thousands(float64(r.replayedEvents)/r.replay.Seconds()), mib(int64(r.logBytes))), "", "")
	add(fmt.Sprintf("... the same %s events live (tool call with progress)", thousands(float64(c.replayEvents))),
		fmt.Sprintf("%s (%s events/s)", dur(r.live), thousands(float64(r.events+1)/r.live.Seconds())), "", "")
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Millisecond).String()
}

func thousands(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func kib(n int64) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d CPUs, %s RAM, Linux %s, %s %s/%s", model, runtime.NumCPU(), mem, kernel,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func printReport(c *config, rows []row, bad []string, started time.Time, loadStart, loadEnd string, profiling bool) {
	fmt.Printf("bridge-bench: %s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("machine: %s\n", machine())
	fmt.Printf("load average (1, 5, 15 min): %s at start, %s at end; run took %s\n", loadStart, loadEnd,
		time.Since(started).Round(time.Second))
	fmt.Printf("throughput: %d rounds of %s (after %s warm-up) per figure, targets interleaved; calls/s = median round, "+
		"latencies over all rounds, x floor = median over rounds of the ratio to the HTTP floor's rate in the same round (x hop floor: to the hop floor's)\n",
		c.rounds, c.duration, c.warm)
	if c.restart {
		fmt.Println("-restart: every target was started afresh each round")
	}
	if profiling {
		fmt.Println("NOTE: profiling build (-profile): figures are not the release figures")
	}
	fmt.Println()
	fmt.Println("| measurement | result | CPU µs per call: client / server / children (server context switches per 100 calls: voluntary+involuntary) | target | met |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", r.what, r.result, r.cpu, r.target, r.met)
	}
	if len(bad) > 0 {
		fmt.Println()
		fmt.Println("failures:")
		for _, b := range bad {
			fmt.Println("- " + b)
		}
	}
	notes.Lock()
	defer notes.Unlock()
	if len(notes.list) > 0 {
		fmt.Println()
		fmt.Println("notes:")
		for _, n := range notes.list {
			fmt.Println("- " + n)
		}
	}
}

// guardFlags pins the minimal server with bridge pin and writes a policy,
// for the bridge row with the interception point's guards on: the flags,
// and a function that removes the files.
func guardFlags(ctx context.Context, c *config) ([]string, func(), error) {
	dir, err := os.MkdirTemp("", "bridge-bench-guards-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	lock := filepath.Join(dir, "mcp-lock.json")
	if out, err := exec.CommandContext(ctx, c.bridge, "pin", "--output", lock, "--", c.minimal).CombinedOutput(); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("bridge pin: %v\n%s", err, out)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("tools:\n  deny: [delete_*, \"*_admin\"]\n  scopes:\n    send_*: [mail:send]\n"), 0o600); err != nil {
		cleanup()
		return nil, nil, err
	}
	return []string{"--policy", policy, "--pin-file", lock, "--audit-log", filepath.Join(dir, "audit.log")}, cleanup, nil
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The instr phase counts the instructions the bridge executes per call,
// with valgrind's cachegrind: unlike calls per second, the count is the
// same for the same binary and the same requests whatever else the machine
// is doing, so a change of a few percent shows on a noisy machine. It counts
// user-space instructions only: a syscall counts as the instructions that
// issue it, however long the kernel takes.
//
// A count covers the bridge's start and stop as well as the calls, so each
// figure is the difference between two counts, of n and of 3n calls per
// client, divided by the 2n calls per client between them; each count is
// the least of three runs (leastOf). Each figure also says how much of it
// is the garbage collector's (collectorShare): a window of a few thousand
// calls holds about one collection, so that share moves by whole cycles
// between builds whose calls cost the same, and the rest compares them
// more closely. Under valgrind
// the process runs one thread at a time, so with many clients the calls
// overlap less than they do natively: the figures compare builds and
// options, not the machine's capacity.

// instrCase is one configuration counted.
type instrCase struct {
	what      string
	clients   int
	calls     int // n: per client, the first run
	stateless bool
	guards    bool
	extra     []string
	// floor is the minimal server's floor mode counted beside the bridge
	// (-hop, -ssehop, -poolhop), and floorName its name in the row.
	floor, floorName string
}

var instrCases = []instrCase{
	{what: "2025 session, SSE answers, 1 session", clients: 1, calls: 1000},
	{what: "2025 sessions, SSE answers, 50 sessions", clients: 50, calls: 40, floor: "-ssehop", floorName: "SSE hop floor"},
	// The same calls answered as JSON: what the SSE framing, the priming
	// event and the stream's timers cost is the difference.
	{what: "2025 sessions, --json-response, 50 sessions", clients: 50, calls: 40, extra: []string{"--json-response"}, floor: "-hop", floorName: "hop floor"},
	{what: "SSE answers, --policy --pin-file --audit-log, 1 session", clients: 1, calls: 1000, guards: true},
	{what: "SSE answers, --policy --pin-file --audit-log, 50 sessions", clients: 50, calls: 40, guards: true},
	{what: "2026-07-28 stateless, 1 session", clients: 1, calls: 1000, stateless: true},
	{what: "2026-07-28 stateless, --pool-max 2, 50 sessions", clients: 50, calls: 40, stateless: true, extra: []string{"--pool-max", "2"}, floor: "-poolhop", floorName: "pool hop floor"},
}

// wantInstr reports whether -only names the instr phase: it is never part
// of a run of every phase (it needs valgrind and takes minutes).
func (c *config) wantInstr() bool {
	return slices.Contains(strings.Split(c.only, ","), "instr")
}

// countsCase reports whether -instr-cases selects ic.
func (c *config) countsCase(ic instrCase) bool {
	if c.instrCases == "" {
		return true
	}
	for _, w := range strings.Split(c.instrCases, ",") {
		if w != "" && strings.Contains(ic.what, w) {
			return true
		}
	}
	return false
}

func instrRows(ctx context.Context, c *config, add func(what, result, target, met string), fail func(string, error)) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		fail("instructions per call", errors.New("valgrind not found (Debian: apt-get install valgrind)"))
		return
	}
	var guards []string
	for _, ic := range instrCases {
		if ic.guards && guards == nil {
			g, cleanup, err := guardFlags(ctx, c)
			if err != nil {
				fail("instructions per call, guards", err)
				return
			}
			defer cleanup()
			guards = g
		}
	}
	plain := map[int]float64{} // the bridge without guards, by clients
	for _, ic := range instrCases {
		if ctx.Err() != nil {
			return
		}
		if !c.countsCase(ic) {
			continue
		}
		extra := ic.extra
		if ic.guards {
			extra = append(slices.Clone(extra), guards...)
		}
		logf("instructions: %s", ic.what)
		n, err := perCall(ctx, c, c.bridge, ic, extra)
		if err != nil {
			fail("instructions per call, "+ic.what, err)
			continue
		}
		result := fmt.Sprintf("%s instructions per call (the collector's %s)", thousands(n.total), thousands(n.collector))
		switch {
		case ic.guards && plain[ic.clients] > 0:
			result += fmt.Sprintf(" = %.3f x without them", n.total/plain[ic.clients])
		case !ic.guards && !ic.stateless && len(ic.extra) == 0: // not --json-response
			plain[ic.clients] = n.total
		}
		if c.baseline != "" && !ic.guards {
			if b, err := perCall(ctx, c, c.baseline, ic, ic.extra); err != nil {
				fail("instructions per call, baseline, "+ic.what, err)
			} else {
				result += fmt.Sprintf(" = %.3f x baseline (%s; the collector's %s); without the collector's, %.3f x",
					n.total/b.total, thousands(b.total), thousands(b.collector), n.rest()/b.rest())
			}
		}
		if ic.floor != "" {
			if f, err := perCallFloor(ctx, c, ic); err != nil {
				fail("instructions per call, "+ic.floorName, err)
			} else {
				result += fmt.Sprintf(" = %.2f x the %s (%s)", n.total/f.total, ic.floorName, thousands(f.total))
			}
		}
		add("instructions, "+ic.what, result, "", "")
	}
}

// instrCount is a count of instructions: all of them, and the garbage
// collector's among them (collectorShare).
type instrCount struct {
	total, collector int64
}

// instrPerCall is the instructions of one call, and the collector's.
type instrPerCall struct {
	total, collector float64
}

// rest is the instructions per call that are not the collector's.
func (p instrPerCall) rest() float64 { return p.total - p.collector }

// perCall is the bridge's instructions per call in case ic.
func perCall(ctx context.Context, c *config, bin string, ic instrCase, extra []string) (instrPerCall, error) {
	args := append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "info", "--max-sessions", "5000"}, extra...)
	args = append(args, "--", c.minimal)
	return countDifference(ic, func(calls int) (instrCount, error) {
		return countRun(ctx, bin, args, ic, calls, false)
	})
}

// perCallFloor is the instructions per call of ic's floor (the floor's
// process only: the children are not traced, as the bridge's are not).
func perCallFloor(ctx context.Context, c *config, ic instrCase) (instrPerCall, error) {
	return countDifference(ic, func(calls int) (instrCount, error) {
		return countRun(ctx, c.minimal, []string{ic.floor, "127.0.0.1:0"}, ic, calls, true)
	})
}

func countDifference(ic instrCase, count func(calls int) (instrCount, error)) (instrPerCall, error) {
	small, err := leastOf(count, ic.calls)
	if err != nil {
		return instrPerCall{}, err
	}
	big, err := leastOf(count, 3*ic.calls)
	if err != nil {
		return instrPerCall{}, err
	}
	n := float64(2 * ic.calls * ic.clients)
	return instrPerCall{
		total:     float64(big.total-small.total) / n,
		collector: float64(big.collector-small.collector) / n,
	}, nil
}

// instrRuns is how many times each count is taken.
const instrRuns = 3

// leastOf is the least of instrRuns counts of calls. What moves a count
// between runs only adds instructions (the Go scheduler's idle threads
// spinning longer, a GC cycle more landing in the run: seen here adding
// up to 10,000 per call to a single run, once more than a whole run of
// three times the calls), so the least is the estimate of the calls' own.
func leastOf(count func(calls int) (instrCount, error), calls int) (instrCount, error) {
	least := instrCount{total: -1}
	for range instrRuns {
		n, err := count(calls)
		if err != nil {
			return instrCount{}, err
		}
		if least.total < 0 || n.total < least.total {
			least = n
		}
	}
	return least, nil
}

// instrOut, if set (-instr-out), is the directory that keeps each
// count's cachegrind file, for cg_annotate and cg_diff (what a change
// added, function by function); instrRun numbers them.
var (
	instrOut string
	instrRun int
)

var instrRefs = regexp.MustCompile(`I\s+refs:\s+([\d,]+)`)

// countRun runs bin under cachegrind, makes calls per client, stops it and
// returns the instructions it executed, and the collector's among them
// (from cachegrind's file, which -instr-out keeps). A floor prints its URL
// on stdout; a bridge logs it.
func countRun(ctx context.Context, bin string, args []string, ic instrCase, calls int, floor bool) (instrCount, error) {
	var out string
	if instrOut != "" {
		instrRun++
		out = filepath.Join(instrOut, fmt.Sprintf("%s-%dx%d-%d.cg", filepath.Base(bin), ic.clients, calls, instrRun))
		logf("instructions: %s", out)
	} else {
		f, err := os.CreateTemp("", "bridge-bench-*.cg")
		if err != nil {
			return instrCount{}, err
		}
		f.Close()
		out = f.Name()
		defer os.Remove(out)
	}
	total, err := countRunTo(ctx, bin, args, ic, calls, floor, out)
	if err != nil {
		return instrCount{}, err
	}
	f, err := os.Open(out)
	if err != nil {
		return instrCount{}, fmt.Errorf("reading cachegrind's file: %w", err)
	}
	defer f.Close()
	collector, err := collectorShare(f)
	if err != nil {
		return instrCount{}, fmt.Errorf("reading cachegrind's file %s: %w", out, err)
	}
	return instrCount{total: total, collector: collector}, nil
}

// countRunTo is countRun with cachegrind's file written to out.
func countRunTo(ctx context.Context, bin string, args []string, ic instrCase, calls int, floor bool, out string) (int64, error) {
	vargs := append([]string{"--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=" + out, "--trace-children=no", bin}, args...)
	urls := make(chan string, 1)
	var mu sync.Mutex
	refs := ""
	onLine := func(line string) {
		if m := instrRefs.FindStringSubmatch(line); m != nil {
			mu.Lock()
			refs = m[1]
			mu.Unlock()
		}
		if !floor && strings.Contains(line, `"msg":"bridge listening"`) {
			if i := strings.Index(line, `"url":"`); i >= 0 {
				u := line[i+len(`"url":"`):]
				if j := strings.IndexByte(u, '"'); j >= 0 {
					select {
					case urls <- u[:j]:
					default:
					}
				}
			}
		}
	}
	// Go's asynchronous preemption signals trip valgrind; the count does
	// not need them. Nor does it need RDTSCP, which the runtime reads on a
	// contended lock where the CPU has it and valgrind 3.19 cannot decode
	// (SIGILL: the bridge died mid-run whenever its locks were contended).
	p, stdout, stdin, err := startProcess("cachegrind "+bin, "valgrind", vargs, []string{"GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off"}, onLine)
	if err != nil {
		return 0, err
	}
	stopped := false
	defer func() {
		if !stopped { // an early return: the run failed
			p.stop(30 * time.Second)
		}
	}()
	go func() {
		r := bufio.NewReader(stdout)
		if floor {
			if line, err := r.ReadString('\n'); err == nil {
				urls <- strings.TrimSpace(line)
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	var url string
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case url = <-urls:
	case <-p.done:
		return 0, fmt.Errorf("%s exited at start under valgrind: %v\n%s", bin, p.err, p.diagnosis())
	case <-t.C:
		return 0, fmt.Errorf("%s did not start under valgrind within 2m\n%s", bin, p.diagnosis())
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if err := driveCalls(ctx, url, ic, calls); err != nil {
		return 0, err
	}
	stdin.Close() // a floor stops when its stdin ends
	if floor {
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute):
			return 0, fmt.Errorf("%s did not stop under valgrind within 2m", bin)
		}
	}
	// stop waits for the process (the floor's, after its end, only kills
	// what it left in its group).
	stopped = true
	if err := p.stop(2 * time.Minute); err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if refs == "" {
		return 0, fmt.Errorf("no instruction count from valgrind for %s\n%s", bin, p.diagnosis())
	}
	return strconv.ParseInt(strings.ReplaceAll(refs, ",", ""), 10, 64)
}

// driveCalls makes calls echo calls on each of ic.clients clients at once:
// sessions opened first and closed after (2025), or stateless calls.
func driveCalls(ctx context.Context, url string, ic instrCase, calls int) error {
	tr := newTransport(ic.clients)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	clients := make([]*mcpClient, ic.clients)
	if ic.stateless {
		for i := range clients {
			clients[i] = &mcpClient{hc: hc, url: url, stateless: true}
		}
	} else {
		cs, closeAll, err := openSessions(ctx, hc, url, ic.clients)
		defer closeAll()
		if err != nil {
			return err
		}
		clients = cs
	}
	errs := make(chan error, len(clients))
	for _, cl := range clients {
		go func() {
			for range calls {
				if err := cl.echo(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range clients {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// collectorFunc matches the runtime's functions that mark, sweep and
// scavenge the heap and manage its pages: the garbage collector's share of
// a count. A heuristic over names (the runtime has no package of its own
// for it), which a Go release may need extended.
var collectorFunc = regexp.MustCompile(`^runtime\.(gc|\(\*gc|bgsweep|bgscavenge|greyobject|findObject|tryDefer|scan|.*[sS]weep|.*[mM]ark|.*typePointers|.*pallocBits|.*pageAlloc|.*scaveng|.*spanSet|.*mheap|wbBuf)`)

// collectorShare sums the instructions of collectorFunc's functions in a
// cachegrind file ("fn=NAME" opens a function's lines, each "LINE COUNT";
// a function may appear under several files).
func collectorShare(r io.Reader) (int64, error) {
	var sum int64
	in := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "fn="); ok {
			in = collectorFunc.MatchString(name)
			continue
		}
		if !in || line == "" || line[0] < '0' || line[0] > '9' {
			continue
		}
		_, count, ok := strings.Cut(line, " ")
		if !ok {
			return 0, fmt.Errorf("line %q: want a line number and a count", line)
		}
		// With more events than Ir (a cachegrind run with --cache-sim=yes,
		// to read its files by hand) Ir comes first.
		count, _, _ = strings.Cut(count, " ")
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("line %q: %w", line, err)
		}
		sum += n
	}
	return sum, sc.Err()
}

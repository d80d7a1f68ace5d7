package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// sample is the outcome of one throughput measurement.
type sample struct {
	calls int
	dur   time.Duration
	lats  []time.Duration
	cpu   cpuSnap // CPU used during the window
}

func (s sample) rate() float64 { return float64(s.calls) / s.dur.Seconds() }

// measure runs op in a loop on n workers for warm+dur. It keeps the calls
// that started after the warm-up and ended within the window; every worker
// stops at the first error, which measure returns.
func measure(ctx context.Context, n int, warm, dur time.Duration, meter func() cpuSnap, op func(worker int) error) (sample, error) {
	start := time.Now()
	warmEnd := start.Add(warm)
	end := warmEnd.Add(dur)
	lats := make([][]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	var cpu0, cpu1 cpuSnap
	if meter != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if pace(ctx, warmEnd) != nil {
				return
			}
			cpu0 = meter()
			if pace(ctx, end) != nil {
				return
			}
			cpu1 = meter()
		}()
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				if err := op(i); err != nil {
					errs[i] = fmt.Errorf("worker %d: %w", i, err)
					break
				}
				t1 := time.Now()
				if !t0.Before(warmEnd) && !t1.After(end) {
					l = append(l, t1.Sub(t0))
				}
			}
			lats[i] = l
		}()
	}
	wg.Wait()
	s := sample{dur: dur, cpu: cpu1.sub(cpu0)}
	for _, l := range lats {
		s.calls += len(l)
		s.lats = append(s.lats, l...)
	}
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	return s, ctx.Err()
}

// percentile returns the p-th percentile (0..100) of d, sorted in place.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*p/100+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// forEach runs f for 0..n-1 with at most par at once, and returns the errors.
func forEach(n, par int, f func(i int) error) error {
	sem := make(chan struct{}, par)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// httpThroughput opens n sessions on url and measures echo calls on them
// (the minimal server's echo, named tool there; empty: "echo"), each on
// its own keep-alive connection. during, if not nil, runs alongside
// the measurement window (the profiler).
func httpThroughput(ctx context.Context, url, tool string, n int, warm, dur time.Duration, meter func() cpuSnap, during func(warm, dur time.Duration), stateless bool) (sample, error) {
	tr := newTransport(n)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	if stateless {
		// Revision 2026-07-28: no session to open, nothing to close.
		clients := make([]*mcpClient, n)
		for i := range clients {
			clients[i] = &mcpClient{hc: hc, url: url, stateless: true, tool: tool}
		}
		if during != nil {
			go during(warm, dur)
		}
		return measure(ctx, n, warm, dur, meter, func(i int) error { return clients[i].echo(ctx) })
	}
	clients, closeAll, err := openSessions(ctx, hc, url, n)
	defer closeAll()
	if err != nil {
		return sample{}, err
	}
	for _, c := range clients {
		c.tool = tool
	}
	if during != nil {
		go during(warm, dur)
	}
	return measure(ctx, n, warm, dur, meter, func(i int) error { return clients[i].echo(ctx) })
}

// stdioThroughput measures echo calls made straight over the stdio of n
// minimal servers: the stdio floor.
func stdioThroughput(ctx context.Context, minimal string, n int, warm, dur time.Duration) (sample, error) {
	children := make([]*stdioChild, n)
	defer func() {
		for _, c := range children {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range children {
		c, err := startChild(minimal)
		if err != nil {
			return sample{}, err
		}
		children[i] = c
		if err := c.initialize(); err != nil {
			return sample{}, err
		}
	}
	pids := make([]int, n)
	for i, c := range children {
		pids[i] = c.cmd.Process.Pid
	}
	return measure(ctx, n, warm, dur, meterFor(0, pids), func(i int) error { return children[i].echo() })
}

// pace waits until the next tick of a fixed schedule, so that every target
// sees sessions arrive at the same rate.
func pace(ctx context.Context, next time.Time) error {
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pacedStarts times n session starts, one per interval (see pace).
func pacedStarts(ctx context.Context, n int, interval time.Duration, start func() (time.Duration, error)) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	next := time.Now()
	for range n {
		if err := pace(ctx, next); err != nil {
			return out, err
		}
		next = next.Add(interval)
		el, err := start()
		if err != nil {
			return out, err
		}
		out = append(out, el)
	}
	return out, nil
}

// directStarts times n starts of the minimal server driven over stdio:
// spawn, initialize, answer read. It is the child's own start time.
func directStarts(ctx context.Context, minimal string, n int, interval time.Duration) ([]time.Duration, error) {
	return pacedStarts(ctx, n, interval, func() (time.Duration, error) {
		t0 := time.Now()
		c, err := startChild(minimal)
		if err != nil {
			return 0, err
		}
		_, err = c.roundTrip(append(initializeMsg(1), '\n'))
		el := time.Since(t0)
		if cerr := c.close(); err == nil {
			err = cerr
		}
		return el, err
	})
}

// bridgeStarts times n session starts through the bridge: the initialize
// POST until its answer has been read. Each session is deleted (untimed)
// before the next starts.
func bridgeStarts(ctx context.Context, url string, n int, interval time.Duration) ([]time.Duration, error) {
	tr := newTransport(1)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	return pacedStarts(ctx, n, interval, func() (time.Duration, error) {
		c := newMCPClient(hc, url)
		t0 := time.Now()
		err := c.open(ctx)
		el := time.Since(t0)
		if err != nil {
			return 0, err
		}
		c.close(ctx)
		return el, nil
	})
}

// waitChildren waits until the bridge has at least n children (its warm
// pool filled), polling /proc: the pool gives no other outside signal.
func waitChildren(ctx context.Context, b *bridgeProc, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for b.children() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("the bridge has %d children after %s, want %d (is --warm supported?)", b.children(), limit, n)
		}
		if err := pace(ctx, time.Now().Add(10*time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}

// idleResult is the memory of n sessions held open.
type idleResult struct {
	n                   int
	base, idle, streams int64 // bridge RSS: before, with n idle sessions, with a GET stream each
	children            int
	// With -profile: the bridge's runtime.MemStats before and with the
	// idle sessions.
	statsBase, statsIdle map[string]int64
}

// idleMemory opens n sessions, reads the bridge's RSS, then opens a
// standalone GET stream on each and reads it again.
func idleMemory(ctx context.Context, b *bridgeProc, n int, settle time.Duration, prof *profiler) (idleResult, error) {
	res := idleResult{n: n}
	tr := newTransport(8)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	// Warm the bridge up (its HTTP server, pools, first session), so that
	// the base is a bridge that has served, not a fresh process.
	if err := forEach(16, 8, func(int) error {
		c := newMCPClient(hc, b.url)
		if err := c.initialize(ctx); err != nil {
			return err
		}
		if err := c.echo(ctx); err != nil {
			return err
		}
		c.close(ctx)
		return nil
	}); err != nil {
		return res, err
	}
	if err := pace(ctx, time.Now().Add(settle)); err != nil {
		return res, err
	}
	var err error
	if res.base, _, err = b.memory(); err != nil {
		return res, err
	}
	res.statsBase = prof.memStats(ctx, b)
	clients, closeAll, err := openSessions(ctx, hc, b.url, n)
	defer closeAll()
	if err != nil {
		return res, err
	}
	if err := pace(ctx, time.Now().Add(settle)); err != nil {
		return res, err
	}
	res.children = b.children()
	if res.idle, _, err = b.memory(); err != nil {
		return res, err
	}
	res.statsIdle = prof.memStats(ctx, b)
	prof.fetch(ctx, b.pprof, "/debug/pprof/heap", "heap-idle")

	// A GET stream on each session, each on its own connection.
	str := newTransport(n)
	defer str.CloseIdleConnections()
	shc := &http.Client{Transport: str}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bodies := make([]io.ReadCloser, n)
	defer func() {
		cancel()
		for _, body := range bodies {
			if body != nil {
				body.Close()
			}
		}
	}()
	if err := forEach(n, 8, func(i int) error {
		req, err := http.NewRequestWithContext(sctx, http.MethodGet, b.url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", clients[i].sid)
		req.Header.Set("Mcp-Protocol-Version", clients[i].proto)
		resp, err := shc.Do(req)
		if err != nil {
			return err
		}
		bodies[i] = resp.Body
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET stream: HTTP %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("opening %d GET streams: %w", n, err)
	}
	if err := pace(ctx, time.Now().Add(settle)); err != nil {
		return res, err
	}
	if res.streams, _, err = b.memory(); err != nil {
		return res, err
	}
	return res, nil
}

// bigResult is a large tool result passing through the bridge.
type bigRes struct {
	size          int
	first         time.Duration // the first call, end to end
	best          time.Duration // the fastest of all calls
	base          int64         // RSS before
	hwmFirst      int64         // peak RSS after the first call
	hwmAll        int64         // peak RSS after all calls
	file          int64         // RssFile after the first call: the executable's pages
	calls         int
	answeredBytes int
}

// oneSession opens an initialized session on its own connection; end
// deletes it and closes the connection.
func oneSession(ctx context.Context, url string) (c *mcpClient, end func(), err error) {
	tr := newTransport(1)
	c = newMCPClient(&http.Client{Transport: tr}, url)
	if err := c.initialize(ctx); err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	return c, func() {
		c.close(ctx)
		tr.CloseIdleConnections()
	}, nil
}

func bigResult(ctx context.Context, b *bridgeProc, size, calls int) (bigRes, error) {
	res := bigRes{size: size, calls: calls}
	c, end, err := oneSession(ctx, b.url)
	if err != nil {
		return res, err
	}
	defer end()
	if err := c.echo(ctx); err != nil {
		return res, err
	}
	if res.base, _, err = b.memory(); err != nil {
		return res, err
	}
	args := `{"bytes":` + strconv.Itoa(size) + `}`
	for i := range calls {
		t0 := time.Now()
		a, err := c.call(ctx, "big", args)
		el := time.Since(t0)
		if err != nil {
			return res, err
		}
		res.answeredBytes = len(a)
		if len(a) < size {
			return res, fmt.Errorf("the big answer has %d bytes, want more than %d", len(a), size)
		}
		if i == 0 {
			res.first, res.best = el, el
			if _, res.hwmFirst, err = b.memory(); err != nil {
				return res, err
			}
			res.file = b.rssFile()
		}
		res.best = min(res.best, el)
	}
	if _, res.hwmAll, err = b.memory(); err != nil {
		return res, err
	}
	return res, nil
}

// replayRes is a stream of many events, read live and then replayed.
type replayRes struct {
	events         int
	live, replay   time.Duration
	replayedEvents int
	logBytes       int
}

// sseEvents counts the non-empty data lines of an SSE body and returns the
// first event ID.
func sseEvents(body []byte) (n int, firstID string) {
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if id, ok := bytes.CutPrefix(line, []byte("id: ")); ok && firstID == "" {
			firstID = string(id)
		}
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && len(bytes.TrimSpace(d)) > 0 {
			n++
		}
	}
	return n, firstID
}

func replay(ctx context.Context, b *bridgeProc, n int) (replayRes, error) {
	res := replayRes{events: n}
	c, end, err := oneSession(ctx, b.url)
	if err != nil {
		return res, err
	}
	defer end()
	msg := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"flood","arguments":{"n":` +
		strconv.Itoa(n) + `},"_meta":{"progressToken":"bench"}}}`
	t0 := time.Now()
	resp, err := c.post(ctx, []byte(msg))
	res.live = time.Since(t0)
	if err != nil {
		return res, err
	}
	got, prime := sseEvents(c.body.Bytes())
	res.logBytes = c.body.Len()
	if resp.StatusCode != http.StatusOK || got != n+1 {
		return res, fmt.Errorf("flood: HTTP %d, %d events, want %d: %s", resp.StatusCode, got, n+1, truncate(c.body.Bytes(), 300))
	}
	if prime == "" {
		return res, errors.New("flood: the stream has no event ID to resume from")
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return res, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.sid)
	req.Header.Set("Mcp-Protocol-Version", c.proto)
	req.Header.Set("Last-Event-ID", prime)
	t0 = time.Now()
	gresp, err := c.hc.Do(req)
	if err != nil {
		return res, err
	}
	c.body.Reset()
	_, err = c.body.ReadFrom(gresp.Body)
	gresp.Body.Close()
	res.replay = time.Since(t0)
	if err != nil {
		return res, err
	}
	res.replayedEvents, _ = sseEvents(c.body.Bytes())
	if gresp.StatusCode != http.StatusOK || res.replayedEvents != n+1 {
		return res, fmt.Errorf("replay from %s: HTTP %d, %d events, want %d: %s", prime, gresp.StatusCode,
			res.replayedEvents, n+1, truncate(c.body.Bytes(), 300))
	}
	return res, nil
}

// profiler fetches pprof profiles from a bridge built with -profile.
type profiler struct {
	dir string
}

func (p *profiler) fetch(ctx context.Context, addr, path, name string) {
	if p == nil || addr == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		logf("profile %s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		logf("profile %s: HTTP %d %v", name, resp.StatusCode, err)
		return
	}
	f := filepath.Join(p.dir, name+".pprof")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		logf("profile %s: %v", name, err)
		return
	}
	logf("wrote %s", f)
}

// cpu returns a during-hook that records a CPU profile of the window.
func (p *profiler) cpu(ctx context.Context, b *bridgeProc, name string) func(warm, dur time.Duration) {
	if p == nil || b.pprof == "" {
		return nil
	}
	return func(warm, dur time.Duration) {
		if pace(ctx, time.Now().Add(warm)) != nil {
			return
		}
		secs := max(1, int(dur/time.Second))
		p.fetch(ctx, b.pprof, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), name)
	}
}

// memStats reads the bridge's runtime.MemStats (HeapAlloc, StackInuse, ...)
// from the text form of its heap profile; nil without -profile.
func (p *profiler) memStats(ctx context.Context, b *bridgeProc) map[string]int64 {
	if p == nil || b.pprof == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.pprof+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]int64{}
	for _, line := range bytes.Split(body, []byte("\n")) {
		k, v, ok := bytes.Cut(bytes.TrimPrefix(line, []byte("# ")), []byte(" = "))
		if !ok {
			continue
		}
		// "Stack = inuse / sys"
		v, _, _ = bytes.Cut(v, []byte(" / "))
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			out[string(k)] = n
		}
	}
	return out
}

func (p *profiler) heap(ctx context.Context, b *bridgeProc) func(string) {
	if p == nil || b.pprof == "" {
		return nil
	}
	return func(name string) { p.fetch(ctx, b.pprof, "/debug/pprof/heap", name) }
}

// openSessions initializes n sessions, 8 at a time. closeAll deletes those
// that were opened; call it even when err is not nil.
func openSessions(ctx context.Context, hc *http.Client, url string, n int) (clients []*mcpClient, closeAll func(), err error) {
	clients = make([]*mcpClient, n)
	closeAll = func() {
		_ = forEach(n, 8, func(i int) error {
			if clients[i] != nil {
				clients[i].close(context.WithoutCancel(ctx))
			}
			return nil
		})
	}
	err = forEach(n, 8, func(i int) error {
		c := newMCPClient(hc, url)
		if err := c.initialize(ctx); err != nil {
			return err
		}
		clients[i] = c
		return nil
	})
	if err != nil {
		err = fmt.Errorf("opening %d sessions: %w", n, err)
	}
	return clients, closeAll, err
}

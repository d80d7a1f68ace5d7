package pool

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// runSequentialChild is a legacy stdio server that handles one request at
// a time, as many Python and Node servers do: while a call runs, it reads
// nothing else. Its tools: echo (answers its text) and block (see block).
func runSequentialChild() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Text string `json:"text"`
					Addr string `json:"addr"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil || m.ID == nil || m.Method == "" {
			continue // notifications and answers
		}
		var result any
		switch m.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]string{"name": "pool-test-sequential", "version": "1"}}
		case "ping":
			result = map[string]any{}
		case "tools/call":
			text := m.Params.Arguments.Text
			if m.Params.Name == "block" {
				text = block(m.Params.Arguments.Addr)
			}
			result = map[string]any{"content": []any{map[string]string{"type": "text", "text": text}}}
		}
		var out []byte
		if result == nil {
			out, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "Method not found"}})
		} else {
			out, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
		}
		if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
			return
		}
	}
}

// block is a slow call that the test ends: it connects to the test's
// listener at addr (the test's Accept says the call is running) and reads
// until the test closes the connection.
func block(addr string) string {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	_, _ = io.Copy(io.Discard, conn)
	return "unblocked"
}

// blocker is the test's side of block calls.
type blocker struct {
	t  *testing.T
	ln *net.TCPListener
}

func newBlocker(t *testing.T) *blocker {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &blocker{t: t, ln: ln}
}

// args are a block call's arguments.
func (b *blocker) args() string { return `{"addr":"` + b.ln.Addr().String() + `"}` }

// running waits until a block call is running on a child, and returns
// what ends it.
func (b *blocker) running() net.Conn {
	b.t.Helper()
	_ = b.ln.SetDeadline(time.Now().Add(time.Minute)) // a bound for a failing test only
	conn, err := b.ln.Accept()
	if err != nil {
		b.t.Fatalf("no block call reached a child: %v", err)
	}
	return conn
}

// testClock is the pool's clock in these tests: it moves only when told.
type testClock struct {
	base time.Time
	off  atomic.Int64
}

func (c *testClock) now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *testClock) advance(d time.Duration) { c.off.Add(int64(d)) }

func useClock(p *Pool, now func() time.Time) {
	p.mu.Lock()
	p.now = now
	p.mu.Unlock()
}

// toolCall is a tools/call whose client declared no capability the child
// could ask for: it shares children with other requests.
func toolCall(t *testing.T, id int, tool, args string) *Request {
	t.Helper()
	r := request(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args))
	r.Caps = json.RawMessage(`{}`)
	return r
}

func noEmit([]byte) error { return nil }

// answered checks that ans is a tool result with text.
func answered(ans []byte, err error, text string) error {
	if err != nil {
		return err
	}
	if !strings.Contains(string(ans), `"text":"`+text+`"`) {
		return fmt.Errorf("answer %s, want the text %q", ans, text)
	}
	return nil
}

func awaitStats(t *testing.T, ctx context.Context, p *Pool, what string, cond func(Stats) bool) Stats {
	t.Helper()
	if err := p.Await(ctx, cond); err != nil {
		t.Fatalf("%s: %v (%+v)", what, err, p.Stats())
	}
	return p.Stats()
}

// Children that are busy but not stalled make a group grow to one per
// core (Options.Cores), and no further, however many requests are in
// flight: ten slow calls and 50 clients of a quick tool run on two
// children. The clock stands still, so no child is ever quiet for
// StallAfter.
func TestGrowthStopsAtCoresWhileBusy(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Cores: 2, Max: 8})
	frozen := time.Now()
	useClock(p, func() time.Time { return frozen })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBlocker(t)

	const slow = 10
	reqs := make([]*Request, slow)
	for i := range reqs {
		reqs[i] = toolCall(t, i+1, "block", b.args())
	}
	errs := make(chan error, slow)
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() {
			ans, err := p.Serve(ctx, r, noEmit)
			errs <- answered(ans, err, "unblocked")
		})
	}
	conns := make([]net.Conn, 0, slow)
	for range slow {
		conns = append(conns, b.running())
	}
	if s := awaitStats(t, ctx, p, "children starting", func(s Stats) bool { return s.Starting == 0 }); s.Children != 2 || s.InFlight != slow {
		t.Fatalf("%+v with %d slow calls in flight, want 2 children (Cores 2)", s, slow)
	}

	const clients, calls = 50, 20
	quick := make([][]*Request, clients)
	for i := range quick {
		for j := range calls {
			quick[i] = append(quick[i], toolCall(t, 1000+i*calls+j, "echo", fmt.Sprintf(`{"text":"q%d"}`, i*calls+j)))
		}
	}
	qerrs := make(chan error, clients*calls)
	var qwg sync.WaitGroup
	for i := range quick {
		qwg.Go(func() {
			for j, r := range quick[i] {
				ans, err := p.Serve(ctx, r, noEmit)
				qerrs <- answered(ans, err, fmt.Sprintf("q%d", i*calls+j))
			}
		})
	}
	qwg.Wait()
	close(qerrs)
	for err := range qerrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := awaitStats(t, ctx, p, "children starting", func(s Stats) bool { return s.Starting == 0 }); s.Children != 2 {
		t.Fatalf("%+v after %d quick calls beside the slow ones, want 2 children", s, clients*calls)
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A server that handles one request at a time and is in a slow call is
// stalled once it has answered nothing for StallAfter: the next request
// gets a child of its own and is answered while the slow call runs.
// Before that, with one core, a request queues on the busy child.
func TestGrowthWhenStalled(t *testing.T) {
	sent := make(chan struct{}, 8) // a tools/call was written to a child
	p := testPoolOf(t, "sequential", Options{Era: EraLegacy, Cores: 1, Max: 4, Peer: peer.Options{
		Intercept: func(next peer.Handler) peer.Handler {
			return func(m *peer.Message) error {
				err := next(m)
				if m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindRequest && m.Method == "tools/call" {
					sent <- struct{}{}
				}
				return err
			}
		},
	}})
	clock := &testClock{base: time.Now()}
	useClock(p, clock.now)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBlocker(t)

	slowReq, queuedReq, quickReq := toolCall(t, 1, "block", b.args()), toolCall(t, 2, "echo", `{"text":"queued"}`), toolCall(t, 3, "echo", `{"text":"quick"}`)
	slow, queued := make(chan error, 1), make(chan error, 1)
	go func() {
		ans, err := p.Serve(ctx, slowReq, noEmit)
		slow <- answered(ans, err, "unblocked")
	}()
	conn := b.running()
	<-sent
	go func() {
		ans, err := p.Serve(ctx, queuedReq, noEmit)
		queued <- answered(ans, err, "queued")
	}()
	select {
	case <-sent:
	case <-ctx.Done():
		t.Fatalf("the second request was not sent: %+v", p.Stats())
	}
	if s := p.Stats(); s.Children != 1 || s.Starting != 0 || s.InFlight != 2 {
		t.Fatalf("%+v: a busy child that is not stalled took a child beyond Cores 1", s)
	}

	clock.advance(StallAfter)
	ans, err := p.Serve(ctx, quickReq, noEmit)
	if err := answered(ans, err, "quick"); err != nil {
		t.Fatalf("the quick call beside a stalled child: %v", err)
	}
	if s := p.Stats(); s.Children != 2 || s.InFlight != 2 {
		t.Fatalf("%+v after the quick call, want 2 children and the slow and the queued call in flight", s)
	}
	select {
	case err := <-queued:
		t.Fatalf("the call queued behind the slow one was answered first: %v", err)
	default:
	}
	conn.Close()
	for _, ch := range []chan error{slow, queued} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

// A server that answers quick calls while a slow one runs is not stalled:
// each answer restarts its quiet time, and the pool grows only once it
// has answered nothing for StallAfter.
func TestGrowthNotWhileAnswering(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Cores: 1, Max: 4})
	clock := &testClock{base: time.Now()}
	useClock(p, clock.now)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBlocker(t)

	slowReq := toolCall(t, 1, "block", b.args())
	slow := make(chan error, 1)
	go func() {
		ans, err := p.Serve(ctx, slowReq, noEmit)
		slow <- answered(ans, err, "unblocked")
	}()
	conn := b.running()
	for i, step := range []struct {
		advance  time.Duration
		children int
	}{
		{StallAfter / 2, 1}, // busy for half of StallAfter
		{StallAfter / 2, 1}, // busy for StallAfter, but answered half of it ago
		{StallAfter, 2},     // answered nothing for StallAfter: stalled
	} {
		clock.advance(step.advance)
		text := fmt.Sprintf("quick %d", i)
		ans, err := p.Serve(ctx, toolCall(t, 10+i, "echo", `{"text":"`+text+`"}`), noEmit)
		if err := answered(ans, err, text); err != nil {
			t.Fatal(err)
		}
		if s := awaitStats(t, ctx, p, "children starting", func(s Stats) bool { return s.Starting == 0 }); s.Children != step.children {
			t.Fatalf("step %d: %+v, want %d children", i, s, step.children)
		}
	}
	conn.Close()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

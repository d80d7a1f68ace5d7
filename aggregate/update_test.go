package aggregate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// testMember is a member running internal/testserver, whose launcher
// counts its children and tells of those it starts for sessions, and
// whose Close is counted.
type testMember struct {
	*counting
	started chan struct{} // a token per child started for a session
	closed  atomic.Int32
	once    sync.Once
	release chan struct{} // closed by the first Close
}

func (m *testMember) Launch(ctx context.Context, name string) (sandbox.Process, error) {
	p, err := m.counting.Launch(ctx, name)
	if !strings.HasPrefix(name, "aggregate-catalog-") {
		m.started <- struct{}{}
	}
	return p, err
}

func newTestMember(t *testing.T) *testMember {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &testMember{counting: &counting{l: sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"),
		StopGrace: 2 * time.Second, Logger: logger(t)})}, started: make(chan struct{}, 64), release: make(chan struct{})}
}

func (m *testMember) member(name, key string) aggregate.Member {
	return aggregate.Member{Name: name, Key: key, Launcher: m, Close: func() error {
		m.closed.Add(1)
		m.once.Do(func() { close(m.release) })
		return nil
	}}
}

// exited waits until every child m started has exited.
func (m *testMember) exited(t *testing.T, ctx context.Context) {
	t.Helper()
	m.mu.Lock()
	procs := slices.Clone(m.procs)
	m.mu.Unlock()
	for _, p := range procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("child %s still runs: %v", p.ID(), ctx.Err())
		}
	}
}

// An update in place under an open 2025 session that calls member a
// without pause: b removed, c added, d changed. No call of a fails and
// a's child of the session is the one it had; b's call in flight gets an
// error naming b, as a call of b's names does after; the session hears
// list_changed and lists c's tools, not b's; d's next call starts a child
// of its new configuration; b's and d's old children exit and their
// members are released (Close), once.
func TestUpdateInPlace(t *testing.T) {
	a, b, c, d1, d2 := newTestMember(t), newTestMember(t), newTestMember(t), newTestMember(t), newTestMember(t)
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members = []aggregate.Member{a.member("a", "1"), b.member("b", "1"), d1.member("d", "1")}
	})
	ctx := ctxT(t)
	changed := make(chan struct{}, 16)
	cs := f.connect(t, "2025-11-25", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if got := callText(t, cs, "d__echo", map[string]any{"text": "d before"}); got != "d before" {
		t.Fatalf("d__echo: %q", got)
	}
	// A call of b in flight when b leaves.
	blocked := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "b__block"})
		if err == nil && res.IsError {
			err = errors.New(res.Content[0].(*mcp.TextContent).Text)
		}
		blocked <- err
	}()
	// Calls of a without pause.
	var ok, bad atomic.Int64
	var failures sync.Map
	tick := make(chan struct{}, 1)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; loadCtx.Err() == nil; i++ {
			text := fmt.Sprintf("a call %d", i)
			res, err := cs.CallTool(loadCtx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": text}})
			if loadCtx.Err() != nil {
				return
			}
			if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != text {
				bad.Add(1)
				failures.Store(i, fmt.Sprint(err, res))
				continue
			}
			ok.Add(1)
			select {
			case tick <- struct{}{}:
			default:
			}
		}
	})
	defer wg.Wait()
	defer stopLoad()
	waitCalls := func(n int64) {
		t.Helper()
		target := ok.Load() + n
		for ok.Load() < target {
			select {
			case <-tick:
			case <-ctx.Done():
				t.Fatalf("%d calls of a__echo answered, want %d", ok.Load(), target)
			}
		}
	}
	waitCalls(5)
	// b's call is in flight once it started b's child of the session
	// (the virtual child took the request before it started the child).
	select {
	case <-b.started:
	case <-ctx.Done():
		t.Fatal("b__block started no child of b")
	}

	if err := f.agg.Update([]aggregate.Member{a.member("a", "1"), c.member("c", "1"), d2.member("d", "2")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-blocked:
		if err == nil || !strings.Contains(err.Error(), `aggregate member "b" was removed`) {
			t.Errorf("b__block in flight at b's removal: %v, want an error naming b", err)
		}
	case <-ctx.Done():
		t.Fatal("b__block in flight at b's removal was not answered")
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after the update")
	}
	names := listed(t, cs)
	if !slices.Contains(names, "c__echo") || slices.Contains(names, "b__echo") || !slices.Contains(names, "d__echo") {
		t.Errorf("tools/list after the update: %v, want c's and d's, not b's", names)
	}
	if msg := callErr(t, cs, "b__echo", map[string]any{"text": "x"}); !strings.Contains(msg, `"b__echo"`) {
		t.Errorf("b__echo after b's removal: %s, want an error naming it", msg)
	}
	d1Runs := len(d1.sessions())
	if got := callText(t, cs, "d__echo", map[string]any{"text": "d after"}); got != "d after" {
		t.Fatalf("d__echo after d changed: %q", got)
	}
	if n, m := len(d1.sessions())-d1Runs, len(d2.sessions()); n != 0 || m != 1 {
		t.Errorf("d's call after its change started %d children of its old configuration and %d of its new one, want 0 and 1", n, m)
	}
	if got := callText(t, cs, "c__echo", map[string]any{"text": "c"}); got != "c" {
		t.Errorf("c__echo: %q", got)
	}
	waitCalls(10)
	stopLoad()
	wg.Wait()
	t.Logf("a__echo: %d calls answered, %d failed across the update", ok.Load(), bad.Load())
	if n := bad.Load(); n != 0 {
		failures.Range(func(k, v any) bool { t.Errorf("a__echo call %v failed: %v", k, v); return true })
	}
	if got := a.sessions(); len(got) != 1 {
		t.Errorf("a started children for %v, want the session's one child, kept", got)
	}
	// b's and d's old children (catalog and session) exit; then they are
	// released, once; a and c are not.
	b.exited(t, ctx)
	d1.exited(t, ctx)
	for _, m := range []struct {
		name string
		tm   *testMember
	}{{"b", b}, {"d (old)", d1}} {
		select {
		case <-m.tm.release:
		case <-ctx.Done():
			t.Fatalf("member %s was not released after its removal", m.name)
		}
		if n := m.tm.closed.Load(); n != 1 {
			t.Errorf("member %s was released %d times, want once", m.name, n)
		}
	}
	if n := a.closed.Load() + c.closed.Load() + d2.closed.Load(); n != 0 {
		t.Errorf("%d members still in the aggregate were released", n)
	}
}

// gated is a launcher whose launches wait, whatever their context, until
// open is closed (or the test ends).
type gated struct {
	l    sandbox.Launcher
	open chan struct{}
	t    *testing.T
}

func (g *gated) Launch(ctx context.Context, name string) (sandbox.Process, error) {
	select {
	case <-g.open:
	case <-g.t.Context().Done():
		return nil, errors.New("the test ended")
	}
	return g.l.Launch(ctx, name)
}

// A list that waits for a member an update added (its catalog not in
// yet) does not hold up the other requests of the virtual child: a call
// of a written after it is answered meanwhile, and the list, once c's
// catalog is in, lists c. The virtual child is driven line by line, so
// that the list is read first.
func TestUpdateListWaitsAside(t *testing.T) {
	a, c := newTestMember(t), newTestMember(t)
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members = []aggregate.Member{a.member("a", "1")}
	})
	ctx := ctxT(t)
	proc, err := f.agg.Launcher().Launch(ctx, "lines")
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Stop(context.Background())
	lines := make(chan map[string]any, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(proc.Stdout())
		for sc.Scan() {
			var msg map[string]any
			if json.Unmarshal(sc.Bytes(), &msg) == nil {
				lines <- msg
			}
		}
	}()
	// Written aside, in order: a child that stops reading makes a request
	// go unanswered, not the test hang. Ends when stdin does (Stop).
	in := make(chan string, 8)
	defer close(in)
	go func() {
		for line := range in {
			if _, err := io.WriteString(proc.Stdin(), line+"\n"); err != nil {
				return
			}
		}
	}()
	write := func(line string) { in <- line }
	// answer waits for the answer to the request of id, and returns it.
	answer := func(id float64) map[string]any {
		t.Helper()
		for {
			select {
			case msg, ok := <-lines:
				if !ok {
					t.Fatalf("the virtual child ended before answering request %v", id)
				}
				if msg["id"] == id {
					return msg
				}
			case <-ctx.Done():
				t.Fatalf("request %v: no answer: %v", id, ctx.Err())
			}
		}
	}
	write(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	answer(1)
	write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	g := &gated{l: c, open: make(chan struct{}), t: t}
	if err := f.agg.Update([]aggregate.Member{a.member("a", "1"), {Name: "c", Key: "1", Launcher: g}}); err != nil {
		t.Fatal(err)
	}
	write(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	write(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"while c loads"}}}`)
	if got := fmt.Sprint(answer(3)["result"]); !strings.Contains(got, "while c loads") {
		t.Fatalf("a__echo while c loads: %s", got)
	}
	close(g.open)
	if got := fmt.Sprint(answer(2)["result"]); !strings.Contains(got, "c__echo") || !strings.Contains(got, "a__echo") {
		t.Errorf("tools/list once c's catalog is in: %s, want a's and c's tools", got)
	}
}

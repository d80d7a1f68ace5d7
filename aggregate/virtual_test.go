package aggregate_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// memLauncher starts memchild servers that answer every request with an
// empty result, and keeps them.
type memLauncher struct {
	mu       sync.Mutex
	children []*memchild.Child
}

func (l *memLauncher) Launch(_ context.Context, id string) (sandbox.Process, error) {
	c := memchild.New(&memchild.Options{ID: id})
	c.Serve()
	l.mu.Lock()
	l.children = append(l.children, c)
	l.mu.Unlock()
	return c, nil
}

func (l *memLauncher) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.children)
}

func (l *memLauncher) child(i int) *memchild.Child {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.children[i]
}

// client drives a virtual child line by line.
type client struct {
	p   sandbox.Process
	out *bufio.Reader
}

func start(t *testing.T, a *aggregate.Aggregate, session string) *client {
	t.Helper()
	p, err := a.Launcher().Launch(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{p: p, out: bufio.NewReader(p.Stdout())}
	if got := c.ask(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); !strings.Contains(got, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize: %s", got)
	}
	c.say(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *client) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.p.Stdin(), line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *client) ask(t *testing.T, line string) string {
	t.Helper()
	c.say(t, line)
	got, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (c *client) stop(t *testing.T) {
	t.Helper()
	if err := c.p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A member child that has had nothing to do for IdleTimeout is stopped,
// while its session goes on; its next call starts another.
func TestIdleMemberStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &memLauncher{}
		a, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "m", Launcher: l}},
			IdleTimeout: time.Minute, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := start(t, a, "s")
		call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"m__x"}}`
		if got := c.ask(t, call); !strings.Contains(got, `"id":2,"result":{}`) {
			t.Fatalf("call: %s", got)
		}
		if n := a.Children(); n != 1 {
			t.Fatalf("%d member children after a call, want 1", n)
		}
		time.Sleep(time.Minute - time.Second)
		synctest.Wait()
		if n := a.Children(); n != 1 {
			t.Fatalf("%d member children before the idle timeout, want 1", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := a.Children(); n != 0 {
			t.Fatalf("%d member children after the idle timeout, want 0", n)
		}
		select {
		case <-l.child(1).Stopped(): // 0 is the catalog child
		default:
			t.Fatal("the idle member child was not stopped")
		}
		if got := c.ask(t, strings.Replace(call, `"id":2`, `"id":3`, 1)); !strings.Contains(got, `"id":3,"result":{}`) {
			t.Fatalf("a call after the idle stop: %s", got)
		}
		if n := a.Children(); n != 1 {
			t.Fatalf("%d member children after the next call, want 1", n)
		}
		c.stop(t)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// Beyond MaxChildrenTotal (across virtual children) and MaxChildren (per
// virtual child), a request that needs one more member child gets -32603
// naming the bound.
func TestChildBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &memLauncher{}
		a, err := aggregate.New(&aggregate.Options{
			Members:     []aggregate.Member{{Name: "m", Launcher: l}, {Name: "n", Launcher: l}, {Name: "o", Launcher: l}},
			MaxChildren: 2, MaxChildrenTotal: 3, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c1, c2 := start(t, a, "one"), start(t, a, "two")
		for _, m := range []string{"m", "n"} {
			if got := c1.ask(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+m+`__x"}}`); !strings.Contains(got, `"result":{}`) {
				t.Fatalf("call of %s: %s", m, got)
			}
		}
		got := c1.ask(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"o__x"}}`)
		if !strings.Contains(got, `"code":-32603`) || !strings.Contains(got, `this session already runs 2 member servers, the aggregate's bound per session`) {
			t.Errorf("a third member in one session: %s", got)
		}
		if got := c2.ask(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"o__x"}}`); !strings.Contains(got, `"result":{}`) {
			t.Fatalf("call of o in another session: %s", got)
		}
		got = c2.ask(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"m__x"}}`)
		if !strings.Contains(got, `"code":-32603`) || !strings.Contains(got, `the aggregate runs 3 member servers, its bound across sessions`) {
			t.Errorf("a fourth member child across sessions: %s", got)
		}
		c1.stop(t)
		if got := c2.ask(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"m__x"}}`); !strings.Contains(got, `"result":{}`) {
			t.Errorf("once the other session ended: %s", got)
		}
		c2.stop(t)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// flaky starts memchild servers until told to fail.
type flaky struct {
	memLauncher
	fail bool
}

func (l *flaky) Launch(ctx context.Context, id string) (sandbox.Process, error) {
	l.mu.Lock()
	fail := l.fail
	l.mu.Unlock()
	if fail {
		return nil, errors.New("the sandbox is full")
	}
	return l.memLauncher.Launch(ctx, id)
}

// A member whose child cannot start for a session gets its call an error
// naming it; with FailClosed, a member that is down fails every list and
// call, where by default the others are served.
func TestMemberFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up, down := &flaky{}, &flaky{fail: true}
		a, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "up", Launcher: up}, {Name: "down", Launcher: down}},
			Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := start(t, a, "s")
		if got := c.ask(t, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); !strings.Contains(got, `"result":{"tools":[]}`) {
			t.Errorf("tools/list with a member down: %s", got)
		}
		up.mu.Lock()
		up.fail = true
		up.mu.Unlock()
		got := c.ask(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__x"}}`)
		if !strings.Contains(got, `"code":-32603`) || !strings.Contains(got, `aggregate member \"up\" could not start: the sandbox is full`) {
			t.Errorf("a call whose member cannot start: %s", got)
		}
		got = c.ask(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"down__x"}}`)
		if !strings.Contains(got, `aggregate member \"down\" is unavailable: the sandbox is full`) {
			t.Errorf("a call of a member that is down: %s", got)
		}
		c.stop(t)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		closed, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "up", Launcher: &flaky{}}, {Name: "down", Launcher: down}},
			FailClosed: true, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c = start(t, closed, "s")
		for _, req := range []string{
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__x"}}`,
		} {
			if got := c.ask(t, req); !strings.Contains(got, `aggregate member \"down\" is unavailable`) || !strings.Contains(got, "fails closed") {
				t.Errorf("%s with FailClosed and a member down: %s", req, got)
			}
		}
		c.stop(t)
		if err := closed.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// scripted serves its first child (the catalog's) and hands the others to
// the test.
type scripted struct {
	n        int
	children chan *memchild.Child
}

func (l *scripted) Launch(_ context.Context, id string) (sandbox.Process, error) {
	c := memchild.New(&memchild.Options{ID: id})
	l.n++
	if l.n == 1 {
		c.Serve()
	} else {
		l.children <- c
	}
	return c, nil
}

// answer reads one request of the member child and answers it.
func answer(t *testing.T, c *memchild.Child, method string) string {
	t.Helper()
	line := c.Read(t)
	if !strings.Contains(line, `"method":"`+method+`"`) {
		t.Fatalf("the member child read %s, want %s", line, method)
	}
	id := line[strings.Index(line, `"id":`)+5:]
	id = id[:strings.IndexAny(id, ",}")]
	c.Say(t, `{"jsonrpc":"2.0","id":`+id+`,"result":{}}`)
	return id
}

// A client request whose id collides, on the member child, with one of
// the aggregate's own requests there (peer renames it: the aggregate's
// own ids count from where a pool's renamed ids do) gets its answer under
// its own id and is counted answered: its member child goes idle.
func TestRenamedRequestAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &scripted{children: make(chan *memchild.Child, 1)}
		a, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "m", Launcher: l}},
			IdleTimeout: time.Minute, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := start(t, a, "s")
		c.say(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"m__x"}}`)
		child := <-l.children
		answer(t, child, "initialize")
		if line := child.Read(t); !strings.Contains(line, "notifications/initialized") {
			t.Fatalf("read %s", line)
		}
		answer(t, child, "tools/call")
		if got, _ := c.out.ReadString('\n'); !strings.Contains(got, `"id":2,"result"`) {
			t.Fatalf("call: %s", got)
		}
		// logging/setLevel reaches the child as the aggregate's own
		// request, under the next fresh id (1<<30 + 1), left unanswered.
		if got := c.ask(t, `{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"info"}}`); !strings.Contains(got, `"id":3,"result":{}`) {
			t.Fatalf("setLevel: %s", got)
		}
		if line := child.Read(t); !strings.Contains(line, "logging/setLevel") || !strings.Contains(line, `"id":1073741825`) {
			t.Fatalf("the child read %s, want the aggregate's logging/setLevel with id 1073741825", line)
		}
		c.say(t, `{"jsonrpc":"2.0","id":1073741825,"method":"tools/call","params":{"name":"m__x"}}`)
		if id := answer(t, child, "tools/call"); id == "1073741825" {
			t.Fatal("the colliding id was not renamed: the test tests nothing")
		}
		if got, _ := c.out.ReadString('\n'); !strings.Contains(got, `"id":1073741825,"result"`) {
			t.Fatalf("the renamed call's answer: %s", got)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := a.Children(); n != 0 {
			t.Errorf("%d member children after the idle timeout, want 0: the renamed call is still counted in flight", n)
		}
		c.stop(t)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A member with a lock of its items lists what the lock pins, and starts
// no catalog child: the first process of it is a session's.
func TestLockIsCatalog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := pin.NewLock()
		if err := lock.Set(pin.Kinds[0], []byte(`{"name":"read","description":"Reads a file","inputSchema":{"type":"object"}}`)); err != nil {
			t.Fatal(err)
		}
		l := &memLauncher{}
		a, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "fs", Launcher: l, Lock: lock}}, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := start(t, a, "s")
		got := c.ask(t, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		if !strings.Contains(got, `"name":"fs__read"`) || !strings.Contains(got, `"description":"Reads a file"`) {
			t.Errorf("tools/list from the lock: %s", got)
		}
		if n := l.count(); n != 0 {
			t.Fatalf("%d children started to list, want none", n)
		}
		if got := c.ask(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs__read"}}`); !strings.Contains(got, `"id":3,"result":{}`) {
			t.Errorf("call: %s", got)
		}
		if n := l.count(); n != 1 {
			t.Errorf("%d children after a call, want 1", n)
		}
		c.stop(t)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/internal/proctest"
)

// caller calls one tool of a session over and over until stopped,
// counting the calls that answered and those that failed.
type caller struct {
	name     string
	ok, bad  atomic.Int64
	mu       sync.Mutex
	failures []string
	// first is closed after the first answer; tick gets a token after
	// each.
	first chan struct{}
	once  sync.Once
	tick  chan struct{}
}

func newCaller(name string) *caller {
	return &caller{name: name, first: make(chan struct{}), tick: make(chan struct{}, 1)}
}

func (c *caller) run(ctx context.Context, cs *mcp.ClientSession, tool string, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			err := echoAs(ctx, cs, tool, fmt.Sprintf("%s call %d", c.name, i))
			if ctx.Err() != nil {
				return // stopped by the test: the last call does not count
			}
			if err != nil {
				c.bad.Add(1)
				c.mu.Lock()
				if len(c.failures) < 5 {
					c.failures = append(c.failures, err.Error())
				}
				c.mu.Unlock()
				continue
			}
			c.ok.Add(1)
			c.once.Do(func() { close(c.first) })
			select {
			case c.tick <- struct{}{}:
			default:
			}
		}
	}()
}

// noFailures logs what c counted and fails the test if a call failed,
// when (the words say when).
func (c *caller) noFailures(t *testing.T, when string) {
	t.Helper()
	t.Logf("%s: %d calls answered, %d failed", c.name, c.ok.Load(), c.bad.Load())
	if n := c.bad.Load(); n != 0 {
		t.Errorf("%s: %d calls failed %s, want 0; first: %q", c.name, n, when, c.failures)
	}
}

// waitCalls waits until c answered n more calls than it had.
func (c *caller) waitCalls(t *testing.T, ctx context.Context, n int64) {
	t.Helper()
	target := c.ok.Load() + n
	for c.ok.Load() < target {
		select {
		case <-c.tick:
		case <-ctx.Done():
			t.Fatalf("%s: %d calls answered, want %d: %v", c.name, c.ok.Load(), target, ctx.Err())
		}
	}
}

// pidsWithArg lists the processes whose command line has arg.
func pidsWithArg(t *testing.T, arg string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			out = append(out, pid)
		}
	}
	return out
}

// A reload that removes member b and adds member c while clients call
// member a's tool through /mcp without pause: clients of revision
// 2026-07-28, 2025 sessions opened before the reload (streamable HTTP,
// and one over the legacy HTTP+SSE transport). The aggregate is updated
// in place: no call of a fails, the sessions go on; b's tools leave the
// lists and c's join them, for every client, new 2025 sessions too; a
// call of b's tool then gets an error naming it; b's children (its
// catalog's, and those of the sessions that called it) exit.
func TestConfigFileAggregateReloadUnderLoad(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	// The hello server ignores its arguments: this one finds b's
	// processes.
	marker := fmt.Sprintf("member-b-%d", os.Getpid())
	before := fmt.Sprintf(`{"mcpServers": {"a": {"command": %q}, "b": {"command": %q, "args": [%q]}}}`, helloBin, helloBin, marker)
	after := fmt.Sprintf(`{"mcpServers": {"a": {"command": %q}, "c": {"command": %q}}}`, helloBin, helloBin)
	b := startConfigBridge(t, bridgeBin, before)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()

	type client struct {
		name string
		cs   *mcp.ClientSession
	}
	var clients []client
	for i := range 4 {
		clients = append(clients, client{fmt.Sprintf("2026-07-28 client %d", i), aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, "2026-07-28")})
	}
	for i := range 2 {
		clients = append(clients, client{fmt.Sprintf("2025 session %d", i), aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, "2025-11-25")})
	}
	clients = append(clients, client{"legacy SSE session", aggConnect(t, &mcp.SSEClientTransport{Endpoint: b.base + "/sse"}, "2025-11-25")})
	if got, want := toolNames(t, ctx, clients[0].cs), []string{"a__count", "a__countdown", "a__echo", "b__count", "b__countdown", "b__echo"}; !slices.Equal(got, want) {
		t.Fatalf("tools/list before the reload: %v, want %v", got, want)
	}
	// Each client has a child of b (the 2025 sessions' own).
	for _, c := range clients {
		if err := echoAs(ctx, c.cs, "b__echo", "before"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	bPIDs := pidsWithArg(t, marker)
	if len(bPIDs) < 4 { // the catalog's, and one per 2025 session at least
		t.Fatalf("b runs %d processes, want its catalog's and the sessions'", len(bPIDs))
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLoad()
	var callers []*caller
	for _, cl := range clients {
		c := newCaller(cl.name)
		c.run(loadCtx, cl.cs, "a__echo", &wg)
		callers = append(callers, c)
	}
	for _, c := range callers {
		select {
		case <-c.first:
		case <-ctx.Done():
			t.Fatalf("%s: no call of a__echo answered", c.name)
		}
	}

	b.rewrite(t, after)
	rec := b.waitLog(t, "configuration reloaded")
	if got := fmt.Sprint(rec["aggregates_in_place"]); got != "[/mcp]" {
		t.Errorf("the reload log line says aggregates_in_place %s, want [/mcp]: %v", got, rec)
	}
	want := []string{"a__count", "a__countdown", "a__echo", "c__count", "c__countdown", "c__echo"}
	s25 := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, "2025-11-25")
	for _, c := range append(clients, client{"2025 session opened after the reload", s25}) {
		if got := toolNames(t, ctx, c.cs); !slices.Equal(got, want) {
			t.Fatalf("%s: tools/list after the reload: %v, want %v", c.name, got, want)
		}
		if err := echoAs(ctx, c.cs, "c__echo", "added"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err := echoAs(ctx, c.cs, "b__echo", "removed")
		if err == nil || !strings.Contains(err.Error(), `"b__echo"`) {
			t.Fatalf("%s: b__echo after b's removal: %v, want an error naming it", c.name, err)
		}
	}
	// The calls go on after the reload, on the new configuration.
	for _, c := range callers {
		c.waitCalls(t, ctx, 10)
	}
	// b's children exit: none is left behind.
	for _, pid := range bPIDs {
		proctest.WaitGone(t, pid, 60*time.Second, "after a reload removed member b", procState)
	}
	for _, c := range callers {
		c.waitCalls(t, ctx, 10)
	}
	stopLoad()
	wg.Wait()
	for _, c := range callers {
		c.noFailures(t, "across the reload")
	}
}

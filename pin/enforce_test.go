package pin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

var quiet = slog.New(slog.DiscardHandler)

// capture pins a fresh child of command.
func capture(t *testing.T, in pin.Inspection, env []string, command ...string) (*pin.Lock, []pin.Problem) {
	t.Helper()
	l := sandbox.NewLocal(&sandbox.LocalOptions{Command: command[0], Args: command[1:], Env: env, StopGrace: 2 * time.Second, Logger: quiet})
	proc, err := l.Launch(context.Background(), "pin")
	if err != nil {
		t.Fatal(err)
	}
	conn := peer.New(proc, discard{}, &peer.Options{Logger: quiet})
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, problems, err := pin.Capture(ctx, conn, in)
	if err != nil {
		t.Fatal(err)
	}
	return lock, problems
}

type discard struct{}

func (discard) Route(*peer.Message) {}
func (discard) Ended(error)         {}

// alerts records what an Enforcer's hooks are told.
type alerts struct {
	mu      sync.Mutex
	got     []pin.Violation
	alerted chan pin.Violation
	ended   chan error
}

func newAlerts() *alerts {
	return &alerts{ended: make(chan error, 1), alerted: make(chan pin.Violation, 100)}
}

func (a *alerts) hooks() *pin.Hooks {
	return &pin.Hooks{
		Alert: func(_ any, v pin.Violation) {
			a.mu.Lock()
			a.got = append(a.got, v)
			a.mu.Unlock()
			a.alerted <- v
		},
		End:    func(err error) { a.ended <- err },
		Logger: quiet,
	}
}

func (a *alerts) names() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, v := range a.got {
		out = append(out, v.Kind+" "+v.Name)
	}
	return out
}

// Pinning the everything-server records its tools, prompts and templates;
// a session held to that lock sees them all, then the tool that
// test_trigger_tool_change adds after start stays hidden and is refused,
// with an alert.
func TestRugPull(t *testing.T) {
	server := childtest.EverythingServer(t)
	lock, problems := capture(t, pin.Inspection{}, nil, server)
	if len(problems) != 0 {
		t.Fatalf("problems in the everything-server: %v", problems)
	}
	for _, want := range []string{"test_simple_text", "test_trigger_tool_change"} {
		if _, ok := lock.Tools[want]; !ok {
			t.Fatalf("the lock misses tool %s: %v", want, lock.Tools)
		}
	}
	if _, ok := lock.Prompts["test_simple_prompt"]; !ok {
		t.Errorf("the lock misses prompt test_simple_prompt: %v", lock.Prompts)
	}
	if _, ok := lock.ResourceTemplates["test://template/{id}/data"]; !ok {
		t.Errorf("the lock misses the template: %v", lock.ResourceTemplates)
	}
	if lock.Server == nil || lock.Server.Name != "mcp-conformance-test-server" {
		t.Errorf("server info %+v", lock.Server)
	}

	a := newAlerts()
	e := pin.New(&pin.Options{Lock: lock, LockFile: "mcp-lock.json"})
	c := childtest.Start(t, e.Interceptor(a.hooks()), server)
	before := childtest.Names(t, c.Call(t, "a", "tools/list", nil), "tools", "name")
	if len(before) != len(lock.Tools) {
		t.Fatalf("tools/list shows %d tools, the lock %d: %v", len(before), len(lock.Tools), before)
	}
	if rpcErr := childtest.Error(t, c.Call(t, "a", "tools/call", map[string]any{"name": "test_trigger_tool_change"})); rpcErr != nil {
		t.Fatal(rpcErr)
	}
	waitFor(t, c, "notifications/tools/list_changed")
	after := childtest.Names(t, c.Call(t, "a", "tools/list", nil), "tools", "name")
	if !slices.Equal(after, before) {
		t.Errorf("after the change tools/list shows %v, want %v", after, before)
	}
	const added = "__transient_tool_for_list_changed"
	if got := a.names(); !slices.Equal(got, []string{"tool " + added}) {
		t.Errorf("alerts %v, want the added tool", got)
	}
	rpcErr := childtest.Error(t, c.Call(t, "a", "tools/call", map[string]any{"name": added}))
	if rpcErr == nil || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, "not in the pin file mcp-lock.json") {
		t.Errorf("calling the added tool: %v", rpcErr)
	}
	select {
	case err := <-a.ended:
		t.Errorf("the session was ended with drop: %v", err)
	default:
	}

	// Without the enforcer, the same server does list the added tool: the
	// test above saw a real change.
	plain := childtest.Start(t, nil, server)
	plain.Call(t, "a", "tools/call", map[string]any{"name": "test_trigger_tool_change"})
	if got := childtest.Names(t, plain.Call(t, "a", "tools/list", nil), "tools", "name"); !slices.Contains(got, added) {
		t.Fatalf("the everything-server did not add %s: %v", added, got)
	}
}

func waitFor(t *testing.T, c *childtest.Child, method string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case m := <-c.Notes():
			if m.Method == method {
				return
			}
		case <-timeout:
			t.Fatalf("no %s in a minute", method)
		}
	}
}

// A tool whose description changed since it was pinned is dropped and
// refused; with EndSession the session is also ended, once.
func TestChangedTool(t *testing.T) {
	server := childtest.EverythingServer(t)
	lock, _ := capture(t, pin.Inspection{}, nil, server)
	lock.Tools["test_simple_text"] = "sha256:" + strings.Repeat("0", 64)
	for _, action := range []pin.Action{pin.Drop, pin.EndSession} {
		t.Run(string(action), func(t *testing.T) {
			a := newAlerts()
			c := childtest.Start(t, pin.New(&pin.Options{Lock: lock, LockFile: "l.json", OnViolation: action}).Interceptor(a.hooks()), server)
			tools := childtest.Names(t, c.Call(t, "a", "tools/list", nil), "tools", "name")
			if slices.Contains(tools, "test_simple_text") || len(tools) != len(lock.Tools)-1 {
				t.Errorf("tools/list: %v", tools)
			}
			rpcErr := childtest.Error(t, c.Call(t, "a", "tools/call", map[string]any{"name": "test_simple_text"}))
			if rpcErr == nil || !strings.Contains(rpcErr.Message, "changed since it was pinned in l.json") {
				t.Errorf("calling the changed tool: %v", rpcErr)
			}
			select {
			case err := <-a.ended:
				if action == pin.Drop || !strings.Contains(err.Error(), `"test_simple_text"`) {
					t.Errorf("ended: %v", err)
				}
			default:
				if action == pin.EndSession {
					t.Error("the session was not ended")
				}
			}
			if len(a.ended) != 0 {
				t.Error("the session was ended twice")
			}
		})
	}
}

// Poisoned descriptions are refused by default, without a lock, and left
// out of a lock; loosened, they pass.
func TestPoisonedDescriptions(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for kind := range poisoned {
		t.Run(kind, func(t *testing.T) {
			env := append(os.Environ(), childEnv+"="+kind)
			_, problems := capture(t, pin.Inspection{}, env, exe)
			if kind == "harmless" {
				if len(problems) != 0 {
					t.Fatalf("problems: %v", problems)
				}
			} else if len(problems) != 1 || problems[0].Name != "add" {
				t.Fatalf("problems: %v", problems)
			} else {
				t.Log(problems[0])
			}

			a := newAlerts()
			c := startChild(t, pin.New(nil).Interceptor(a.hooks()), env, exe)
			tools := childtest.Names(t, c.Call(t, "a", "tools/list", nil), "tools", "name")
			answer := c.Call(t, "a", "tools/call", map[string]any{"name": "add", "arguments": map[string]any{"a": 1, "b": 2}})
			if kind == "harmless" {
				if !slices.Equal(tools, []string{"add", "echo", "mutate"}) || childtest.Error(t, answer) != nil {
					t.Fatalf("harmless: %v, %s", tools, answer)
				}
				return
			}
			if !slices.Equal(tools, []string{"echo", "mutate"}) || childtest.Error(t, answer) == nil {
				t.Errorf("poisoned: tools %v, call %s", tools, answer)
			}

			loose := pin.New(&pin.Options{Inspection: pin.Inspection{AllowHiddenUnicode: true, MaxDescriptionBytes: -1}})
			c2 := startChild(t, loose.Interceptor(a.hooks()), env, exe)
			if tools := childtest.Names(t, c2.Call(t, "a", "tools/list", nil), "tools", "name"); !slices.Equal(tools, []string{"add", "echo", "mutate"}) {
				t.Errorf("loosened: %v", tools)
			}
		})
	}
}

func startChild(t *testing.T, intercept peer.Interceptor, env []string, command ...string) *childtest.Child {
	t.Helper()
	return childtest.StartEnv(t, intercept, env, command...)
}

// A server that changes a pinned tool and says so with
// notifications/tools/list_changed is listed again by the bridge at once:
// the changed tool is refused and alerted even though no client listed
// again. Without Hooks.Call, it stays callable until a client lists.
func TestRelistOnListChanged(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), childEnv+"=harmless")
	lock, _ := capture(t, pin.Inspection{}, env, exe)
	for _, relist := range []bool{true, false} {
		a := newAlerts()
		var conn atomic.Pointer[peer.Conn]
		hooks := a.hooks()
		if relist {
			hooks.Call = func(ctx context.Context, method string, params any) (json.RawMessage, error) {
				return conn.Load().Call(ctx, method, params)
			}
		}
		c := startChild(t, pin.New(&pin.Options{Lock: lock, LockFile: "l.json"}).Interceptor(hooks), env, exe)
		conn.Store(c.Conn)
		if rpcErr := childtest.Error(t, c.Call(t, "a", "tools/call", map[string]any{"name": "mutate"})); rpcErr != nil {
			t.Fatal(rpcErr)
		}
		add := func() *jsonrpc.Error {
			return childtest.Error(t, c.Call(t, "a", "tools/call", map[string]any{"name": "add", "arguments": map[string]any{"a": 1, "b": 2}}))
		}
		if !relist {
			waitFor(t, c, "notifications/tools/list_changed")
			if rpcErr := add(); rpcErr != nil {
				t.Fatalf("without relisting, add is refused before any list: %v", rpcErr)
			}
			continue
		}
		select {
		case v := <-a.alerted:
			if v.Name != "add" || !strings.Contains(v.Problem, "changed since it was pinned") {
				t.Fatalf("alert %+v", v)
			}
		case <-time.After(time.Minute):
			t.Fatal("no alert in a minute")
		}
		if rpcErr := add(); rpcErr == nil || !strings.Contains(rpcErr.Message, "changed since it was pinned in l.json") {
			t.Fatalf("calling the changed tool: %v", rpcErr)
		}
	}
}

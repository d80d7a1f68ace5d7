package pin_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
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
		Alert: func(_ peer.Origin, v pin.Violation) {
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

// With a lock, a read (or a subscription) of a URI is refused unless the
// URI is a pinned resource or one a pinned template produces; a resource
// or template a list dropped makes its URIs unreadable. Without a lock,
// reads are free but for a resource a list dropped.
func TestReadsAgainstTheLock(t *testing.T) {
	server := childtest.EverythingServer(t)
	lock, _ := capture(t, pin.Inspection{}, nil, server)
	for _, uri := range []string{"test://static-text", "test://watched-resource"} {
		if _, ok := lock.Resources[uri]; !ok {
			t.Fatalf("the lock misses resource %s: %v", uri, lock.Resources)
		}
	}
	read := func(c *childtest.Child, method, uri string) *jsonrpc.Error {
		t.Helper()
		return childtest.Error(t, c.Call(t, "a", method, map[string]any{"uri": uri}))
	}
	refused := func(rpcErr *jsonrpc.Error, problem string) bool {
		return rpcErr != nil && rpcErr.Code == -32002 && strings.Contains(rpcErr.Message, problem)
	}

	c := childtest.Start(t, pin.New(&pin.Options{Lock: lock, LockFile: "l.json"}).Interceptor(newAlerts().hooks()), server)
	for _, uri := range []string{"test://static-text", "test://template/42/data"} {
		if rpcErr := read(c, "resources/read", uri); rpcErr != nil {
			t.Errorf("reading %s: %v", uri, rpcErr)
		}
	}
	for _, method := range []string{"resources/read", "resources/subscribe"} {
		for _, uri := range []string{"test://elsewhere", "test://template/4/2/data", "test://template/42/data/more", "test://static-text/"} {
			if rpcErr := read(c, method, uri); !refused(rpcErr, "matches no resource or resource template in the pin file l.json") {
				t.Errorf("%s %s: %v", method, uri, rpcErr)
			}
		}
	}

	// Revision 2026-07-28 retired -32002: a stateless pool's child
	// (Hooks.Revision) answers the same refusals with -32602.
	modern := newAlerts().hooks()
	modern.Revision = pin.ModernRevision
	mc := childtest.Start(t, pin.New(&pin.Options{Lock: lock, LockFile: "l.json"}).Interceptor(modern), server)
	for _, method := range []string{"resources/read", "resources/subscribe"} {
		if rpcErr := read(mc, method, "test://elsewhere"); rpcErr == nil || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, "matches no resource") {
			t.Errorf("revision %s, %s of an unpinned URI: %v, want code -32602", pin.ModernRevision, method, rpcErr)
		}
	}

	// The template and a resource changed since they were pinned: lists
	// drop them, and their URIs are refused from then on.
	changed := *lock
	changed.ResourceTemplates = map[string]string{"test://template/{id}/data": "sha256:" + strings.Repeat("0", 64)}
	changed.Resources = maps.Clone(lock.Resources)
	changed.Resources["test://static-text"] = "sha256:" + strings.Repeat("0", 64)
	c = childtest.Start(t, pin.New(&pin.Options{Lock: &changed, LockFile: "l.json"}).Interceptor(newAlerts().hooks()), server)
	if got := childtest.Names(t, c.Call(t, "a", "resources/list", nil), "resources", "uri"); slices.Contains(got, "test://static-text") || !slices.Contains(got, "test://static-binary") {
		t.Errorf("resources/list: %v", got)
	}
	if got := childtest.Names(t, c.Call(t, "a", "resources/templates/list", nil), "resourceTemplates", "uriTemplate"); len(got) != 0 {
		t.Errorf("resources/templates/list: %v", got)
	}
	if rpcErr := read(c, "resources/read", "test://static-text"); !refused(rpcErr, "changed since it was pinned") {
		t.Errorf("reading the changed resource: %v", rpcErr)
	}
	if rpcErr := read(c, "resources/read", "test://template/42/data"); !refused(rpcErr, `its resource template "test://template/{id}/data" was dropped`) {
		t.Errorf("reading through the changed template: %v", rpcErr)
	}
	if rpcErr := read(c, "resources/read", "test://static-binary"); rpcErr != nil {
		t.Errorf("reading a resource still pinned: %v", rpcErr)
	}

	free := childtest.Start(t, pin.New(nil).Interceptor(newAlerts().hooks()), server)
	if rpcErr := read(free, "resources/read", "test://template/4/2/data"); rpcErr == nil || strings.Contains(rpcErr.Message, "the bridge refused it") {
		t.Errorf("without a lock, the read reached the server: %v", rpcErr)
	}
}

// RFC 6570 matching of reads against pinned templates: a URI is readable
// when the template can expand to it, whole; the server's updates of it
// are forwarded just as far.
func TestReadsMatchTemplates(t *testing.T) {
	lock := pin.NewLock()
	for _, tmpl := range []string{"file:///docs/{name}", "git://{+path}", "api://items{?id,page}", "map://{x,y}/tile{/z}", "not a {template"} {
		lock.ResourceTemplates[tmpl] = "sha256:" + strings.Repeat("0", 64)
	}
	lock.Resources["plain://exact?x=1"] = "sha256:" + strings.Repeat("0", 64)
	forwarded := false
	h := pin.New(&pin.Options{Lock: lock, LockFile: "l.json"}).Interceptor(&pin.Hooks{Logger: quiet})(func(m *peer.Message) error {
		forwarded = m.Dir == peer.FromChild
		return nil
	})
	for uri, ok := range map[string]bool{
		"file:///docs/readme.md":     true,
		"file:///docs/a%2Fb":         true,
		"file:///docs/a/b":           false, // {name} does not expand to a slash
		"file:///docs/":              true,  // an empty value
		"file:///etc/passwd":         false,
		"git://repo/src/main.go":     true, // {+path} keeps reserved characters
		"api://items?id=3&page=2":    true,
		"api://items?id=3":           true,
		"api://items":                true,
		"api://items?other=1":        false,
		"map://1,2/tile/3":           true,
		"map://1,2/tile":             true,
		"plain://exact?x=1":          true,
		"plain://exact?x=2":          false,
		"not a {template":            false, // a template that does not parse matches nothing
		"FILE:///docs/readme.md":     false, // compared as written
		"file:///docs/readme.md#top": false,
	} {
		data := `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":` + strconv.Quote(uri) + `}}`
		env, err := jsonrpc.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		err = h(&peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: peer.ToChild, Origin: childtest.Client{Name: "a"}, Method: "resources/read"})
		if (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", uri, err, ok)
		}

		// The server's updates of it are forwarded as its reads are
		// allowed (a subscription the bridge made is not refused).
		data = `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":` + strconv.Quote(uri) + `}}`
		if env, err = jsonrpc.Parse([]byte(data)); err != nil {
			t.Fatal(err)
		}
		forwarded = false
		if err := h(&peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: peer.FromChild, Method: env.Method}); err != nil || forwarded != ok {
			t.Errorf("an update of %s: forwarded %v (%v), want %v", uri, forwarded, err, ok)
		}
	}
}

// With a lock, what may not be read may not be subscribed to either: a
// subscriptions/listen request reaches the server without the URIs the
// lock does not cover (its acknowledgment then leaves them out), and the
// bridge's own resources/subscribe (the stateless pool's, for a legacy
// server) of such a URI is refused.
func TestSubscriptionsAgainstTheLock(t *testing.T) {
	lock := pin.NewLock()
	lock.ResourceTemplates["file:///docs/{name}"] = "sha256:" + strings.Repeat("0", 64)
	lock.Resources["plain://exact"] = "sha256:" + strings.Repeat("0", 64)
	var passed *peer.Message
	h := pin.New(&pin.Options{Lock: lock, LockFile: "l.json"}).Interceptor(&pin.Hooks{Logger: quiet})(func(m *peer.Message) error {
		passed = m
		return nil
	})
	msg := func(data string, own bool) *peer.Message {
		env, err := jsonrpc.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return &peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: peer.ToChild, Own: own, Origin: childtest.Client{Name: "a"}, Method: env.Method}
	}
	if err := h(msg(`{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true,`+
		`"resourceSubscriptions":["plain://exact","file:///etc/passwd","file:///docs/a.md"]}}}`, false)); err != nil || passed == nil {
		t.Fatalf("listen: %v", err)
	}
	var got struct {
		Params struct {
			Notifications struct {
				ResourcesListChanged  bool
				ResourceSubscriptions []string
			}
		}
	}
	if err := json.Unmarshal(passed.Data, &got); err != nil {
		t.Fatal(err)
	}
	if n := got.Params.Notifications; !n.ResourcesListChanged || !slices.Equal(n.ResourceSubscriptions, []string{"plain://exact", "file:///docs/a.md"}) {
		t.Errorf("the server got %s", passed.Data)
	}
	for uri, ok := range map[string]bool{"plain://exact": true, "file:///docs/b.md": true, "file:///etc/passwd": false} {
		passed = nil
		err := h(msg(`{"jsonrpc":"2.0","id":8,"method":"resources/subscribe","params":{"uri":`+strconv.Quote(uri)+`}}`, true))
		var refusal *pin.Refusal
		if ok && (err != nil || passed == nil) || !ok && (!errors.As(err, &refusal) || passed != nil) {
			t.Errorf("the bridge's own subscription to %s: %v, want allowed %v", uri, err, ok)
		}
	}
}

// A call is refused exactly for an item the lock does not pin under its
// decoded name, or that a list dropped: however the name is written
// (escapes, invalid UTF-8), and whether or not the lock's names are valid
// UTF-8 (a lock made in code may hold any string).
func TestCallsByName(t *testing.T) {
	echo := `{"name":"echo","description":"Echoes.","inputSchema":{"type":"object"}}`
	flood := `{"name":"flood","description":"Floods.","inputSchema":{"type":"object"}}`
	digest := func(item string) string {
		d, err := pin.Digest(pin.Kinds[0], []byte(item))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	msg := func(dir peer.Direction, method, data string) *peer.Message {
		env, err := jsonrpc.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return &peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: dir, Origin: childtest.Client{Name: "a"}, Method: method}
	}
	call := func(method, name string) *peer.Message {
		return msg(peer.ToChild, method, `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{"name":`+name+`}}`)
	}
	for _, c := range []struct {
		what          string
		tools         map[string]string
		list          bool // a tools/list answer with echo and flood passed first
		pass, refused []string
	}{
		{"valid names", map[string]string{"echo": digest(echo), "ünï": "sha256:0", "e\ufffdcho": "sha256:0", `x\u0079`: "sha256:0"}, false,
			[]string{`"echo"`, `"ec\u0068o"`, `"ünï"`, `"\u00fcn\u00ef"`, `"e\ufffdcho"`, "\"e\xffcho\"", `"x\\u0079"`, `""`},
			[]string{`"other"`, `"Echo"`, `"ech"`, `"echo "`, `"x\u0079"`}},
		{"an invalid name", map[string]string{"echo": digest(echo), "e\xffcho": "sha256:0"}, false,
			[]string{`"echo"`, `"ec\u0068o"`},
			[]string{"\"e\xffcho\"", `"e\ufffdcho"`, `"other"`}},
		{"a list dropped flood", map[string]string{"echo": digest(echo), "flood": "sha256:" + strings.Repeat("0", 64)}, true,
			[]string{`"echo"`, `"ec\u0068o"`},
			[]string{`"flood"`, `"fl\u006fod"`, `"other"`}},
		{"no lock", nil, false, []string{`"echo"`, `"other"`}, nil},
	} {
		t.Run(c.what, func(t *testing.T) {
			var lock *pin.Lock
			if c.tools != nil {
				lock = pin.NewLock()
				lock.Tools = c.tools
				lock.Prompts = c.tools
			}
			h := pin.New(&pin.Options{Lock: lock, LockFile: "l.json", Inspection: pin.Inspection{AllowHiddenUnicode: true, MaxDescriptionBytes: -1}}).
				Interceptor(&pin.Hooks{Logger: quiet})(func(*peer.Message) error { return nil })
			if c.list {
				if err := h(msg(peer.FromChild, "tools/list", `{"jsonrpc":"2.0","id":9,"result":{"tools":[`+echo+`,`+flood+`]}}`)); err != nil {
					t.Fatal(err)
				}
			}
			for _, method := range []string{"tools/call", "prompts/get"} {
				if c.list && method == "prompts/get" {
					continue // only tools were listed
				}
				for round := range 2 {
					for _, name := range c.pass {
						if err := h(call(method, name)); err != nil {
							t.Errorf("round %d: %s %s refused: %v", round, method, name, err)
						}
					}
					for _, name := range c.refused {
						var r *pin.Refusal
						if err := h(call(method, name)); !errors.As(err, &r) {
							t.Errorf("round %d: %s %s: %v, want a refusal", round, method, name, err)
						}
					}
				}
			}
		})
	}
}

// A resource a list drops only because the lock does not pin it stays
// readable through a pinned template it matches, and calls of pinned
// tools keep passing after such a list.
func TestListedResourceReadableThroughTemplate(t *testing.T) {
	lock := pin.NewLock()
	lock.ResourceTemplates["file:///docs/{name}"] = "sha256:" + strings.Repeat("0", 64)
	lock.Tools["echo"] = "sha256:" + strings.Repeat("0", 64)
	h := pin.New(&pin.Options{Lock: lock, LockFile: "l.json"}).Interceptor(&pin.Hooks{Logger: quiet})(func(*peer.Message) error { return nil })
	send := func(dir peer.Direction, method, data string) error {
		t.Helper()
		env, err := jsonrpc.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return h(&peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: dir, Origin: childtest.Client{Name: "a"}, Method: method})
	}
	list := `{"jsonrpc":"2.0","id":1,"result":{"resources":[{"uri":"file:///docs/readme.md","name":"readme"}]}}`
	if err := send(peer.FromChild, "resources/list", list); err != nil {
		t.Fatal(err)
	}
	read := `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///docs/readme.md"}}`
	if err := send(peer.ToChild, "resources/read", read); err != nil {
		t.Errorf("reading a listed resource through its pinned template: %v", err)
	}
	if err := send(peer.ToChild, "resources/read", `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`); err == nil {
		t.Error("a URI no template matches was read")
	}
	call := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{}}}`
	if err := send(peer.ToChild, "tools/call", call); err != nil {
		t.Errorf("a pinned tool after the list: %v", err)
	}
}

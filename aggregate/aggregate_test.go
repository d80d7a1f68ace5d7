package aggregate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

func TestMain(m *testing.M) {
	testserver.Main()
	cacheServerMain()
	goleak.VerifyTestMain(m)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// counting is a member's launcher that records the session name of each
// child it starts, and can be made to fail.
type counting struct {
	l    sandbox.Launcher
	mu   sync.Mutex
	runs []string
	fail error
	// procs are the children started, to kill one.
	procs []sandbox.Process
}

func (c *counting) Launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	c.mu.Lock()
	fail := c.fail
	c.runs = append(c.runs, sessionID)
	c.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	p, err := c.l.Launch(ctx, sessionID)
	if err == nil {
		c.mu.Lock()
		c.procs = append(c.procs, p)
		c.mu.Unlock()
	}
	return p, err
}

// sessions returns the children started for sessions (not the catalog).
func (c *counting) sessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.runs {
		if !strings.HasPrefix(r, "aggregate-catalog-") {
			out = append(out, r)
		}
	}
	return out
}

func (c *counting) setFail(err error) {
	c.mu.Lock()
	c.fail = err
	c.mu.Unlock()
}

type fixture struct {
	agg      *aggregate.Aggregate
	url      string
	test     *counting // internal/testserver: echo, elicit, crash, block
	every    *counting // the SDK's everything-server
	endpoint *endpoint.Endpoint
}

func logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newFixture serves an aggregate of two real members, the test binary
// as internal/testserver ("test") and the everything-server ("every"),
// through a real endpoint, in both eras.
func newFixture(t *testing.T, tweak func(*aggregate.Options)) *fixture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lg := logger(t)
	f := &fixture{
		test: &counting{l: sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"),
			StopGrace: 2 * time.Second, Logger: lg})},
		every: &counting{l: sandbox.NewLocal(&sandbox.LocalOptions{Command: childtest.EverythingServer(t),
			StopGrace: 2 * time.Second, Logger: lg})},
	}
	o := &aggregate.Options{
		Members: []aggregate.Member{{Name: "test", Launcher: f.test}, {Name: "every", Launcher: f.every}},
		Logger:  lg,
	}
	if tweak != nil {
		tweak(o)
	}
	agg, err := aggregate.New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.agg = agg
	l := agg.Launcher()
	e, err := endpoint.New(&endpoint.Options{
		Session: &session.Options{Launcher: session.LauncherOf(l), Logger: lg},
		Pool: &pool.Options{
			Launch:        func(ctx context.Context, name string) (peer.Process, error) { return l.Launch(ctx, name) },
			Era:           pool.EraLegacy,
			OtherVersions: bridge.SessionVersions(),
			Logger:        lg,
		},
		Handler: &bridge.Options{Path: "/mcp", Logger: lg},
		Release: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return agg.Close(ctx)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.endpoint = e
	srv := httptest.NewServer(e.Handler())
	f.url = srv.URL + "/mcp"
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return f
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (f *fixture) connect(t *testing.T, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "aggregate-test", Version: "1"}, opts).
		Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: f.url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting in %s: %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %q, want %q", got, version)
	}
	return cs
}

// callText calls a tool and returns the text of its answer.
func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("the call failed: %s", b.String())
	}
	return b.String()
}

var versions = []string{"2025-11-25", "2026-07-28"}

// Tools, prompts and resources of two real members through one endpoint,
// in both eras: names prefixed, calls routed back under the member's own
// name, listing starts no member child, and a call starts only its
// member's.
func TestNamesAndRouting(t *testing.T) {
	f := newFixture(t, nil)
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			ctx := ctxT(t)
			test0, every0 := len(f.test.sessions()), len(f.every.sessions())
			cs := f.connect(t, version, nil)
			caps := cs.InitializeResult().Capabilities
			if caps.Tools == nil || caps.Prompts == nil || caps.Resources == nil || !caps.Resources.Subscribe {
				t.Errorf("initialize's capabilities %+v, want tools, prompts and resources with subscribe (every's, merged)", caps)
			}
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range tools.Tools {
				names = append(names, tool.Name)
			}
			for _, want := range []string{"test__echo", "test__elicit", "every__test_simple_text", "every____transient_tool_for_list_changed"} {
				if want == "every____transient_tool_for_list_changed" {
					continue // listed only once triggered
				}
				if !slices.Contains(names, want) {
					t.Errorf("tools/list lacks %q: %v", want, names)
				}
			}
			prompts, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(prompts.Prompts) == 0 || !strings.HasPrefix(prompts.Prompts[0].Name, "every__") {
				t.Errorf("prompts/list: %v, want every__ prompts", prompts.Prompts)
			}
			res, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(res.Resources, func(r *mcp.Resource) bool { return r.URI == "test://static-text" }) {
				t.Errorf("resources/list lacks test://static-text: %v", res.Resources)
			}
			if got := len(f.test.sessions()) + len(f.every.sessions()) - test0 - every0; got != 0 {
				t.Fatalf("listing started %d member children, want none", got)
			}

			if got := callText(t, cs, "test__echo", map[string]any{"text": "hi"}); got != "hi" {
				t.Errorf("test__echo answered %q", got)
			}
			if n, m := len(f.test.sessions())-test0, len(f.every.sessions())-every0; n != 1 || m != 0 {
				t.Fatalf("a call of test__echo started %d children of test and %d of every, want 1 and 0", n, m)
			}
			if got := callText(t, cs, "every__test_simple_text", nil); got == "" {
				t.Error("every__test_simple_text answered nothing")
			}
			p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "every__test_prompt_with_arguments", Arguments: map[string]string{"arg1": "x", "arg2": "y"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Messages) == 0 {
				t.Error("every__test_prompt_with_arguments: no messages")
			}
			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static-text"})
			if err != nil || len(rr.Contents) == 0 {
				t.Fatalf("reading test://static-text: %v %v", rr, err)
			}
			rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://template/7/data"})
			if err != nil || len(rr.Contents) == 0 {
				t.Fatalf("reading test://template/7/data (a template's): %v %v", rr, err)
			}
			if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "nowhere://x"}); err == nil || !strings.Contains(err.Error(), "-32002") && !strings.Contains(err.Error(), "not found") {
				t.Errorf("reading a URI no member serves: %v, want resource not found", err)
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo"}); err == nil {
				t.Error("a call of an unprefixed name succeeded")
			}
			if n, m := len(f.test.sessions())-test0, len(f.every.sessions())-every0; n != 1 || m != 1 {
				t.Fatalf("the session started %d children of test and %d of every, want one each", n, m)
			}
		})
	}
}

// Two members whose names could collide are refused at New, in one line
// naming both.
func TestCollisionsRefused(t *testing.T) {
	l := sandbox.NewLocal(&sandbox.LocalOptions{Command: "true"})
	for _, tc := range []struct {
		members []aggregate.Member
		want    string
	}{
		{[]aggregate.Member{{Name: "a", Launcher: l}, {Name: "b", Prefix: "a", Launcher: l}},
			`aggregate members "a" and "b" would advertise the same names (prefixes "a" and "a" with separator "__"): give one of them another Prefix`},
		{[]aggregate.Member{{Name: "a", Launcher: l}, {Name: "a__b", Launcher: l}},
			`aggregate members "a" and "a__b" would advertise the same names (prefixes "a" and "a__b" with separator "__"): give one of them another Prefix`},
		{[]aggregate.Member{{Name: "a_", Launcher: l}, {Name: "a", Launcher: l}},
			`aggregate members "a_" and "a" would advertise the same names (prefixes "a_" and "a" with separator "__"): give one of them another Prefix`},
		{[]aggregate.Member{{Name: "my server", Launcher: l}},
			`aggregate member "my server": prefix "my server" must be 1 to 32 characters of A-Z a-z 0-9 _ - . (give the member a Prefix)`},
	} {
		_, err := aggregate.New(&aggregate.Options{Members: tc.members})
		if err == nil || err.Error() != tc.want {
			t.Errorf("New(%v): %v\nwant %s", tc.members, err, tc.want)
		}
	}
	// Prefixes that share a beginning but not prefix+separator are fine.
	a, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "ab", Launcher: l}, {Name: "a", Launcher: l}, {Name: "a_b", Launcher: l}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A member's elicitation and sampling reach the client through the
// aggregate, as the virtual child's own requests: in a 2025 session on
// the session's stream, in 2026-07-28 as multi round-trip rounds (the
// pool parks the call on its virtual child).
func TestElicitationAndSampling(t *testing.T) {
	f := newFixture(t, nil)
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			var mu sync.Mutex
			var asked []string
			cs := f.connect(t, version, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					mu.Lock()
					asked = append(asked, "elicit:"+req.Params.Message)
					mu.Unlock()
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada", "username": "ada", "email": "ada@example.com"}}, nil
				},
				CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					mu.Lock()
					asked = append(asked, "sample")
					mu.Unlock()
					return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled-reply"}}, nil
				},
			})
			if got := callText(t, cs, "test__elicit", map[string]any{"text": "who?"}); got != "accept" {
				t.Errorf("test__elicit answered %q, want accept", got)
			}
			if got := callText(t, cs, "every__test_sampling", map[string]any{"prompt": "hello"}); !strings.Contains(got, "sampled-reply") {
				t.Errorf("every__test_sampling answered %q, want the sampled reply", got)
			}
			if got := callText(t, cs, "every__test_elicitation", map[string]any{"message": "and you?"}); !strings.Contains(got, "accept") {
				t.Errorf("every__test_elicitation answered %q", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(asked, "elicit:who?") || !slices.Contains(asked, "sample") {
				t.Errorf("the client was asked %v, want the members' elicitation and sampling", asked)
			}
		})
	}
}

// listed returns the advertised tool names.
func listed(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	names, _ := listTools(t, cs)
	return names
}

// listTools returns the names tools/list gives, and its result.
func listTools(t *testing.T, cs *mcp.ClientSession) ([]string, *mcp.ListToolsResult) {
	t.Helper()
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names, res
}

// callErr calls a tool that must fail, and returns the error's text.
func callErr(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err == nil && !res.IsError {
		t.Fatalf("%s succeeded, want an error", name)
	}
	if err != nil {
		return err.Error()
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// waitFor waits for a list_changed notification after which the tools
// listed satisfy ok.
func waitFor(t *testing.T, cs *mcp.ClientSession, changed <-chan struct{}, what string, ok func([]string) bool) {
	t.Helper()
	ctx := ctxT(t)
	for !ok(listed(t, cs)) {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no list_changed after which %s: %v", what, listed(t, cs))
		}
	}
}

// A member that cannot start, and one whose children crash, do not fail
// the others: a failed member drops out of the lists (with list_changed),
// its calls get an error naming it, and it comes back once it can start.
func TestPartialAvailability(t *testing.T) {
	f := newFixture(t, func(o *aggregate.Options) {
		o.RetryMin, o.RetryMax = 20*time.Millisecond, 200*time.Millisecond
		o.Members[1].Launcher.(*counting).setFail(errors.New("the image is not there"))
	})
	changed := make(chan struct{}, 100)
	cs := f.connect(t, "2025-11-25", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			changed <- struct{}{}
		},
	})
	has := func(name string) func([]string) bool {
		return func(names []string) bool { return slices.Contains(names, name) }
	}
	hasNot := func(name string) func([]string) bool {
		return func(names []string) bool { return !slices.Contains(names, name) }
	}
	names := listed(t, cs)
	if !slices.Contains(names, "test__echo") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "every__") }) {
		t.Fatalf("with every down, tools/list is %v, want test's tools only", names)
	}
	if msg := callErr(t, cs, "every__test_simple_text", nil); !strings.Contains(msg, `aggregate member "every" is unavailable`) || !strings.Contains(msg, "the image is not there") {
		t.Errorf("a call of a member that is down: %q, want an error naming it and why", msg)
	}
	if got := callText(t, cs, "test__echo", map[string]any{"text": "still here"}); got != "still here" {
		t.Errorf("test__echo with every down: %q", got)
	}

	f.every.setFail(nil)
	waitFor(t, cs, changed, "every is back", has("every__test_simple_text"))
	if got := callText(t, cs, "every__test_simple_text", nil); got == "" {
		t.Error("every__test_simple_text answered nothing once every came back")
	}

	// A session's child of test crashes in the middle of a call: that
	// call fails naming the member, the next one starts another child.
	before := len(f.test.sessions())
	if msg := callErr(t, cs, "test__crash", nil); !strings.Contains(msg, `aggregate member "test"`) {
		t.Errorf("a call whose member child crashed: %q, want an error naming the member", msg)
	}
	if got := callText(t, cs, "every__test_simple_text", nil); got == "" {
		t.Error("every failed after test's child crashed")
	}
	if got := callText(t, cs, "test__echo", map[string]any{"text": "again"}); got != "again" {
		t.Errorf("test__echo after its child crashed: %q", got)
	}
	if got := len(f.test.sessions()) - before; got != 1 {
		t.Errorf("after the crash, %d children of test started, want 1", got)
	}

	// test's catalog child ends and cannot start again for a while: test
	// drops out of the lists, then comes back.
	f.test.setFail(errors.New("out of processes"))
	f.test.mu.Lock()
	catalog := f.test.procs[0]
	f.test.mu.Unlock()
	if err := catalog.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cs, changed, "test is gone", hasNot("test__echo"))
	if msg := callErr(t, cs, "test__echo", map[string]any{"text": "x"}); !strings.Contains(msg, `aggregate member "test" is unavailable`) {
		t.Errorf("a call of test while it is down: %q", msg)
	}
	if got := callText(t, cs, "every__test_simple_text", nil); got == "" {
		t.Error("every failed while test was down")
	}
	f.test.setFail(nil)
	waitFor(t, cs, changed, "test is back", has("test__echo"))
	if got := callText(t, cs, "test__echo", map[string]any{"text": "back"}); got != "back" {
		t.Errorf("test__echo once test came back: %q", got)
	}
}

// A member child whose lists change in a session (the everything-server
// adds a tool when asked) tells the client, as the aggregate's
// list_changed, and the session then lists and calls that child's own
// tools; other sessions keep the catalog's.
func TestListChangedInSession(t *testing.T) {
	f := newFixture(t, nil)
	changed := make(chan struct{}, 100)
	cs := f.connect(t, "2025-11-25", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	other := f.connect(t, "2025-11-25", nil)
	const added = "every____transient_tool_for_list_changed"
	if slices.Contains(listed(t, cs), added) {
		t.Fatalf("%s listed before it was added", added)
	}
	callText(t, cs, "every__test_trigger_tool_change", nil)
	waitFor(t, cs, changed, added+" is listed", func(names []string) bool { return slices.Contains(names, added) })
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: added}); err != nil {
		t.Errorf("calling the added tool: %v", err)
	}
	if slices.Contains(listed(t, other), added) {
		t.Errorf("another session lists %s, which only the first session's child has", added)
	}
}

// Progress of a member's call reaches the client under the client's own
// token, and a cancelled call is cancelled on its member: the session
// goes on.
func TestProgressAndCancel(t *testing.T) {
	cancelled := make(chan string, 10)
	blocked := make(chan struct{}, 10)
	f := newFixture(t, func(o *aggregate.Options) {
		// The member's interceptor sees what reaches its child.
		o.Members[0].Intercept = func(string, func(error)) (peer.Interceptor, func(error)) {
			return func(next peer.Handler) peer.Handler {
				return func(m *peer.Message) error {
					if m.Dir == peer.ToChild && m.Method == "notifications/cancelled" {
						cancelled <- string(m.Data)
					}
					if m.Dir == peer.ToChild && m.Method == "tools/call" && bytes.Contains(m.Data, []byte(`"block"`)) {
						blocked <- struct{}{}
					}
					return next(m)
				}
			}, nil
		}
	})
	progress := make(chan float64, 10)
	cs := f.connect(t, "2025-11-25", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "tok" {
				progress <- req.Params.Progress
			}
		},
	})
	params := &mcp.CallToolParams{Name: "test__echo", Arguments: map[string]any{"text": "p", "n": 3}}
	params.SetProgressToken("tok")
	if _, err := cs.CallTool(ctxT(t), params); err != nil {
		t.Fatal(err)
	}
	for want := 1.0; want <= 3; want++ {
		if got := <-progress; got != want {
			t.Fatalf("progress %v, want %v", got, want)
		}
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__block"})
		done <- err
	}()
	// Cancel once the call reached the member child: cancelled before,
	// the call never reaches it (a session drops a request whose
	// cancellation came first, session.TestCancelledBeforeItCame), and
	// the child has nothing to be told.
	select {
	case <-blocked:
	case <-ctxT(t).Done():
		t.Fatal("the blocking call never reached the member child")
	}
	// The member child reads on beside the blocked call.
	if got := callText(t, cs, "test__echo", map[string]any{"text": "meanwhile"}); got != "meanwhile" {
		t.Fatalf("a call beside the blocked one: %q", got)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	select {
	case <-cancelled:
	case <-ctxT(t).Done():
		t.Fatal("the member child was not sent notifications/cancelled")
	}
	if got := callText(t, cs, "every__test_simple_text", nil); got == "" {
		t.Fatal("the session failed after a cancelled call")
	}
}

// The legacy HTTP+SSE transport (2024-11-05) serves the aggregate too.
func TestLegacySSE(t *testing.T) {
	f := newFixture(t, nil)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "aggregate-test", Version: "1"}, nil).
		Connect(ctxT(t), &mcp.SSEClientTransport{Endpoint: strings.TrimSuffix(f.url, "/mcp") + "/sse"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if names := listed(t, cs); !slices.Contains(names, "test__echo") || !slices.Contains(names, "every__test_simple_text") {
		t.Fatalf("tools/list over HTTP+SSE: %v", names)
	}
	if got := callText(t, cs, "test__echo", map[string]any{"text": "old"}); got != "old" {
		t.Errorf("test__echo over HTTP+SSE: %q", got)
	}
}

// In 2026-07-28, a member coming back reaches the client's
// subscriptions/listen as the aggregate's tools list_changed (the pool
// fans in what its children, virtual ones included, send).
func TestListChangedStateless(t *testing.T) {
	f := newFixture(t, func(o *aggregate.Options) {
		o.RetryMin, o.RetryMax = 20*time.Millisecond, 200*time.Millisecond
		o.Members[1].Launcher.(*counting).setFail(errors.New("not yet"))
	})
	changed := make(chan struct{}, 100)
	cs := f.connect(t, "2026-07-28", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	if slices.Contains(listed(t, cs), "every__test_simple_text") {
		t.Fatal("every listed while it cannot start")
	}
	f.every.setFail(nil)
	// The notification itself is what is tested: waitFor lists first.
	select {
	case <-changed:
	case <-ctxT(t).Done():
		t.Fatal("no tools list_changed on the listen stream once every came back")
	}
	waitFor(t, cs, changed, "every is back", func(names []string) bool { return slices.Contains(names, "every__test_simple_text") })
}

// A subscription goes to the member serving the URI, whose updates reach
// the client; completion/complete goes to the member of its ref, under
// the prompt's own name.
func TestSubscribeAndComplete(t *testing.T) {
	f := newFixture(t, func(o *aggregate.Options) { o.IdleTimeout = time.Millisecond })
	updated := make(chan string, 10)
	cs := f.connect(t, "2025-11-25", &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	})
	ctx := ctxT(t)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Fatal(err)
	}
	// The everything-server sends an update every 3 s; its child stays
	// though IdleTimeout passed: a subscription keeps it.
	for range 2 {
		select {
		case uri := <-updated:
			if uri != "test://watched-resource" {
				t.Fatalf("update of %q", uri)
			}
		case <-ctx.Done():
			t.Fatal("no notifications/resources/updated for the subscribed resource")
		}
	}
	res, err := cs.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "every__test_prompt_with_arguments"},
		Argument: mcp.CompleteParamsArgument{Name: "arg1", Value: "x"},
	})
	if err != nil {
		t.Fatalf("completion/complete of an advertised prompt: %v", err)
	}
	if res.Completion.Values == nil {
		t.Errorf("completion: %+v", res.Completion)
	}
	if _, err := cs.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"},
		Argument: mcp.CompleteParamsArgument{Name: "arg1", Value: "x"},
	}); err == nil {
		t.Error("completion/complete of an unprefixed prompt name succeeded")
	}
}

// A pin enforcer on a member's catalog child takes what its lock does
// not allow out of the aggregate's lists: that member's items only.
func TestPinnedCatalog(t *testing.T) {
	f := newFixture(t, func(o *aggregate.Options) {
		lock := pin.NewLock() // pins nothing: every tool of test is refused
		o.Members[0].CatalogIntercept = func(func(error)) peer.Interceptor {
			return pin.New(&pin.Options{Lock: lock, LockFile: "test.lock"}).Interceptor(nil)
		}
	})
	cs := f.connect(t, "2025-11-25", nil)
	names := listed(t, cs)
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "test__") }) {
		t.Errorf("tools/list shows test's tools, which its lock refuses: %v", names)
	}
	if !slices.Contains(names, "every__test_simple_text") {
		t.Errorf("tools/list lost every's tools, which no lock holds: %v", names)
	}
	if down := f.agg.Down(); len(down) != 0 {
		t.Errorf("members down: %v; the lock should filter test's lists, not fail it", down)
	}
}

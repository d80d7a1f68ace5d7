package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// startStatelessCommand starts a stateless bridge in front of command.
func startStatelessCommand(t *testing.T, command []string, po pool.Options) (*testBridge, *pool.Pool) {
	t.Helper()
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: command[0], Args: command[1:], Env: os.Environ(), StopGrace: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	po.Launch = func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) }
	return startStateless(t, po, bridge.Options{})
}

// sdkClient connects the Go SDK v1.8 client with default options (it then
// speaks 2026-07-28) and every input handler.
func sdkClient(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "stateless-test", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled-reply"}}, nil
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{
				"name": "Ada", "username": "ada", "email": "ada@example.com", "color": "blue", "confirm": true, "ok": true}}, nil
		},
		Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{}},
	})
	c.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28", v)
	}
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s failed: %s", name, strings.Join(texts, " "))
	}
	return strings.Join(texts, " ")
}

// The SDK's everything-server as a modern child: its own
// InputRequiredResults pass through untouched, and the client's retries
// (with the child's own requestState) reach a child of the pool.
func TestStatelessEverythingModern(t *testing.T) {
	b, p := startStatelessCommand(t, []string{everythingServer(t)}, pool.Options{})
	cs := sdkClient(t, b.URL)
	if e, _ := p.Era(ctxT(t)); e != pool.EraModern {
		t.Fatalf("era %v", e)
	}
	for tool, want := range map[string]string{
		"test_simple_text":                           "simple text",
		"test_input_required_result_elicitation":     "Hello, Ada!",
		"test_input_required_result_sampling":        "sampled-reply",
		"test_input_required_result_list_roots":      "file:///work",
		"test_input_required_result_request_state":   "state-ok",
		"test_input_required_result_multiple_inputs": "1 root(s)",
		"test_input_required_result_multi_round":     "blue",
	} {
		if got := callText(t, cs, tool, nil); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q in it", tool, got, want)
		}
	}
	if res, err := cs.ListResources(ctxT(t), nil); err != nil || len(res.Resources) == 0 {
		t.Errorf("resources/list: %v %v", res, err)
	}
	if res, err := cs.GetPrompt(ctxT(t), &mcp.GetPromptParams{Name: "test_simple_prompt"}); err != nil || len(res.Messages) == 0 {
		t.Errorf("prompts/get: %v %v", res, err)
	}
}

// The same server forced legacy: the bridge initializes it, and its
// elicitation, sampling and roots requests in the middle of a call arrive
// at the client as MRTR rounds.
func TestStatelessEverythingLegacy(t *testing.T) {
	b, p := startStatelessCommand(t, []string{everythingServer(t)}, pool.Options{Era: pool.EraLegacy})
	cs := sdkClient(t, b.URL)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"test_simple_text", nil, "simple text"},
		{"test_sampling", map[string]any{"prompt": "hi"}, "sampled-reply"},
		{"test_elicitation", map[string]any{"message": "who?"}, "ada"},
		{"test_input_required_result_elicitation", nil, "Hello, Ada!"},
		{"test_input_required_result_list_roots", nil, "file:///work"},
		{"test_input_required_result_multiple_inputs", nil, "1 root(s)"},
	} {
		if got := callText(t, cs, tc.tool, tc.args); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q in it", tc.tool, got, tc.want)
		}
	}
	if res, err := cs.GetPrompt(ctxT(t), &mcp.GetPromptParams{Name: "test_simple_prompt"}); err != nil || len(res.Messages) == 0 {
		t.Errorf("prompts/get: %v %v", res, err)
	}
	if err := p.WaitIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Parked != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// examples/hello, the README's server, behind the stateless front end.
func TestStatelessHello(t *testing.T) {
	if testing.Short() {
		t.Skip("builds examples/hello")
	}
	bin := t.TempDir() + "/hello"
	if out, err := execCommand("go", "build", "-o", bin, "../examples/hello"); err != nil {
		t.Fatalf("building examples/hello: %v\n%s", err, out)
	}
	b, p := startStatelessCommand(t, []string{bin}, pool.Options{})
	cs := sdkClient(t, b.URL)
	if got := callText(t, cs, "echo", map[string]any{"text": "hello"}); got != "hello" {
		t.Fatalf("echo: %q", got)
	}
	if e, _ := p.Era(ctxT(t)); e != pool.EraModern {
		t.Fatalf("era %v", e)
	}
}

func execCommand(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// npmPeers returns the directory of the npm peers (MCP_PEERS_DIR: a
// directory holding node22 and node_modules with the TypeScript SDK
// clients, server-everything and the conformance suite), or skips the
// test, and has TestMain say so once (peersSkipped).
func npmPeers(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Node peers")
	}
	dir := os.Getenv("MCP_PEERS_DIR")
	if dir == "" {
		peersSkipped.Store("MCP_PEERS_DIR is not set")
		t.Skip("MCP_PEERS_DIR is not set: set it to a directory holding node22 and node_modules with the npm peers (.ci/run does when it can)")
	}
	if _, err := os.Stat(dir + "/node22"); err != nil {
		peersSkipped.Store("no node22 in MCP_PEERS_DIR=" + dir)
		t.Skipf("no npm peers in %s (MCP_PEERS_DIR): it holds no node22", dir)
	}
	return dir
}

// tsClient runs the TypeScript SDK 2.x client against url.
func tsClient(t *testing.T, peers, url, mode string) map[string]any {
	t.Helper()
	script, err := filepath.Abs("testdata/ts-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's directory: run a copy
	// placed among the peers' node_modules.
	dst := filepath.Join(peers, "ts-stateless-client.mjs")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxT(t), filepath.Join(peers, "node22"), dst, url, mode)
	out, err := cmd.Output()
	var got map[string]any
	if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
		t.Fatalf("TS client: %v\n%s", err, out)
	}
	return got
}

// The TypeScript SDK 2.x client, version negotiation auto, speaks
// 2026-07-28 to the bridge in front of children of both eras; a legacy
// child's elicitation and sampling reach it as MRTR rounds.
func TestStatelessTSClient(t *testing.T) {
	peers := npmPeers(t)
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			b, _ := startStateless(t, pool.Options{Era: era}, bridge.Options{})
			got := tsClient(t, peers, b.URL, "test-child")
			want := map[string]any{"version": "2026-07-28", "echo": "from-ts"}
			if era == pool.EraLegacy {
				want["elicit"] = "accept: Grace"
				want["sample"] = "sampled: ts-sampled"
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// npm's server-everything (TypeScript SDK) as the child, with the TS client.
func TestStatelessNPMServerEverything(t *testing.T) {
	peers := npmPeers(t)
	b, p := startStatelessCommand(t, []string{filepath.Join(peers, "node22"), filepath.Join(peers, "node_modules/.bin/mcp-server-everything")}, pool.Options{})
	got := tsClient(t, peers, b.URL, "everything")
	if got["version"] != "2026-07-28" || !strings.Contains(fmt.Sprint(got["echo"]), "from-ts") {
		t.Fatalf("TS client: %v", got)
	}
	cs := sdkClient(t, b.URL)
	if tools, err := cs.ListTools(ctxT(t), nil); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v %v", tools, err)
	}
	e, _ := p.Era(ctxT(t))
	t.Logf("npm server-everything is %v", e)
}

// subscriptions/listen with the Go SDK client: list changes and resource
// updates reach it on its subscription streams, from a modern child (passed
// through, demultiplexed by subscription id) and from a legacy one (mapped
// onto its list_changed notifications and resources/subscribe).
func TestStatelessSubscriptions(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			b, p := startStatelessCommand(t, []string{everythingServer(t)}, pool.Options{Era: era, Max: 1})
			changed := make(chan string, 10)
			updated := make(chan string, 10)
			c := mcp.NewClient(&mcp.Implementation{Name: "subscriber", Version: "1"}, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- "tools" },
				ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
			})
			cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
				t.Fatalf("negotiated %q", v)
			}
			if err := cs.Subscribe(ctxT(t), &mcp.SubscribeParams{URI: "test://watched-resource"}); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			callText(t, cs, "test_trigger_tool_change", nil)
			select {
			case <-changed:
			case <-ctxT(t).Done():
				t.Fatal("no notifications/tools/list_changed")
			}
			// The server updates the watched resource every 3 seconds.
			select {
			case uri := <-updated:
				if uri != "test://watched-resource" {
					t.Fatalf("updated %q", uri)
				}
			case <-ctxT(t).Done():
				t.Fatal("no notifications/resources/updated")
			}
			if err := cs.Unsubscribe(ctxT(t), &mcp.UnsubscribeParams{URI: "test://watched-resource"}); err != nil {
				t.Fatal(err)
			}
			cs.Close()
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// childRecorder records, at the interception point of the pool's children,
// what the bridge passed on: the protocol version in the _meta of each
// tools/call a child got, how many of them carried inputResponses (MRTR
// retries of a modern child), and the child's own requests (a legacy
// child's questions) that got an answer.
type childRecorder struct {
	mu       sync.Mutex
	versions map[string]int
	retries  int
	asked    map[string]string // the child's request id → method
	answered []string          // methods of the child's requests answered
}

func newChildRecorder() *childRecorder {
	return &childRecorder{versions: map[string]int{}, asked: map[string]string{}}
}

func (r *childRecorder) intercept(next peer.Handler) peer.Handler {
	return func(m *peer.Message) error {
		r.mu.Lock()
		switch {
		case m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindRequest && m.Method == "tools/call":
			params, _ := jsonrpc.Lookup(m.Data, "params")
			meta, _ := jsonrpc.Lookup(params, "_meta")
			v, _ := jsonrpc.Lookup(meta, "io.modelcontextprotocol/protocolVersion")
			s, _ := jsonrpc.StringValue(v)
			r.versions[s]++
			if _, ok := jsonrpc.Lookup(params, "inputResponses"); ok {
				r.retries++
			}
		case m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindRequest:
			r.asked[string(m.Env.IDAt.In(m.Data))] = m.Method
		case m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindResponse && !m.Env.IsError:
			if method, ok := r.asked[string(m.Env.IDAt.In(m.Data))]; ok {
				r.answered = append(r.answered, method)
			}
		}
		r.mu.Unlock()
		return next(m)
	}
}

// The TypeScript SDK 2.x client against the Go SDK's everything-server,
// found modern (its own InputRequiredResults pass through) and forced
// legacy (its elicitation, sampling and roots requests in the middle of a
// call reach the TS client as MRTR rounds, and the client's answers reach
// the server). Its x-mcp-header tool is called with a value the client
// must Base64-encode, which the bridge validates.
func TestStatelessTSClientEverything(t *testing.T) {
	peers := npmPeers(t)
	server := everythingServer(t)
	for _, tc := range []struct {
		era  pool.Era
		mode string
		want map[string]string
	}{
		{pool.EraAuto, "go-everything-modern", map[string]string{
			"simple": "simple text",
			"elicit": "Hello, ts-name!",
			"sample": "Sampling response: ts-sampled",
			"roots":  "Client exposed 1 root(s): file:///ts-root",
			"multi":  "ts-sampled ts-name — 1 root(s) visible",
			"rounds": "Multi-round complete: ts-name likes ts-color",
			"header": "region=eu-west 3 ü",
		}},
		{pool.EraLegacy, "go-everything-legacy", map[string]string{
			"simple": "simple text",
			"elicit": "Elicitation result: action=accept, content=map[username:ts-username]",
			"sample": "LLM response: ts-sampled",
			"roots":  "Client exposed 1 root(s): file:///ts-root",
			"multi":  "ts-sampled ts-name — 1 root(s) visible",
			"header": "region=eu-west 3 ü",
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rec := newChildRecorder()
			b, p := startStatelessCommand(t, []string{server}, pool.Options{Era: tc.era, Peer: peer.Options{Intercept: rec.intercept}})
			got := tsClient(t, peers, b.URL, tc.mode)
			t.Logf("the TS client saw %v", got)
			if got["version"] != "2026-07-28" {
				t.Errorf("the TS client negotiated %v", got["version"])
			}
			for k, v := range tc.want {
				if s, _ := got[k].(string); !strings.Contains(s, v) {
					t.Errorf("%s = %q, want %q in it (all: %v)", k, got[k], v, got)
				}
			}
			if e, _ := p.Era(ctxT(t)); (e == pool.EraModern) != (tc.era == pool.EraAuto) {
				t.Fatalf("era %v", e)
			}
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// Every tools/call a modern child got came from a client
			// speaking 2026-07-28 (none from an initialize fallback),
			// and says so in its _meta; a legacy child gets them
			// without the per-request 2026-07-28 _meta, which it had at
			// initialize (a 2025 server may refuse a request holding it).
			want := "2026-07-28"
			if tc.era != pool.EraAuto {
				want = ""
			}
			if len(rec.versions) != 1 || rec.versions[want] < len(tc.want) {
				t.Errorf("tools/call by protocol version in _meta: %v, want only %q", rec.versions, want)
			}
			asked := fmt.Sprint(got["asked"])
			for _, m := range []string{"elicitation", "sampling", "roots"} {
				if !strings.Contains(asked, m) {
					t.Errorf("the TS client was never asked for %s: %v", m, got["asked"])
				}
			}
			if tc.era == pool.EraLegacy {
				// The child asked mid-call; the client's answers came back
				// through MRTR retries as the answers to its requests.
				answered := strings.Join(rec.answered, " ")
				for _, m := range []string{"elicitation/create", "sampling/createMessage", "roots/list"} {
					if !strings.Contains(answered, m) {
						t.Errorf("the legacy child's %s got no answer: %v", m, rec.answered)
					}
				}
				if rec.retries != 0 {
					t.Errorf("a legacy child got %d inputResponses", rec.retries)
				}
			} else if rec.retries < 6 {
				// One retry per round of the six MRTR tool calls.
				t.Errorf("the modern child got %d retries with inputResponses", rec.retries)
			}
		})
	}
}

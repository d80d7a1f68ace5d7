package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// startStateless starts a bridge whose stateless front end serves
// revision 2026-07-28 on a pool of test children of the given era.
func startStateless(t testing.TB, po pool.Options, bo bridge.Options) (*testBridge, *pool.Pool) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	local := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:   exe,
		Env:       append(os.Environ(), childEnv+"=server"),
		StopGrace: 2 * time.Second,
		Logger:    logger,
	})
	if po.Launch == nil {
		po.Launch = func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) }
	}
	po.Logger = logger
	po.OtherVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}
	p, err := pool.New(&po)
	if err != nil {
		t.Fatal(err)
	}
	bo.Stateless = p
	b := startBridge(t, bridgeConfig{bridge: bo})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("closing the pool: %v", err)
		}
	})
	return b, p
}

const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"sampling":{}}}`

// statelessHeaders are the headers of a well-formed request of method.
func statelessHeaders(method, name string) map[string]string {
	h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result map[string]json.RawMessage
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func decodeAnswer(t testing.TB, body string) rpcAnswer {
	t.Helper()
	var a rpcAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("answer is not JSON-RPC: %q: %v", body, err)
	}
	return a
}

// Each rule of the revision's HTTP binding is enforced with the status and
// code it names.
func TestStatelessRules(t *testing.T) {
	b, _ := startStateless(t, pool.Options{Era: pool.EraModern}, bridge.Options{})
	echo := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` + modernMeta + `}}`
	list := `{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{` + modernMeta + `}}`
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for a, b := range h {
			out[a] = b
		}
		out[k] = v
		return out
	}
	call := statelessHeaders("tools/call", "echo")
	tests := []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		code    int
		says    string
	}{
		{"no Mcp-Method", echo, with(call, "Mcp-Method", ""), 400, pool.CodeHeaderMismatch, "Mcp-Method header is required"},
		{"Mcp-Method differs", echo, with(call, "Mcp-Method", "tools/list"), 400, pool.CodeHeaderMismatch, "does not match"},
		{"no Mcp-Name", echo, with(call, "Mcp-Name", ""), 400, pool.CodeHeaderMismatch, "Mcp-Name"},
		{"Mcp-Name differs", echo, with(call, "Mcp-Name", "other"), 400, pool.CodeHeaderMismatch, "does not match"},
		{"Mcp-Name bad base64", echo, with(call, "Mcp-Name", "=?base64?!!!?="), 400, pool.CodeHeaderMismatch, "base64"},
		{"no _meta", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, statelessHeaders("tools/list", ""), 400, -32602, "_meta"},
		{"no capabilities", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, statelessHeaders("tools/list", ""), 400, -32602, "clientCapabilities"},
		{"_meta version differs", strings.Replace(list, `"2026-07-28"`, `"2026-01-01"`, 1), statelessHeaders("tools/list", ""), 400, pool.CodeHeaderMismatch, "MCP-Protocol-Version '2026-07-28' does not match _meta's io.modelcontextprotocol/protocolVersion '2026-01-01'"},
		{"unsupported version", list, with(statelessHeaders("tools/list", ""), "MCP-Protocol-Version", "2027-01-01"), 400, pool.CodeUnsupportedProtocolVersion, "2026-07-28, 2025-11-25"},
		{"removed method", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + modernMeta + `}}`, statelessHeaders("ping", ""), 404, -32601, "ping"},
		{"batch", "[" + list + "]", statelessHeaders("tools/list", ""), 400, -32600, "no batches"},
		{"response", `{"jsonrpc":"2.0","id":1,"result":{}}`, statelessHeaders("tools/list", ""), 400, -32600, "inputResponses"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawPost(t, b.URL, tc.body, tc.headers)
			body := readAll(t, resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			a := decodeAnswer(t, body)
			if a.Error == nil || a.Error.Code != tc.code || !strings.Contains(a.Error.Message, tc.says) {
				t.Fatalf("answer %s, want code %d saying %q", body, tc.code, tc.says)
			}
		})
	}
	t.Run("unsupported version lists the supported ones", func(t *testing.T) {
		resp := rawPost(t, b.URL, list, with(statelessHeaders("tools/list", ""), "MCP-Protocol-Version", "2027-01-01"))
		a := decodeAnswer(t, readAll(t, resp.Body))
		var d struct{ Supported []string }
		_ = json.Unmarshal(a.Error.Data, &d)
		if len(d.Supported) != 4 || d.Supported[0] != "2026-07-28" {
			t.Fatalf("data %s", a.Error.Data)
		}
	})
	t.Run("base64 Mcp-Name", func(t *testing.T) {
		resp := rawPost(t, b.URL, echo, with(call, "Mcp-Name", "=?base64?ZWNobw==?="))
		body := readAll(t, resp.Body)
		a := decodeAnswer(t, body)
		if resp.StatusCode != 200 || a.Error != nil || string(a.Result["resultType"]) != `"complete"` {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("notification", func(t *testing.T) {
		resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, statelessHeaders("notifications/cancelled", ""))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		t.Run(m+" without session", func(t *testing.T) {
			req, _ := http.NewRequest(m, b.URL, nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
				t.Fatalf("status %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
			}
		})
	}
	if n := b.Reg.Len(); n != 0 {
		t.Fatalf("stateless requests started %d sessions", n)
	}
}

// server/discover is answered by the bridge for children of both eras.
func TestStatelessDiscover(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy, pool.EraAuto} {
		t.Run(era.String(), func(t *testing.T) {
			b, p := startStateless(t, pool.Options{Era: era}, bridge.Options{})
			resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{`+modernMeta+`}}`, statelessHeaders("server/discover", ""))
			body := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var d struct {
				ResultType        string          `json:"resultType"`
				SupportedVersions []string        `json:"supportedVersions"`
				Capabilities      map[string]any  `json:"capabilities"`
				TTL               *int64          `json:"ttlMs"`
				CacheScope        string          `json:"cacheScope"`
				Meta              json.RawMessage `json:"_meta"`
			}
			a := decodeAnswer(t, body)
			raw, _ := json.Marshal(a.Result)
			_ = json.Unmarshal(raw, &d)
			if d.ResultType != "complete" || strings.Join(d.SupportedVersions, ",") != "2026-07-28,2025-11-25,2025-06-18,2025-03-26" ||
				d.Capabilities["tools"] == nil || d.TTL == nil || d.CacheScope != "public" || !strings.Contains(string(d.Meta), "bridge-test-child") {
				t.Fatalf("discover result %s", raw)
			}
			if e, _ := p.Era(ctxT(t)); era == pool.EraAuto && e != pool.EraModern {
				t.Fatalf("the probe found %v; the Go SDK v1.8 child is modern", e)
			}
		})
	}
}

// The Go SDK v1.8 client with default options speaks 2026-07-28 to the
// bridge, in front of children of both eras.
func TestStatelessSDKClient(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			b, _ := startStateless(t, pool.Options{Era: era}, bridge.Options{})
			progress := make(chan float64, 10)
			cs := connect(t, b.URL, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					progress <- r.Params.Progress
				},
			})
			if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
				t.Fatalf("negotiated %q, want 2026-07-28", v)
			}
			tools, err := cs.ListTools(ctxT(t), nil)
			if err != nil || len(tools.Tools) < 5 {
				t.Fatalf("tools/list: %v %v", tools, err)
			}
			res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
			if err != nil || res.Content[0].(*mcp.TextContent).Text != "hi" {
				t.Fatalf("echo: %v %v", res, err)
			}
			params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 3}}
			params.SetProgressToken("p1")
			res, err = cs.CallTool(ctxT(t), params)
			if err != nil || res.Content[0].(*mcp.TextContent).Text != "sent 3" {
				t.Fatalf("progress: %v %v", res, err)
			}
			for i := range 3 {
				select {
				case v := <-progress:
					if v != float64(i+1) {
						t.Fatalf("progress %d is %v", i, v)
					}
				case <-ctxT(t).Done():
					t.Fatalf("%d progress notifications of 3", i)
				}
			}
			if b.Reg.Len() != 0 {
				t.Fatal("a stateless client started a session")
			}
		})
	}
}

// A legacy child's elicitation and sampling in the middle of a call reach
// the Go SDK client as MRTR rounds: InputRequiredResult, then a retry with
// inputResponses, which the parked call gets as its answers.
func TestStatelessMRTR(t *testing.T) {
	b, p := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{})
	asked := make(chan string, 4)
	cs := connect(t, b.URL, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- "elicit: " + r.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "octocat"}}, nil
		},
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			asked <- "sample"
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "Paris"}}, nil
		},
	})
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q", v)
	}
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"text": "who?"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "accept: octocat" {
		t.Fatalf("elicit: %+v %v", res, err)
	}
	if got := <-asked; got != "elicit: who?" {
		t.Fatalf("the client was asked %q", got)
	}
	res, err = cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "capital?"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "sampled: Paris" {
		t.Fatalf("sample: %+v %v", res, err)
	}
	if s := p.Stats(); s.Parked != 0 {
		t.Fatalf("%d calls still parked", s.Parked)
	}
}

// Several clients whose calls ask at the same time each get their own
// answers: a call that may ask holds its child.
func TestStatelessMRTRConcurrent(t *testing.T) {
	b, p := startStateless(t, pool.Options{Era: pool.EraLegacy, Max: 3}, bridge.Options{})
	const clients = 6
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			name := "client-" + string(rune('a'+i))
			c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": r.Params.Message}}, nil
				},
			})
			cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL}, nil)
			if err != nil {
				errs <- err
				return
			}
			defer cs.Close()
			for range 3 {
				res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"text": name}})
				if err != nil {
					errs <- err
					return
				}
				if got := res.Content[0].(*mcp.TextContent).Text; got != "accept: "+name {
					errs <- &mismatch{got, name}
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Children > 3 || s.Parked != 0 {
		t.Fatalf("stats %+v", s)
	}
}

type mismatch struct{ got, want string }

func (m *mismatch) Error() string { return "got " + m.got + ", want the answer for " + m.want }

// elicitCall is a raw tools/call of the child's elicit tool, with a
// requestState and inputResponses when given.
func elicitCall(id int, text, state, responses string) string {
	extra := ""
	if state != "" {
		extra = `,"requestState":` + strconvQuote(state) + `,"inputResponses":` + responses
	}
	return `{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"` + text + `"},` + modernMeta + extra + `}}`
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
func itoa(i int) string            { b, _ := json.Marshal(i); return string(b) }

// postAnswer posts and decodes one JSON answer.
func postAnswer(t *testing.T, url, body string, h map[string]string) (int, rpcAnswer) {
	t.Helper()
	resp := rawPost(t, url, body, h)
	s := readAll(t, resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q: %s", ct, s)
	}
	return resp.StatusCode, decodeAnswer(t, s)
}

// firstRound starts an elicit call and returns its requestState.
func firstRound(t *testing.T, url string, h map[string]string) string {
	t.Helper()
	status, a := postAnswer(t, url, elicitCall(1, "who?", "", ""), h)
	var state string
	var reqs map[string]struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(a.Result["requestState"], &state)
	_ = json.Unmarshal(a.Result["inputRequests"], &reqs)
	if status != 200 || string(a.Result["resultType"]) != `"input_required"` || state == "" || reqs["input-1"].Method != "elicitation/create" {
		t.Fatalf("first round: %d %+v", status, a)
	}
	return state
}

// requestState is attacker-controlled: each attack is refused with a clear
// error, and the parked call still completes for its rightful retry.
func TestStatelessRequestStateAttacks(t *testing.T) {
	b, p := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{AuthTokens: []string{"token-a", "token-b"}})
	asA := statelessHeaders("tools/call", "elicit")
	asA["Authorization"] = "Bearer token-a"
	asB := statelessHeaders("tools/call", "elicit")
	asB["Authorization"] = "Bearer token-b"
	state := firstRound(t, b.URL, asA)
	answer := `{"input-1":{"action":"accept","content":{"name":"octocat"}}}`
	// One character of the signed payload changed for another valid one:
	// still well-formed, no longer what was signed.
	tampered := []byte(state)
	if i := len("mcpb1.") + 5; tampered[i] == 'A' {
		tampered[i] = 'B'
	} else {
		tampered[i] = 'A'
	}
	attacks := []struct {
		name, body string
		h          map[string]string
		says       string
	}{
		{"tampered", elicitCall(2, "who?", string(tampered), answer), asA, "failed verification"},
		{"not ours", elicitCall(2, "who?", "opaque-blob", answer), asA, "not one this bridge issued"},
		{"another principal", elicitCall(2, "who?", state, answer), asB, "another principal"},
		{"other params", elicitCall(2, "whom?", state, answer), asA, "another request"},
		{"other method", strings.Replace(strings.Replace(elicitCall(2, "who?", state, answer), `"tools/call"`, `"prompts/get"`, 1), `"name":"elicit"`, `"name":"elicit"`, 1),
			map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "prompts/get", "Mcp-Name": "elicit", "Authorization": "Bearer token-a"}, "another request"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			status, ans := postAnswer(t, b.URL, a.body, a.h)
			if status != 200 || ans.Error == nil || ans.Error.Code != -32602 || !strings.Contains(ans.Error.Message, a.says) {
				t.Fatalf("%d %+v, want -32602 saying %q", status, ans.Error, a.says)
			}
		})
	}
	// The rightful retry completes the call, once.
	status, ans := postAnswer(t, b.URL, elicitCall(3, "who?", state, answer), asA)
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	_ = json.Unmarshal(ans.Result["content"], &res.Content)
	if status != 200 || ans.Error != nil || len(res.Content) != 1 || res.Content[0].Text != "accept: octocat" || string(ans.ID) != "3" {
		t.Fatalf("rightful retry: %d %+v", status, ans)
	}
	t.Run("replayed", func(t *testing.T) {
		_, ans := postAnswer(t, b.URL, elicitCall(4, "who?", state, answer), asA)
		if ans.Error == nil || ans.Error.Code != -32602 || !strings.Contains(ans.Error.Message, "has ended") {
			t.Fatalf("replay: %+v", ans.Error)
		}
	})
	if s := p.Stats(); s.Parked != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// An expired requestState is refused, and the parked call it named was
// cancelled and its child freed.
func TestStatelessRequestStateExpired(t *testing.T) {
	b, p := startStateless(t, pool.Options{Era: pool.EraLegacy, StateTTL: time.Nanosecond}, bridge.Options{})
	h := statelessHeaders("tools/call", "elicit")
	state := firstRound(t, b.URL, h)
	_, ans := postAnswer(t, b.URL, elicitCall(2, "who?", state, `{"input-1":{"action":"accept","content":{"name":"x"}}}`), h)
	if ans.Error == nil || ans.Error.Code != -32602 || !strings.Contains(ans.Error.Message, "expired") {
		t.Fatalf("expired state: %+v", ans.Error)
	}
	// The expired call's child was freed (or replaced): the next call asks again.
	firstRound(t, b.URL, h)
	if s := p.Stats(); s.Children > 2 {
		t.Fatalf("stats %+v", s)
	}
}

// A child asking for an input the client did not declare gets the client
// a MissingRequiredClientCapabilityError (-32021, 400) naming it.
func TestStatelessUndeclaredInput(t *testing.T) {
	b, _ := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{})
	body := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sample","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	status, ans := postAnswer(t, b.URL, body, statelessHeaders("tools/call", "sample"))
	if status != 400 || ans.Error == nil || ans.Error.Code != pool.CodeMissingRequiredClientCapability || !strings.Contains(string(ans.Error.Data), `"sampling"`) {
		t.Fatalf("%d %+v", status, ans.Error)
	}
}

// cancelRecorder records the notifications/cancelled the bridge sends its
// children, at the interception point of peer.
type cancelRecorder struct{ ids chan string }

func (r *cancelRecorder) intercept(next peer.Handler) peer.Handler {
	return func(m *peer.Message) error {
		if m.Dir == peer.ToChild && m.Method == "notifications/cancelled" {
			r.ids <- string(m.Env.RequestID)
		}
		return next(m)
	}
}

// Closing the response stream cancels the request: the child gets
// notifications/cancelled for it ("Closing the SSE response stream MUST be
// treated by the server as cancellation of that request").
func TestStatelessCancelByClosing(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			rec := &cancelRecorder{ids: make(chan string, 4)}
			b, p := startStateless(t, pool.Options{Era: era, Peer: peer.Options{Intercept: rec.intercept}}, bridge.Options{})
			body := `{"jsonrpc":"2.0","id":"w1","method":"tools/call","params":{"name":"wait","arguments":{},` +
				strings.Replace(modernMeta, `"_meta":{`, `"_meta":{"progressToken":"tok",`, 1) + `}}`
			ctx, cancel := context.WithCancel(ctxT(t))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, strings.NewReader(body))
			for k, v := range statelessHeaders("tools/call", "wait") {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// The progress notification opened an SSE stream: the call runs.
			buf := make([]byte, 256)
			n, err := resp.Body.Read(buf)
			if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(string(buf[:n]), "notifications/progress") {
				t.Fatalf("%s %q %v", resp.Header.Get("Content-Type"), buf[:n], err)
			}
			cancel()
			resp.Body.Close()
			if got := <-rec.ids; got != `s"w1"` && got != "sw1" {
				t.Fatalf("cancelled %q", got)
			}
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A legacy child's results are decorated as revision 2026-07-28 wants them,
// and its retired error codes rewritten.
func TestStatelessLegacyResults(t *testing.T) {
	b, _ := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{})
	status, a := postAnswer(t, b.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+modernMeta+`}}`, statelessHeaders("tools/list", ""))
	if status != 200 || string(a.Result["resultType"]) != `"complete"` || string(a.Result["ttlMs"]) != "0" ||
		string(a.Result["cacheScope"]) != `"public"` || !strings.Contains(string(a.Result["_meta"]), `"io.modelcontextprotocol/serverInfo":{"name":"bridge-test-child"`) {
		t.Fatalf("tools/list: %d %+v", status, a)
	}
	status, a = postAnswer(t, b.URL, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///nope",`+modernMeta+`}}`, statelessHeaders("resources/read", "file:///nope"))
	if a.Error == nil || a.Error.Code != -32602 {
		t.Fatalf("resources/read of a missing resource: %d %+v", status, a.Error)
	}
	status, a = postAnswer(t, b.URL, `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{`+modernMeta+`}}`, statelessHeaders("tasks/get", ""))
	if status != 404 || a.Error == nil || a.Error.Code != -32601 {
		t.Fatalf("unknown method on a legacy child: %d %+v", status, a.Error)
	}
}

// legacyOnly is a wrapper that makes the test child behave like a legacy
// server that exits on any request before initialize (as some do): it
// reads the first line, and passes it and the rest on only if it is
// initialize.
const legacyOnly = `IFS= read -r line || exit 0
case "$line" in *'"initialize"'*) ;; *) echo "legacy-only: exiting on a request before initialize" >&2; exit 1;; esac
{ printf '%s\n' "$line"; cat; } | "$0"`

// The era probe runs on a throwaway process: a legacy server that exits
// on server/discover is found legacy, and served through initialized
// children.
func TestStatelessProbeLegacy(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var launches []string
	local := sandbox.NewLocal(&sandbox.LocalOptions{
		Command: "/bin/sh", Args: []string{"-c", legacyOnly, exe},
		Env:       append(os.Environ(), childEnv+"=server"),
		StopGrace: 2 * time.Second,
		Logger:    slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	b, p := startStateless(t, pool.Options{Launch: func(ctx context.Context, name string) (peer.Process, error) {
		mu.Lock()
		launches = append(launches, name)
		mu.Unlock()
		return local.Launch(ctx, name)
	}}, bridge.Options{})
	cs := connect(t, b.URL, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q", v)
	}
	if e, _ := p.Era(ctxT(t)); e != pool.EraLegacy {
		t.Fatalf("era %v", e)
	}
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "legacy"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "legacy" {
		t.Fatalf("echo: %v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(launches) < 2 || launches[0] != "era-probe" {
		t.Fatalf("launches %v: the probe must run on a process of its own", launches)
	}
}

// A quiet subscriptions/listen stream gets SSE comments as keep-alives,
// after its acknowledgment; closing it ends the subscription.
func TestStatelessListenKeepAlive(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			b, p := startStateless(t, pool.Options{Era: era, KeepAlive: time.Millisecond}, bridge.Options{})
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			body := `{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + modernMeta + `}}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, strings.NewReader(body))
			for k, v := range statelessHeaders("subscriptions/listen", "") {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			var ack, comment bool
			for !ack || !comment {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended: %v (ack %v, comment %v)", err, ack, comment)
				}
				switch {
				case strings.HasPrefix(line, "data: ") && strings.Contains(line, "notifications/subscriptions/acknowledged"):
					if !strings.Contains(line, `"io.modelcontextprotocol/subscriptionId":"L1"`) || comment {
						t.Fatalf("acknowledgment %q (after a comment: %v)", line, comment)
					}
					ack = true
				case line == ":\n":
					comment = true
				}
			}
			cancel()
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A legacy child's log message reaches the call that asked for logs with
// io.modelcontextprotocol/logLevel, on its response stream, and no other.
func TestStatelessLegacyLogs(t *testing.T) {
	b, _ := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{})
	call := func(level string) []sseEvent {
		meta := modernMeta
		if level != "" {
			meta = strings.Replace(meta, `"_meta":{`, `"_meta":{"io.modelcontextprotocol/logLevel":"`+level+`",`, 1)
		}
		resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"log","arguments":{"text":"careful"},`+meta+`}}`, statelessHeaders("tools/call", "log"))
		if resp.Header.Get("Content-Type") == "application/json" {
			return []sseEvent{{Data: readAll(t, resp.Body)}}
		}
		return readEvents(t, resp.Body)
	}
	evs := call("info")
	if len(evs) != 2 || !strings.Contains(evs[0].Data, `"notifications/message"`) || !strings.Contains(evs[0].Data, "careful") || !strings.Contains(evs[1].Data, `"logged"`) {
		t.Fatalf("with a log level: %+v", evs)
	}
	if evs := call(""); len(evs) != 1 || !strings.Contains(evs[0].Data, `"logged"`) {
		t.Fatalf("without a log level: %+v", evs)
	}
}

// Legacy children are never shared across principals, and --pool-max
// bounds them all: an idle child of one principal makes room for another's.
func TestStatelessPrincipals(t *testing.T) {
	b, p := startStateless(t, pool.Options{Era: pool.EraLegacy, Max: 2}, bridge.Options{AuthTokens: []string{"tok-a", "tok-b", "tok-c"}})
	pid := func(tok string) string {
		h := statelessHeaders("tools/call", "pid")
		h["Authorization"] = "Bearer " + tok
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pid","arguments":{},` + modernMeta + `}}`
		status, a := postAnswer(t, b.URL, body, h)
		var sc struct{ PID int }
		if status != 200 || a.Error != nil || json.Unmarshal(a.Result["structuredContent"], &sc) != nil || sc.PID == 0 {
			t.Fatalf("pid for %s: %d %+v", tok, status, a)
		}
		return itoa(sc.PID)
	}
	a1, b1 := pid("tok-a"), pid("tok-b")
	if a1 == b1 {
		t.Fatal("two principals shared a legacy child")
	}
	if a2 := pid("tok-a"); a2 != a1 {
		t.Fatalf("principal a moved from child %s to %s with no reason", a1, a2)
	}
	c1 := pid("tok-c")
	if c1 == a1 || c1 == b1 {
		t.Fatal("a third principal got another's child")
	}
	if s := p.Stats(); s.Children > 2 {
		t.Fatalf("%d children, --pool-max 2", s.Children)
	}
}

// A stateless answer carries one Date header, the time of the answer as
// net/http would write it (the front end writes its own, formatted once a
// second).
func TestStatelessDateHeader(t *testing.T) {
	b, _ := startStateless(t, pool.Options{Era: pool.EraModern}, bridge.Options{})
	echo := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` + modernMeta + `}}`
	for i := range 3 {
		before := time.Now().Truncate(time.Second)
		resp := rawPost(t, b.URL, echo, statelessHeaders("tools/call", "echo"))
		body := readAll(t, resp.Body)
		after := time.Now()
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: status %d: %s", i, resp.StatusCode, body)
		}
		checkDate(t, fmt.Sprintf("call %d", i), resp.Header, before, after)
	}
}

// TestSessionDateHeader: the answers of a 2025 session, as an SSE stream
// or as one JSON body, carry one Date in net/http's form, of the time of
// the answer, as the stateless ones do (the handler sets it, not net/http).
func TestSessionDateHeader(t *testing.T) {
	for _, tc := range answerForms {
		t.Run(tc.name, func(t *testing.T) {
			br := startBridge(t, bridgeConfig{bridge: bridge.Options{JSONResponse: tc.json}})
			c := rsOpen(t, br.URL, "2025-11-25")
			for i := range 3 {
				before := time.Now().Truncate(time.Second)
				resp := c.post(ctxT(t), `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+1)+
					`,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
				body := readAll(t, resp.Body)
				after := time.Now()
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tc.ctype {
					t.Fatalf("call %d: %s %s: %s", i, resp.Status, resp.Header.Get("Content-Type"), body)
				}
				checkDate(t, fmt.Sprintf("call %d", i), resp.Header, before, after)
			}
		})
	}
}

// checkDate fails unless hd has one Date header, in net/http's form, of a
// time in [before, after].
func checkDate(t *testing.T, what string, hd http.Header, before, after time.Time) {
	t.Helper()
	dates := hd.Values("Date")
	if len(dates) != 1 {
		t.Fatalf("%s: Date headers %q, want one", what, dates)
	}
	at, err := http.ParseTime(dates[0])
	if err != nil || at.UTC().Format(http.TimeFormat) != dates[0] {
		t.Fatalf("%s: Date %q is not in net/http's form (%s, %v)", what, dates[0], http.TimeFormat, err)
	}
	if at.Before(before) || at.After(after) {
		t.Fatalf("%s: Date %q, want a time in [%v, %v]", what, dates[0], before.UTC(), after.UTC())
	}
}

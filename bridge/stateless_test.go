package bridge_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
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
	po.Launch = func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) }
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
		{"_meta version differs", strings.Replace(list, `"2026-07-28"`, `"2026-01-01"`, 1), statelessHeaders("tools/list", ""), 400, pool.CodeHeaderMismatch, "does not match"},
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

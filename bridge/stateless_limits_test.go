package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// The request timeout holds for revision 2026-07-28 clients as it does for
// sessions: a call the child does not answer in time gets -32001 (the code
// the 2025 path answers with), and the child gets notifications/cancelled
// for it. The wait tool blocks until cancelled: without the timeout, the
// call would wait as long as the client does.
func TestStatelessRequestTimeout(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			rec := &cancelRecorder{ids: make(chan string, 4)}
			b, p := startStateless(t, pool.Options{Era: era, Peer: peer.Options{Intercept: rec.intercept},
				Limits: peer.Limits{RequestTimeout: 300 * time.Millisecond}}, bridge.Options{})
			cs := sdkClient(t, b.URL)
			ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
			defer cancel()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{}})
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != peer.CodeRequestTimeout || !strings.Contains(rpcErr.Message, "--request-timeout") {
				t.Fatalf("a call the MCP server never answers: %v, want error %d naming --request-timeout", err, peer.CodeRequestTimeout)
			}
			select {
			case <-rec.ids:
			case <-ctxT(t).Done():
				t.Fatal("the MCP server was never told of the cancellation")
			}
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// postWaiting posts a wait call with a progress token and returns once its
// SSE stream has the call's progress: the call is in flight on its child.
func postWaiting(t *testing.T, ctx context.Context, url, id string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"wait","arguments":{},` +
		strings.Replace(modernMeta, `"_meta":{`, `"_meta":{"progressToken":"`+id+`",`, 1) + `}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	for k, v := range statelessHeaders("tools/call", "wait") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := resp.Body.Read(buf)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(buf[:n]), "notifications/progress") {
		t.Fatalf("%s %q %v", resp.Status, buf[:n], err)
	}
	return resp
}

// The bound on requests in flight holds for revision 2026-07-28 clients
// with the status and code a session's client gets beyond
// --max-requests-per-session: 429, Retry-After and a JSON-RPC error. A
// pool of one child admits what one session does.
func TestStatelessInflightBound(t *testing.T) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			b, p := startStateless(t, pool.Options{Era: era, Max: 1, Limits: peer.Limits{MaxRequests: 1}}, bridge.Options{})
			ctx, cancel := context.WithCancel(ctxT(t))
			first := postWaiting(t, ctx, b.URL, "w1")
			resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},`+modernMeta+`}}`,
				statelessHeaders("tools/call", "echo"))
			ans := decodeAnswer(t, readAll(t, resp.Body))
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || ans.Error == nil ||
				ans.Error.Code != -32000 || !strings.Contains(ans.Error.Message, "--max-requests-per-session") {
				t.Fatalf("a request beyond the bound: %s Retry-After %q %+v, want 429 with Retry-After and a JSON-RPC error", resp.Status, resp.Header.Get("Retry-After"), ans.Error)
			}
			cancel()
			first.Body.Close()
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			// Once the call is over, the next gets through.
			resp = rawPost(t, b.URL, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},`+modernMeta+`}}`,
				statelessHeaders("tools/call", "echo"))
			if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || decodeAnswer(t, body).Error != nil {
				t.Fatalf("after the call: %s %s", resp.Status, body)
			}
		})
	}
}

// The bound on bytes waiting for a child's stdin holds for revision
// 2026-07-28 clients with the status a session's client gets beyond
// --max-queued-bytes: 503, Retry-After and a JSON-RPC error. The child is
// a real process that never reads its stdin (sleep, as a modern child:
// nothing is written to it before the calls); each call (a prompts/list: no
// parameter headers to learn first) is larger than a pipe holds, so the first written blocks and the other is refused.
func TestStatelessQueuedBytes(t *testing.T) {
	b, p := startStatelessCommand(t, []string{"sleep", "3600"}, pool.Options{Era: pool.EraModern, Min: -1, Max: 1,
		Limits: peer.Limits{MaxQueuedBytes: 1024}})
	ctx, cancel := context.WithTimeout(ctxT(t), 15*time.Second)
	defer cancel()
	big := strings.Repeat("y", 256<<10)
	type result struct {
		status int
		retry  string
		ans    rpcAnswer
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"jsonrpc":"2.0","id":` + itoa(i) + `,"method":"prompts/list","params":{"cursor":"` + big + `",` + modernMeta + `}}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, strings.NewReader(body))
			for k, v := range statelessHeaders("prompts/list", "") {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Logf("call %d: %v", i, err) // the one written, when the test ends
				return
			}
			defer resp.Body.Close()
			var sb strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				sb.Write(buf[:n])
				if err != nil {
					break
				}
			}
			var a rpcAnswer
			_ = json.Unmarshal([]byte(sb.String()), &a) // no Error fails the test
			results <- result{resp.StatusCode, resp.Header.Get("Retry-After"), a}
		}()
	}
	select {
	case r := <-results:
		if r.status != http.StatusServiceUnavailable || r.retry == "" || r.ans.Error == nil || r.ans.Error.Code != -32000 ||
			!strings.Contains(r.ans.Error.Message, "--max-queued-bytes") {
			t.Fatalf("a call while another waits for the child's stdin: %d Retry-After %q %+v, want 503 with Retry-After and a JSON-RPC error", r.status, r.retry, r.ans.Error)
		}
	case <-ctx.Done():
		t.Fatalf("neither call was refused (pool %+v)", p.Stats())
	}
	cancel()
	// The call written stays blocked until the pool stops its child (the
	// test's cleanup).
	t.Cleanup(wg.Wait)
	_ = p
}

// --initialize-timeout bounds the initialize the pool sends a legacy
// child (one that never answers it: sleep reads nothing) as it bounds a
// session's: the call fails with an error naming the flag, instead of
// waiting as long as its client does.
func TestStatelessInitializeTimeout(t *testing.T) {
	b, _ := startStatelessCommand(t, []string{"sleep", "3600"}, pool.Options{Era: pool.EraLegacy,
		Limits: peer.Limits{InitializeTimeout: 300 * time.Millisecond, InitializeHint: "run it unbuffered"}})
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list",`+`"params":{`+modernMeta+`}}`))
	for k, v := range statelessHeaders("tools/list", "") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a call whose legacy MCP server never answers initialize: %v, want an error answer", err)
	}
	ans := decodeAnswer(t, readAll(t, resp.Body))
	if resp.StatusCode != http.StatusBadGateway || ans.Error == nil || !strings.Contains(ans.Error.Message, "--initialize-timeout") || !strings.Contains(ans.Error.Message, "run it unbuffered") {
		t.Fatalf("%s %+v, want 502 naming --initialize-timeout, with the hint", resp.Status, ans.Error)
	}
}

package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// sseURL is the legacy SSE endpoint beside a bridge's /mcp.
func sseURL(b *testBridge) string { return strings.TrimSuffix(b.URL, "/mcp") + "/sse" }

// connectSSE starts an SDK client session over the legacy HTTP+SSE
// transport (revision 2024-11-05).
func connectSSE(t testing.TB, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "bridge-sse-client", Version: "1.0.0"}, opts)
	cs, err := c.Connect(ctxT(t), &mcp.SSEClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connecting the SDK's SSE client to the bridge: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// The Go SDK's SSEClientTransport works end to end: tools, and the server's
// requests, progress and logs during a call, all on the one stream.
func TestLegacySSEWithSDKClient(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	progress := make(chan float64, 10)
	cs := connectSSE(t, sseURL(b), &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			in := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: strings.ToUpper(in)}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Progress
		},
	})
	if got := cs.InitializeResult().ServerInfo.Name; got != "bridge-test-child" {
		t.Fatalf("server name = %q", got)
	}
	text := func(res *mcp.CallToolResult, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := text(cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})); got != "hi" {
		t.Fatalf("echo = %q", got)
	}
	if got := text(cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "hello"}})); got != "sampled: HELLO" {
		t.Fatalf("sample = %q", got)
	}
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 3}}
	params.SetProgressToken("tok")
	text(cs.CallTool(ctxT(t), params))
	for want := 1.0; want <= 3; want++ {
		if got := <-progress; got != want {
			t.Fatalf("progress %v, want %v", got, want)
		}
	}
	// Several calls at once: each answer finds its caller on the one stream.
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			s := fmt.Sprint("call-", i)
			res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": s}})
			if err == nil && res.Content[0].(*mcp.TextContent).Text != s {
				err = fmt.Errorf("answer %q to %q", res.Content[0].(*mcp.TextContent).Text, s)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// openSSE opens a legacy stream by hand and returns its endpoint event's
// URL and the reader of the rest.
func openSSE(t *testing.T, url string, hdr map[string]string) (*http.Response, string, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp, "", nil
	}
	br := bufio.NewReader(resp.Body)
	ev, data := readLegacyEvent(t, br)
	if ev != "endpoint" {
		t.Fatalf("first event %q, want endpoint", ev)
	}
	return resp, data, br
}

func readLegacyEvent(t *testing.T, br *bufio.Reader) (event, data string) {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the SSE stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && (event != "" || data != ""):
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// The endpoint event, 202 for a POST, the answer on the stream; bad POSTs
// get the status the edge gives elsewhere; closing the stream ends the
// session and stops its server.
func TestLegacySSERaw(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	base := strings.TrimSuffix(b.URL, "/mcp")
	resp, endpoint, br := openSSE(t, sseURL(b), nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	if !strings.HasPrefix(endpoint, "/message?sessionId=") {
		t.Fatalf("endpoint %q", endpoint)
	}
	msgURL := base + endpoint
	post := func(url, body string) *http.Response {
		return rawPost(t, url, body, map[string]string{"Accept": ""})
	}
	if r := post(msgURL, initBody("2024-11-05")); r.StatusCode != http.StatusAccepted {
		t.Fatalf("initialize: %d %s", r.StatusCode, readAll(t, r.Body))
	}
	if ev, data := readLegacyEvent(t, br); ev != "message" || !strings.Contains(data, `"protocolVersion":"2024-11-05"`) {
		t.Fatalf("answer %q %q", ev, data)
	}
	if b.Reg.Len() != 1 {
		t.Fatalf("%d sessions", b.Reg.Len())
	}
	sid := strings.TrimPrefix(endpoint, "/message?sessionId=")

	for _, c := range []struct {
		name, url, body string
		hdr             map[string]string
		status          int
	}{
		{"no session", base + "/message", `{"jsonrpc":"2.0","method":"x"}`, nil, 400},
		{"unknown session", base + "/message?sessionId=nope", `{"jsonrpc":"2.0","method":"x"}`, nil, 404},
		{"not JSON", msgURL, `{`, nil, 400},
		{"content type", msgURL, `{}`, map[string]string{"Content-Type": "text/plain"}, 415},
		{"origin", msgURL, `{}`, map[string]string{"Origin": "https://evil.example"}, 403},
	} {
		hdr := map[string]string{"Accept": ""}
		for k, v := range c.hdr {
			hdr[k] = v
		}
		r := rawPost(t, c.url, c.body, hdr)
		if r.StatusCode != c.status || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want %d with a JSON-RPC error", c.name, r.StatusCode, r.Header.Get("Content-Type"), c.status)
		}
	}
	// A legacy session is not one of the Streamable HTTP endpoint.
	if r := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, map[string]string{"Mcp-Session-Id": sid}); r.StatusCode != http.StatusNotFound {
		t.Fatalf("legacy session on /mcp: %d, want 404", r.StatusCode)
	}

	sess, err := b.Reg.Get(sid)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-sess.Stopped()
	if !strings.Contains(sess.Err().Error(), bridge.ErrLegacyStreamClosed.Error()) {
		t.Fatalf("ended with %v", sess.Err())
	}
	if r := post(msgURL, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); r.StatusCode != http.StatusNotFound {
		t.Fatalf("POST after the stream closed: %d, want 404", r.StatusCode)
	}
}

// The legacy endpoints pass the same checks as /mcp: Host and auth.
func TestLegacySSEGuarded(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{AuthTokens: []string{"secret"}}})
	if resp, _, _ := openSSE(t, sseURL(b), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", resp.StatusCode)
	}
	resp, endpoint, _ := openSSE(t, sseURL(b), map[string]string{"Authorization": "Bearer secret"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with the token: %d", resp.StatusCode)
	}
	r := rawPost(t, strings.TrimSuffix(b.URL, "/mcp")+endpoint, initBody("2024-11-05"), map[string]string{"Accept": ""})
	if r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without a token: %d", r.StatusCode)
	}
	if b.Reg.Len() != 1 {
		t.Fatalf("%d sessions", b.Reg.Len())
	}

	off := startBridge(t, bridgeConfig{bridge: bridge.Options{NoLegacySSE: true}})
	if resp, _, _ := openSSE(t, sseURL(off), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("NoLegacySSE: GET /sse %d, want 404", resp.StatusCode)
	}
}

// The TypeScript SDK v1's SSEClientTransport against the legacy endpoint,
// with a token (the bridge checks it on the GET and on each POST). Skipped
// when the npm peers are not installed.
func TestLegacySSEWithTSClient(t *testing.T) {
	peers := npmPeers(t)
	node := filepath.Join(peers, "node22")
	if _, err := os.Stat(filepath.Join(peers, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		peersSkipped.Store("no @modelcontextprotocol/sdk in MCP_PEERS_DIR=" + peers)
		t.Skipf("the TypeScript SDK is not installed in %s (MCP_PEERS_DIR)", peers)
	}
	if _, err := exec.LookPath(node); err != nil {
		peersSkipped.Store("no runnable node22 in MCP_PEERS_DIR=" + peers)
		t.Skipf("no Node binary at %s (MCP_PEERS_DIR)", node)
	}
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{AuthTokens: []string{"ts-secret"}}})
	cmd := exec.CommandContext(ctxT(t), node, "testdata/ts_sse_client.cjs", sseURL(b), "ts-secret")
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(peers, "node_modules"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript SSE client failed: %v\n%s", err, stderr.String())
	}
	var got struct {
		Server string
		Tools  []string
		Echo   string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if got.Server != "bridge-test-child" || got.Echo != "from typescript" || !slices.Contains(got.Tools, "sample") {
		t.Fatalf("the TypeScript client saw %+v", got)
	}
}

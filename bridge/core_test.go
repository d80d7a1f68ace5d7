package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/session"
)

func TestHandshakeAndTools(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	cs := connect(t, b.URL, nil)
	if got := cs.InitializeResult().ServerInfo.Name; got != "bridge-test-child" {
		t.Fatalf("server name = %q", got)
	}
	// The SDK client probes with server/discover first (revision
	// 2026-07-28) and must have fallen back to initialize.
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Fatalf("negotiated %q, want 2025-11-25 after the discover fallback", got)
	}
	tools, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) < 5 {
		t.Fatalf("tools/list returned %d tools", len(tools.Tools))
	}
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "hi" {
		t.Fatalf("echo = %q", got)
	}
}

// Every revision the bridge serves works end to end with the SDK client.
func TestOlderRevisions(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(v, func(t *testing.T) {
			c := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, nil)
			cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Fatalf("negotiated %q", got)
			}
			if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": v}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func callCount(t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "count"})
	if err != nil {
		t.Fatal(err)
	}
	var out countResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.Count
}

func childPID(t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "pid"})
	if err != nil {
		t.Fatal(err)
	}
	var out pidResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || out.PID == 0 {
		t.Fatalf("pid tool: %s %v", b, err)
	}
	return out.PID
}

// processGone reports whether no process with this pid exists (it was
// reaped; the bridge's launcher waits for its children).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestSessionsAreIsolated(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	a, c := connect(t, b.URL, nil), connect(t, b.URL, nil)
	if a.ID() == c.ID() || len(a.ID()) < 32 {
		t.Fatalf("session IDs %q and %q", a.ID(), c.ID())
	}
	callCount(t, a)
	if got := callCount(t, a); got != 2 {
		t.Fatalf("second count in session A = %d", got)
	}
	if got := callCount(t, c); got != 1 {
		t.Fatalf("first count in session B = %d: state leaked between sessions", got)
	}
	if childPID(t, a) == childPID(t, c) {
		t.Fatal("two sessions share one child")
	}
}

func TestSamplingElicitationProgressLogging(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	progress := make(chan float64, 10)
	logs := make(chan string, 10)
	cs := connect(t, b.URL, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			in := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: strings.ToUpper(in)}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada:" + req.Params.Message}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Progress
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			logs <- fmt.Sprint(req.Params.Data)
		},
	})
	text := func(res *mcp.CallToolResult, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			t.Fatalf("tool error: %v", res.Content)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := text(cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "hello"}})); got != "sampled: HELLO" {
		t.Fatalf("sample = %q", got)
	}
	if got := text(cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"text": "who?"}})); got != "accept: ada:who?" {
		t.Fatalf("elicit = %q", got)
	}
	if err := cs.SetLoggingLevel(ctxT(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	text(cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"text": "careful"}}))
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 5}}
	params.SetProgressToken("tok-1")
	text(cs.CallTool(ctxT(t), params))
	// The SDK client handles notifications asynchronously: collect them.
	if got := <-logs; got != "careful" {
		t.Fatalf("log = %q", got)
	}
	for want := 1.0; want <= 5; want++ {
		if got := <-progress; got != want {
			t.Fatalf("progress %v, want %v", got, want)
		}
	}
}

// A server message outside any call reaches the client on the GET stream.
func TestStandaloneStream(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	changed := make(chan struct{}, 1)
	cs := connect(t, b.URL, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "changed"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctxT(t).Done():
		t.Fatal("tools/list_changed never reached the client")
	}
}

func TestDeleteStopsChild(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	cs := connect(t, b.URL, nil)
	pid := childPID(t, cs)
	sess, err := b.Reg.Get(cs.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Close(); err != nil { // sends DELETE
		t.Fatal(err)
	}
	<-sess.Stopped()
	if !errors.Is(sess.Err(), session.ErrDeleted) {
		t.Fatalf("session ended with %v", sess.Err())
	}
	if !processGone(pid) {
		t.Fatalf("child %d still exists after DELETE", pid)
	}
	resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": cs.ID()})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("request to a deleted session: %d", resp.StatusCode)
	}
}

func TestIdleTimeoutStopsChild(t *testing.T) {
	b := startBridge(t, bridgeConfig{session: session.Options{IdleTimeout: time.Second}})
	cs := connect(t, b.URL, nil) // holds a GET stream open: that is not activity
	pid := childPID(t, cs)
	sess, err := b.Reg.Get(cs.ID())
	if err != nil {
		t.Fatal(err)
	}
	<-sess.Stopped()
	if !errors.Is(sess.Err(), session.ErrIdle) {
		t.Fatalf("session ended with %v, want idle timeout", sess.Err())
	}
	if !processGone(pid) {
		t.Fatalf("child %d survived the idle timeout", pid)
	}
}

func TestChildCrashMidCall(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	cs := connect(t, b.URL, nil)
	_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "crash"})
	if err == nil {
		t.Fatal("a call whose server crashed succeeded")
	}
	for _, want := range []string{"exited with status 3", "about to crash on purpose"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The bridge lives on.
	cs2 := connect(t, b.URL, nil)
	if got := callCount(t, cs2); got != 1 {
		t.Fatalf("new session after a crash: count = %d", got)
	}
}

// TestChildClosesStdout: a server that closes its stdout but keeps running
// ends its session at once: the call gets an error that says so, and the
// server is stopped.
func TestChildClosesStdout(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	cs := connect(t, b.URL, nil)
	pid := childPID(t, cs)
	sess, err := b.Reg.Get(cs.ID())
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "close-stdout"})
	if err == nil || !strings.Contains(err.Error(), "closed its stdout") {
		t.Fatalf("a call whose server closed its stdout: %v, want an error saying so", err)
	}
	<-sess.Stopped()
	if !errors.Is(sess.Err(), session.ErrStdoutClosed) {
		t.Fatalf("session ended with %v", sess.Err())
	}
	if !processGone(pid) {
		t.Fatalf("child %d still exists after closing its stdout", pid)
	}
}

// TestNotAnMCPServer: `bridge -- cat` echoes initialize and never answers
// it; the initialize timeout ends the session with an error naming the
// process, and cat is stopped.
func TestNotAnMCPServer(t *testing.T) {
	b := startBridge(t, bridgeConfig{command: []string{"cat"}, session: session.Options{InitializeTimeout: time.Second}})
	resp := rawPost(t, b.URL, initBody("2025-06-18"), nil)
	body := readAll(t, resp.Body)
	for _, want := range []string{"did not answer initialize", "pid ", "--initialize-timeout"} {
		if !strings.Contains(body, want) {
			t.Errorf("initialize against cat: %d %s; want it to say %q", resp.StatusCode, body, want)
		}
	}
	if n := b.Reg.Len(); n != 0 {
		t.Fatalf("%d sessions left", n)
	}
}

// TestMaxRequestsPerSession: beyond the cap, a POST gets 429 with a
// JSON-RPC error, and nothing reaches the server.
func TestMaxRequestsPerSession(t *testing.T) {
	b := startBridge(t, bridgeConfig{session: session.Options{MaxRequests: 1}})
	cs, cancel, done := callWait(t, b.URL)
	defer func() { cancel(); <-done }()
	sess, err := b.Reg.Get(cs.ID())
	if err != nil {
		t.Fatal(err)
	}
	resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":99,"method":"tools/list"}`,
		map[string]string{"Mcp-Session-Id": cs.ID(), "MCP-Protocol-Version": sess.ProtocolVersion()})
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "too many requests in flight") {
		t.Fatalf("a request beyond the cap: %d %s", resp.StatusCode, body)
	}
}

func TestChildExitsBeforeInitialize(t *testing.T) {
	b := startBridge(t, bridgeConfig{mode: "exit-early"})
	resp := rawPost(t, b.URL, initBody("2025-11-25"), nil)
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "exited with status 7") || !strings.Contains(body, "exit-early mode") {
		t.Fatalf("initialize against a dying server: %d %s", resp.StatusCode, body)
	}
}

// callWait connects a client and calls the "wait" tool, which runs until
// cancelled; it returns once the server is inside the call. done reports
// how CallTool returned.
func callWait(t *testing.T, url string) (cs *mcp.ClientSession, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	started := make(chan struct{}, 1)
	cs = connect(t, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			started <- struct{}{}
		},
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "wait"}
		params.SetProgressToken("w")
		_, err := cs.CallTool(ctx, params)
		errc <- err
	}()
	<-started // the server is inside the call
	return cs, cancel, errc
}

// Cancelling a call frees its stream: the next call is the single request
// in flight and gets its server messages on its own stream.
func TestCancelledCall(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	cs, cancel, done := callWait(t, b.URL)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call returned %v", err)
	}
	if got := callCount(t, cs); got != 1 {
		t.Fatalf("count after cancel = %d", got)
	}
}

// A stdout line over the message limit costs its request only: that
// request gets a JSON-RPC error naming the limit and the flag, the line is
// skipped, and the session and its server go on; a line
// that is not JSON-RPC is skipped.
func TestServerOutputLimits(t *testing.T) {
	b := startBridge(t, bridgeConfig{session: session.Options{MaxMessageBytes: 8192}})
	cs := connect(t, b.URL, nil)
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "garbage"})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "after garbage" {
		t.Fatalf("a non-JSON line broke the session: %v %v", res, err)
	}
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "big", Arguments: map[string]any{"n": 4000}}); err != nil {
		t.Fatalf("a message under the limit: %v", err)
	}
	before := callText(t, cs, "pid", nil)
	_, err = cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "big", Arguments: map[string]any{"n": 20000}})
	if err == nil || !strings.Contains(err.Error(), "--max-message-bytes") || !strings.Contains(err.Error(), "8192") {
		t.Fatalf("a message over the limit: %v", err)
	}
	if after := callText(t, cs, "pid", nil); after != before {
		t.Fatalf("the server changed: pid %s, then %s", before, after)
	}
	if _, err := b.Reg.Get(cs.ID()); err != nil {
		t.Fatalf("the session ended: %v", err)
	}
}

// session.Options.Inflight hears the count of requests in flight across
// sessions rise to 2 while two calls overlap, and fall back to 0 when both
// ended (the bridge's GOMAXPROCS governor acts on it).
func TestInflightHook(t *testing.T) {
	counts := make(chan int, 1024)
	b := startBridge(t, bridgeConfig{session: session.Options{Inflight: func(n int) { counts <- n }}})
	cs, cancel, done := callWait(t, b.URL)
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	var seen []int
	wait := ctxT(t)
	for two := false; ; {
		select {
		case n := <-counts:
			seen = append(seen, n)
			two = two || n == 2
			if two && n == 0 {
				if slices.Max(seen) != 2 {
					t.Fatalf("counts heard: %v, want a peak of 2", seen)
				}
				return
			}
		case <-wait.Done():
			t.Fatalf("counts heard: %v, want 2 then 0", seen)
		}
	}
}

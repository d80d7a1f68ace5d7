package bridge_test

// The test binary plays the stdio MCP server behind the bridge: TestMain
// re-runs it as a Go SDK server when MCP_BRIDGE_TEST_CHILD is set, the way the
// SDK's own cmd_test.go does. Every test talks to real processes.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Not BRIDGE_*: the bridge never passes those to a server.
const childEnv = "MCP_BRIDGE_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		runChild(mode)
		os.Exit(0)
	}
	goleak.VerifyTestMain(notingM{m})
}

type textArgs struct {
	Text string `json:"text"`
}

type nArgs struct {
	N int `json:"n"`
}

type countResult struct {
	Count int `json:"count"`
}

type pidResult struct {
	PID int `json:"pid"`
}

type instanceResult struct {
	Instance string `json:"instance"`
}

// runChild serves MCP over stdio with tools that exercise every routing
// path of the bridge. mode "server" is well behaved; "exit-early" exits
// before answering initialize.
func runChild(mode string) {
	if mode == "exit-early" {
		fmt.Fprintln(os.Stderr, "child: refusing to start (exit-early mode)")
		os.Exit(7)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "bridge-test-child", Version: "1.0.0"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		return text(a.Text), nil, nil
	})
	count := 0
	mcp.AddTool(server, &mcp.Tool{Name: "count"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, countResult, error) {
		count++
		return nil, countResult{count}, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "pid"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, pidResult, error) {
		return nil, pidResult{os.Getpid()}, nil
	})
	// instance names the bridge instance that started this server
	// (forward_integration_test.go).
	mcp.AddTool(server, &mcp.Tool{Name: "instance"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, instanceResult, error) {
		return nil, instanceResult{os.Getenv(instanceEnv)}, nil
	})
	// progress sends n progress notifications, then answers.
	mcp.AddTool(server, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, a nArgs) (*mcp.CallToolResult, any, error) {
		for i := range a.N {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: float64(a.N),
			}); err != nil {
				return nil, nil, err
			}
		}
		return text(fmt.Sprintf("sent %d", a.N)), nil, nil
	})
	// sample asks the client to sample during the call.
	mcp.AddTool(server, &mcp.Tool{Name: "sample"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			MaxTokens: 10,
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Text}}},
		})
		if err != nil {
			return nil, nil, err
		}
		return text("sampled: " + res.Content.(*mcp.TextContent).Text), nil, nil
	})
	// elicit asks the client for a value during the call.
	mcp.AddTool(server, &mcp.Tool{Name: "elicit"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: a.Text,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
				"name": map[string]any{"type": "string"}}},
		})
		if err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("%s: %v", res.Action, res.Content["name"])), nil, nil
	})
	// elicit-progress asks the client for a value, then reports progress
	// three times (with the call's token) and answers: after an MRTR
	// round, the progress must carry the retry's token.
	mcp.AddTool(server, &mcp.Tool{Name: "elicit-progress"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: a.Text,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
				"name": map[string]any{"type": "string"}}},
		})
		if err != nil {
			return nil, nil, err
		}
		if tok := req.Params.GetProgressToken(); tok != nil {
			for i := range 3 {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1), Total: 3}); err != nil {
					return nil, nil, err
				}
			}
		}
		return text(fmt.Sprintf("%s: %v", res.Action, res.Content["name"])), nil, nil
	})
	// log sends a log notification during the call.
	mcp.AddTool(server, &mcp.Tool{Name: "log"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: a.Text}); err != nil {
			return nil, nil, err
		}
		return text("logged"), nil, nil
	})
	// crash writes to stderr and exits in the middle of the call.
	mcp.AddTool(server, &mcp.Tool{Name: "crash"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "child: about to crash on purpose")
		os.Exit(3)
		return nil, nil, nil
	})
	// close-stdout closes the server's stdout in the middle of the call and
	// keeps running: it can answer nothing more.
	mcp.AddTool(server, &mcp.Tool{Name: "close-stdout"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		os.Stdout.Close()
		<-ctx.Done()
		time.Sleep(time.Hour) // until stopped
		return nil, nil, nil
	})
	// garbage writes a line that is not JSON-RPC to stdout (one write, so
	// it cannot interleave with the SDK's own lines), then answers.
	mcp.AddTool(server, &mcp.Tool{Name: "garbage"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		os.Stdout.Write([]byte("this line is not JSON-RPC\n"))
		return text("after garbage"), nil, nil
	})
	// big answers with n bytes of text.
	mcp.AddTool(server, &mcp.Tool{Name: "big"}, func(_ context.Context, _ *mcp.CallToolRequest, a nArgs) (*mcp.CallToolResult, any, error) {
		return text(strings.Repeat("x", a.N)), nil, nil
	})
	// wait reports progress 0 (when given a token), then blocks until
	// cancelled (the client's notifications/cancelled).
	mcp.AddTool(server, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok})
		}
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	// changed announces a tool list change outside any call after the
	// call returns: it reaches the client on the standalone stream.
	mcp.AddTool(server, &mcp.Tool{Name: "changed"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		go func() {
			mcp.AddTool(server, &mcp.Tool{Name: fmt.Sprintf("added-%d", time.Now().UnixNano())},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return text("new"), nil, nil
				})
		}()
		return text("changing"), nil, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
}

// testBridge is a bridge in front of the test binary as child.
type testBridge struct {
	URL     string
	Reg     *session.Registry
	Handler *bridge.Handler
	srv     *httptest.Server
}

type bridgeConfig struct {
	mode    string // child mode; "" means "server"
	command []string
	session session.Options
	bridge  bridge.Options
	// server, if set, adjusts the HTTP server before it starts (its
	// listener, its ConnState hook).
	server func(*httptest.Server)
}

// startBridge starts a bridge on a loopback port; it is shut down at the
// end of the test, and the test fails if a child process survives.
func startBridge(t testing.TB, cfg bridgeConfig) *testBridge {
	t.Helper()
	if cfg.mode == "" {
		cfg.mode = "server"
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lo := &sandbox.LocalOptions{
		Command:   exe,
		Env:       append(os.Environ(), childEnv+"="+cfg.mode),
		StopGrace: 2 * time.Second,
		Logger:    logger,
	}
	if len(cfg.command) > 0 {
		lo.Command, lo.Args, lo.Env = cfg.command[0], cfg.command[1:], nil
	}
	so := cfg.session
	so.Launcher = session.LauncherOf(sandbox.NewLocal(lo))
	so.Logger = logger
	reg := session.NewRegistry(&so)
	bo := cfg.bridge
	bo.Logger = logger
	h := bridge.NewHandler(reg, &bo)
	srv := httptest.NewUnstartedServer(h)
	if cfg.server != nil {
		cfg.server(srv)
	}
	srv.Start()
	tb := &testBridge{URL: srv.URL + h.Path(), Reg: reg, Handler: h, srv: srv}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the registry: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
	})
	return tb
}

// testWriter sends logs to t.Log, and drops them once the test is over.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// connect starts an SDK client session against the bridge.
func connect(t testing.TB, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "bridge-test-client", Version: "1.0.0"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connecting the SDK client to the bridge: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawPost posts a body with the given headers and returns the response.
func rawPost(t testing.TB, url string, body string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sseEvent is one event of an SSE stream.
type sseEvent struct {
	ID, Data, Retry string
}

// readEvents reads SSE events until the body ends; it is deliberately
// independent of the bridge's writer.
func readEvents(t testing.TB, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	var has bool
	for _, line := range strings.Split(readAll(t, body), "\n") {
		if line == "" {
			if has {
				out = append(out, cur)
			}
			cur, has = sseEvent{}, false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		has = true
		switch field {
		case "id":
			cur.ID = value
		case "data":
			cur.Data = value
		case "retry":
			cur.Retry = value
		}
	}
	return out
}

// rawSession initializes a session by hand and returns its ID.
func rawSession(t testing.TB, url, version string) string {
	t.Helper()
	resp := rawPost(t, url, initBody(version), map[string]string{"MCP-Protocol-Version": ""})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %d %s", resp.StatusCode, readAll(t, resp.Body))
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	evs := readEvents(t, resp.Body)
	if len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Data, `"result"`) {
		t.Fatalf("initialize answered %+v", evs)
	}
	resp = rawPost(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": version})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", resp.StatusCode)
	}
	return sid
}

func initBody(version string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version +
		`","capabilities":{"sampling":{},"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`
}

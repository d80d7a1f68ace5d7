package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// The test binary plays the stdio MCP server (a Go SDK server) when
// childEnv is set.
const childEnv = "ENDPOINT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// runChild serves tool "wait", which connects to the test at addr (so the
// test knows the call runs on its child) and answers once the test closes
// that connection.
func runChild() {
	server := mcp.NewServer(&mcp.Implementation{Name: "endpoint-test-child", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
		Addr string `json:"addr"`
	}) (*mcp.CallToolResult, any, error) {
		c, err := net.Dial("tcp", a.Addr)
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newEndpoint builds an endpoint at /mcp on test children and serves it.
func newEndpoint(t *testing.T) (*endpoint.Endpoint, string) {
	t.Helper()
	released := false
	e := build(t, "/mcp", func() error { released = true; return nil })
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
		if !released {
			t.Error("Close did not release what the caller built for the server")
		}
	})
	return e, srv.URL + "/mcp"
}

// build builds an endpoint at path on test children.
func build(t *testing.T, path string, release func() error) *endpoint.Endpoint {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), childEnv+"=1"),
		StopGrace: 2 * time.Second, Logger: logger})
	e, err := endpoint.New(&endpoint.Options{
		Session: &session.Options{Launcher: session.LauncherOf(local), Logger: logger},
		Pool: &pool.Options{
			Launch:        func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) },
			Era:           pool.EraLegacy,
			OtherVersions: bridge.SessionVersions(),
			Logger:        logger,
		},
		Handler: &bridge.Options{Path: path, Logger: logger},
		Release: release,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// startCall starts a 2026-07-28 client's call of tool wait and returns
// once it runs on its child: closing the returned connection lets the
// child answer, which the returned channel then carries.
func startCall(t *testing.T, ctx context.Context, url string) (net.Conn, <-chan error) {
	t.Helper()
	return startCallIn(t, ctx, url, "2026-07-28")
}

// startCallIn is startCall in a protocol revision: 2026-07-28 is the
// client's default (server/discover first), an earlier one a session.
func startCallIn(t *testing.T, ctx context.Context, url, version string) (net.Conn, <-chan error) {
	t.Helper()
	var opts *mcp.ClientSessionOptions
	if version != "2026-07-28" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "endpoint-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != version {
		t.Fatalf("negotiated %q, want %s", v, version)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"addr": ln.Addr().String()}})
		if err == nil && (res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != "done") {
			err = &callError{res}
		}
		done <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, done
}

type callError struct{ res *mcp.CallToolResult }

func (e *callError) Error() string { return "unexpected result" }

// busy reports whether WaitIdle would wait: with a context already done,
// it returns nil only if nothing is in flight.
func busy(e *endpoint.Endpoint) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return e.WaitIdle(ctx) != nil
}

// A 2026-07-28 call in flight at shutdown completes within the grace:
// WaitIdle waits for it (it waited for sessions only), and Close after
// WaitIdle cuts nothing.
func TestShutdownWaitsForStatelessCall(t *testing.T) {
	e, url := newEndpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, done := startCall(t, ctx, url)
	e.Drain()
	if !busy(e) {
		t.Fatal("WaitIdle returns with a 2026-07-28 call in flight")
	}
	c.Close()
	if err := e.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at shutdown: %v, want its answer", err)
	}
}

// A reload that removes or replaces the server retires its endpoint: a
// 2026-07-28 call in flight completes within the grace, while new calls
// get 503 with Retry-After (the pool refuses them: they do not prolong
// the drain, and the client sends them again to the new server).
func TestRetireWaitsForStatelessCall(t *testing.T) {
	e, url := newEndpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, done := startCall(t, ctx, url)
	e.Retire()
	body := newCall
	if resp := post(t, url, body); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a new call after Retire: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if !busy(e) {
		t.Fatal("WaitIdle returns with a 2026-07-28 call in flight")
	}
	c.Close()
	if err := e.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at retire: %v, want its answer", err)
	}
}

const newCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"wait","arguments":{"addr":"127.0.0.1:1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`

// post sends a 2026-07-28 call of tool wait.
func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "wait")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

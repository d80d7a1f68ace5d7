package affinity_test

// Two real bridges (bridge.NewHandler over session.NewRegistry over
// sandbox.NewLocal) behind a round-robin proxy, with the official Go SDK as
// client and the test binary as the stdio MCP server: TestMain re-runs it as
// an SDK server when childEnv is set.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

const (
	childEnv    = "AFFINITY_TEST_CHILD"
	instanceEnv = "AFFINITY_TEST_INSTANCE"
	token       = "test-token-0123456789"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type whoami struct {
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
}

type counted struct {
	Count int `json:"count"`
}

// runChild is a stdio MCP server. "count" counts the calls it has served:
// a session whose calls all reach its own child counts 1, 2, 3...
func runChild() {
	server := mcp.NewServer(&mcp.Implementation{Name: "affinity-test-child", Version: "1.0.0"}, nil)
	n := 0
	mcp.AddTool(server, &mcp.Tool{Name: "count"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, counted, error) {
		n++
		return nil, counted{n}, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "whoami"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, whoami, error) {
		return nil, whoami{os.Getenv(instanceEnv), os.Getpid()}, nil
	})
	// progress streams n progress notifications on the call's SSE stream
	// before answering.
	mcp.AddTool(server, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct{ N int }) (*mcp.CallToolResult, counted, error) {
		for i := range a.N {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: float64(a.N),
			}); err != nil {
				return nil, counted{}, err
			}
		}
		return nil, counted{a.N}, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
}

// instance is one bridge process's worth of objects, as cmd/bridge wires
// them, on a loopback port.
type instance struct {
	name   string
	addr   string
	router *affinity.Router // nil without affinity
	reg    *session.Registry
	srv    *http.Server
	served chan error

	direct, forwarded atomic.Int64
	stopOnce          sync.Once
}

func startInstance(t *testing.T, name string, secret []byte) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("instance", name)
	in := &instance{name: name, addr: ln.Addr().String(), served: make(chan error, 1)}
	so := &session.Options{
		Launcher: session.LauncherOf(sandbox.NewLocal(&sandbox.LocalOptions{
			Command:   exe,
			Env:       append(os.Environ(), childEnv+"=1", instanceEnv+"="+name),
			StopGrace: 2 * time.Second,
			Logger:    logger,
		})),
		Logger: logger,
	}
	if secret != nil {
		in.router, err = affinity.New(&affinity.Options{Self: in.addr, Secret: secret, Tokens: []string{token}, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		so.NewID = in.router.NewID
	}
	in.reg = session.NewRegistry(so)
	var h http.Handler = bridge.NewHandler(in.reg, &bridge.Options{AuthTokens: []string{token}, Logger: logger})
	if in.router != nil {
		h = in.router.Wrap(h)
	}
	in.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(affinity.HopHeader) != "" {
			in.forwarded.Add(1)
		} else {
			in.direct.Add(1)
		}
		h.ServeHTTP(w, r)
	})}
	go func() { in.served <- in.srv.Serve(ln) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop ends the instance as cmd/bridge does: sessions end (children
// stop, streams close), then the server closes. Its port then refuses
// connections.
func (in *instance) stop(t *testing.T) {
	in.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := in.reg.Shutdown(ctx); err != nil {
			t.Errorf("%s: shutting down the registry: %v", in.name, err)
		}
		in.srv.Close()
		<-in.served
		if in.router != nil {
			in.router.Close()
		}
	})
}

// alternatingProxy is a load balancer with no affinity at all, worse than
// plain round robin: it sends each session's requests to the instances in
// turn (A, B, A, B...), so that every second request of every session
// lands away from the session's child, however requests of different
// sessions interleave. Requests without a session ID (the SDK's
// server/discover probe, initialize) go to the instance the test chose with
// place, so that the test knows where each session starts.
type alternatingProxy struct {
	srv      *httptest.Server
	backends []*url.URL
	place    atomic.Int64 // backend for requests without a session ID
	mu       sync.Mutex
	next     map[string]int // session ID -> next backend
}

func startProxy(t *testing.T, ins ...*instance) *alternatingProxy {
	p := &alternatingProxy{next: map[string]int{}}
	for _, in := range ins {
		p.backends = append(p.backends, &url.URL{Scheme: "http", Host: in.addr})
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := int(p.place.Load())
			if key := pr.In.Header.Get(affinity.SessionHeader); key != "" {
				p.mu.Lock()
				i = p.next[key]
				p.next[key] = (i + 1) % len(p.backends)
				p.mu.Unlock()
			}
			pr.SetURL(p.backends[i])
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil)).Handler(), slog.LevelWarn),
	}
	// Full duplex for the same reason as in Router.Wrap: this proxy is a
	// Go ReverseProxy too.
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

// bearer adds the token to every request of the SDK client.
type bearer struct{ base http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return b.base.RoundTrip(r)
}

func connect(t *testing.T, endpoint string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := mcp.NewClient(&mcp.Implementation{Name: "affinity-test-client", Version: "1.0.0"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearer{tr}},
		MaxRetries: -1, // a misrouted request must fail, not be retried until it lands well
	}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func call[T any](t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) (T, error) {
	t.Helper()
	var out T
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return out, err
	}
	if res.IsError {
		return out, fmt.Errorf("tool error: %v", res.Content)
	}
	b, _ := json.Marshal(res.StructuredContent)
	return out, json.Unmarshal(b, &out)
}

var secret = []byte("affinity integration test secret, 32+ bytes")

func TestSessionsStayWithTheirChildAcrossInstances(t *testing.T) {
	a := startInstance(t, "A", secret)
	b := startInstance(t, "B", secret)
	proxy := startProxy(t, a, b)

	// The SDK may handle notifications after the call returns: count them
	// through a channel and wait for them.
	progress := make(chan struct{}, 100)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
		progress <- struct{}{}
	}}
	// One session starts on each instance.
	var sessions []*mcp.ClientSession
	for i, want := range []string{"A", "B"} {
		proxy.place.Store(int64(i))
		cs, err := connect(t, proxy.srv.URL+"/mcp", opts)
		if err != nil {
			t.Fatalf("connecting through the proxy: %v", err)
		}
		sessions = append(sessions, cs)
		w, err := call[whoami](t, cs, &mcp.CallToolParams{Name: "whoami"})
		if err != nil {
			t.Fatal(err)
		}
		if w.Instance != want {
			t.Fatalf("session %d lives on %s; the proxy placed it on %s", i, w.Instance, want)
		}
	}

	// Interleave the sessions' calls. Every call of a session must reach
	// that session's child, wherever the proxy sends it.
	for i := 1; i <= 6; i++ {
		for j, cs := range sessions {
			got, err := call[counted](t, cs, &mcp.CallToolParams{Name: "count"})
			if err != nil {
				t.Fatalf("session %d, call %d: %v", j, i, err)
			}
			if got.Count != i {
				t.Fatalf("session %d, call %d: its child has served %d calls; want %d (a call reached another child)", j, i, got.Count, i)
			}
		}
	}
	// SSE responses stream through a forwarding instance too.
	for j, cs := range sessions {
		for range 2 { // one of the two lands away from the owner
			params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"N": 3}}
			params.SetProgressToken(fmt.Sprintf("p%d", j))
			if _, err := call[counted](t, cs, params); err != nil {
				t.Fatalf("session %d: progress: %v", j, err)
			}
		}
	}
	watchdog := time.NewTimer(time.Minute)
	defer watchdog.Stop()
	for got := 0; got < 12; got++ {
		select {
		case <-progress:
		case <-watchdog.C:
			t.Fatalf("received %d progress notifications; want 12", got)
		}
	}
	// The test means something only if requests did land away from their
	// child and were forwarded.
	for _, in := range []*instance{a, b} {
		if in.direct.Load() == 0 || in.forwarded.Load() == 0 {
			t.Errorf("instance %s: %d requests from the proxy, %d forwarded to it; want both > 0", in.name, in.direct.Load(), in.forwarded.Load())
		}
	}

	// DELETE reaches the owner wherever it lands: the session ends there.
	for _, cs := range sessions {
		if err := cs.Close(); err != nil {
			t.Errorf("closing a session: %v", err)
		}
	}
}

// TestWithoutAffinitySessionsBreak is the control: the same two bridges
// and proxy, without the router. A session's requests reach an instance
// that does not know it, so the test above would fail without affinity.
func TestWithoutAffinitySessionsBreak(t *testing.T) {
	a := startInstance(t, "A", nil)
	b := startInstance(t, "B", nil)
	proxy := startProxy(t, a, b)
	cs, err := connect(t, proxy.srv.URL+"/mcp", nil)
	if err != nil {
		return // already the initialized notification went astray
	}
	for i := 1; i <= 4; i++ {
		got, err := call[counted](t, cs, &mcp.CallToolParams{Name: "count"})
		if err != nil {
			return
		}
		if got.Count != i {
			return
		}
	}
	t.Fatalf("four calls all reached the session's child without affinity: the proxy does not spread requests")
}

// TestOwnerGoneIs404 stops the instance holding a session: the other
// instance answers the session's requests 404, the MCP signal to start a
// new session, which then works.
func TestOwnerGoneIs404(t *testing.T) {
	a := startInstance(t, "A", secret)
	b := startInstance(t, "B", secret)

	cs, err := connect(t, "http://"+a.addr+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := cs.ID()
	if owner, ok := b.router.Owner(id); !ok || owner != a.addr {
		t.Fatalf("B reads the owner of %q as %q, %v; want %s", id, owner, ok, a.addr)
	}
	a.stop(t)

	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","arguments":{}}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+b.addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d (%s); want 404", resp.StatusCode, got)
	}

	cs2, err := connect(t, "http://"+b.addr+"/mcp", nil)
	if err != nil {
		t.Fatalf("a new session on the surviving instance: %v", err)
	}
	if w, err := call[whoami](t, cs2, &mcp.CallToolParams{Name: "whoami"}); err != nil || w.Instance != "B" {
		t.Fatalf("new session: %+v, %v", w, err)
	}
}

// testWriter sends logs to t.Log, and drops them once the test is over.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

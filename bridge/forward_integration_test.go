package bridge_test

// Two real bridges (bridge.NewHandler over session.NewRegistry over
// sandbox.NewLocal, behind bridge.Forwarder as cmd/bridge wires them) behind
// a load balancer without affinity, with the official Go SDK as client and
// the test binary as the stdio MCP server.

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

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

const (
	// instanceEnv names, to the child, the instance that started it.
	instanceEnv   = "MCP_BRIDGE_TEST_INSTANCE"
	affinityToken = "test-token-0123456789"
)

// instance is one bridge process's worth of objects, as cmd/bridge wires
// them, on a loopback port.
type instance struct {
	name string
	addr string
	inst *affinity.Instance // nil without affinity
	fwd  *bridge.Forwarder  // nil without affinity
	reg  *session.Registry
	srv  *http.Server

	served            chan error
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
			Env:       append(os.Environ(), childEnv+"=server", instanceEnv+"="+name),
			StopGrace: 2 * time.Second,
			Logger:    logger,
		})),
		Logger: logger,
	}
	if secret != nil {
		in.inst, err = affinity.New(&affinity.Options{Self: in.addr, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		in.fwd = bridge.NewForwarder(in.inst, &bridge.ForwarderOptions{Tokens: []string{affinityToken}, Logger: logger})
		so.NewID = in.inst.NewID
	}
	in.reg = session.NewRegistry(so)
	var h http.Handler = bridge.NewHandler(in.reg, &bridge.Options{AuthTokens: []string{affinityToken}, Logger: logger})
	if in.fwd != nil {
		h = in.fwd.Wrap(h)
	}
	in.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(bridge.HopHeader) != "" {
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
		if in.fwd != nil {
			in.fwd.Close()
		}
	})
}

// alternatingProxy is a load balancer with no affinity at all, worse than
// plain round robin: it sends each session's requests to the instances in
// turn (A, B, A, B...), so that every second request of every session
// lands away from the session's child, however requests of different
// sessions interleave. A session is named by Mcp-Session-Id, or by the
// legacy transport's sessionId query parameter. Requests without a session
// ID (the SDK's server/discover probe, initialize, GET /sse) go to the
// instance the test chose with place, so that the test knows where each
// session starts.
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
			key := pr.In.Header.Get("Mcp-Session-Id")
			if key == "" {
				key = pr.In.URL.Query().Get("sessionId")
			}
			if key != "" {
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
	// Full duplex for the same reason as in Forwarder.Wrap: this proxy is
	// a Go ReverseProxy too.
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

// withToken adds the token to every request of the SDK client.
type withToken struct{ base http.RoundTripper }

func (b withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+affinityToken)
	return b.base.RoundTrip(r)
}

func affinityClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: withToken{tr}}
}

// connectAffine connects the SDK client with the token over Streamable HTTP,
// or over the legacy HTTP+SSE transport when endpoint ends in /sse.
func connectAffine(t *testing.T, endpoint string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "affinity-test-client", Version: "1.0.0"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var tr mcp.Transport = &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: affinityClient(t),
		MaxRetries: -1, // a misrouted request must fail, not be retried until it lands well
	}
	if strings.HasSuffix(endpoint, "/sse") {
		tr = &mcp.SSEClientTransport{Endpoint: endpoint, HTTPClient: affinityClient(t)}
		// The stream lives as long as the context its GET was made with.
		ctx = t.Context()
	}
	cs, err := c.Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callAs[T any](t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) (T, error) {
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

var affinitySecret = []byte("affinity integration test secret, 32+ bytes")

// sessionsAcrossInstances starts one session on each instance through the
// proxy, interleaves their calls (every second one lands on the other
// instance), and checks that each reached its own child. endpoint is the
// path the client connects to: /mcp, or /sse for the legacy transport.
func sessionsAcrossInstances(t *testing.T, endpoint string) {
	a := startInstance(t, "A", affinitySecret)
	b := startInstance(t, "B", affinitySecret)
	proxy := startProxy(t, a, b)

	// The SDK may handle notifications after the call returns: count them
	// through a channel and wait for them.
	progress := make(chan struct{}, 100)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
		progress <- struct{}{}
	}}
	var sessions []*mcp.ClientSession
	for i, want := range []string{"A", "B"} {
		proxy.place.Store(int64(i))
		cs, err := connectAffine(t, proxy.srv.URL+endpoint, opts)
		if err != nil {
			t.Fatalf("connecting through the proxy: %v", err)
		}
		sessions = append(sessions, cs)
		w, err := callAs[instanceResult](t, cs, &mcp.CallToolParams{Name: "instance"})
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
			got, err := callAs[countResult](t, cs, &mcp.CallToolParams{Name: "count"})
			if err != nil {
				t.Fatalf("session %d, call %d: %v", j, i, err)
			}
			if got.Count != i {
				t.Fatalf("session %d, call %d: its child has served %d calls; want %d (a call reached another child)", j, i, got.Count, i)
			}
		}
	}
	// Notifications during a call stream back through a forwarding
	// instance too (Streamable HTTP), or arrive on the session's one
	// stream (legacy).
	for j, cs := range sessions {
		for range 2 { // one of the two lands away from the owner
			params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 3}}
			params.SetProgressToken(fmt.Sprintf("p%d", j))
			if _, err := cs.CallTool(ctxT(t), params); err != nil {
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

	// DELETE (or, legacy, closing the stream) reaches the owner wherever
	// it lands: the session ends there.
	for _, cs := range sessions {
		if err := cs.Close(); err != nil {
			t.Errorf("closing a session: %v", err)
		}
	}
}

func TestSessionsStayWithTheirChildAcrossInstances(t *testing.T) {
	sessionsAcrossInstances(t, "/mcp")
}

// The legacy HTTP+SSE transport needs no sticky load balancer either: the
// stream stays where its GET landed, every POST of the session reaches that
// instance, and the answers arrive on the stream.
func TestLegacySSESessionsAcrossInstances(t *testing.T) {
	sessionsAcrossInstances(t, "/sse")
}

// TestWithoutAffinitySessionsBreak is the control: the same two bridges
// and proxy, without the forwarder. A session's requests reach an instance
// that does not know it, so the tests above would fail without affinity.
func TestWithoutAffinitySessionsBreak(t *testing.T) {
	for _, endpoint := range []string{"/mcp", "/sse"} {
		a := startInstance(t, "A", nil)
		b := startInstance(t, "B", nil)
		proxy := startProxy(t, a, b)
		if !sessionBreaks(t, proxy.srv.URL+endpoint) {
			t.Fatalf("%s: four calls all reached the session's child without affinity: the proxy does not spread requests", endpoint)
		}
	}
}

func sessionBreaks(t *testing.T, endpoint string) bool {
	cs, err := connectAffine(t, endpoint, nil)
	if err != nil {
		return true // already the initialized notification went astray
	}
	defer cs.Close()
	for i := 1; i <= 4; i++ {
		// A legacy client learns of a misrouted POST only from its status,
		// or never (a POST that got 404 has no answer on the stream): a
		// short deadline ends the wait.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "count"})
		cancel()
		if err != nil || res.IsError {
			return true
		}
		var got countResult
		b, _ := json.Marshal(res.StructuredContent)
		if json.Unmarshal(b, &got) != nil || got.Count != i {
			return true
		}
	}
	return false
}

// TestOwnerGoneIs404 stops the instance holding a session: the other
// instance answers the session's requests 404, the MCP signal to start a
// new session, which then works.
func TestOwnerGoneIs404(t *testing.T) {
	a := startInstance(t, "A", affinitySecret)
	b := startInstance(t, "B", affinitySecret)

	cs, err := connectAffine(t, "http://"+a.addr+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := cs.ID()
	if owner, ok := b.inst.Owner(id); !ok || owner != a.addr {
		t.Fatalf("B reads the owner of %q as %q, %v; want %s", id, owner, ok, a.addr)
	}
	a.stop(t)

	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","arguments":{}}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+b.addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+affinityToken)
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

	cs2, err := connectAffine(t, "http://"+b.addr+"/mcp", nil)
	if err != nil {
		t.Fatalf("a new session on the surviving instance: %v", err)
	}
	if w, err := callAs[instanceResult](t, cs2, &mcp.CallToolParams{Name: "instance"}); err != nil || w.Instance != "B" {
		t.Fatalf("new session: %+v, %v", w, err)
	}
}

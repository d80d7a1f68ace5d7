package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

const token = "metrics-test-token"

// bearer adds the bridge's token to every request of the SDK client.
type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultTransport.RoundTrip(r)
}

type testBridge struct {
	url     string // the MCP endpoint
	metrics string // the /metrics URL
	reg     *session.Registry
}

// startBridge runs a bridge with metrics (and a warm pool of none, whose
// every launch is a miss) in front of the test binary as its server.
func startBridge(t *testing.T, m *metrics.Metrics, so session.Options, intercept ...peer.Interceptor) *testBridge {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	srvm := m.Server(metrics.DefaultServer)
	local := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:   exe,
		Env:       append(os.Environ(), testserver.Env+"=1"),
		StopGrace: 2 * time.Second,
		Logger:    logger,
	})
	pool := sandbox.NewSpares(srvm.Launcher(local, "local"), 0, logger)
	if err := srvm.WatchSpares(pool); err != nil {
		t.Fatal(err)
	}
	so.Launcher = session.LauncherOf(pool)
	so.Logger = logger
	so.Observer = srvm
	so.Intercept = peer.Chain(append([]peer.Interceptor{srvm.Intercept}, intercept...)...)
	reg := session.NewRegistry(&so)
	if err := srvm.WatchRegistry(reg); err != nil {
		t.Fatal(err)
	}
	h := bridge.NewHandler(reg, &bridge.Options{Logger: logger, AuthTokens: []string{token}, Metrics: m.Handler()})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the registry: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
		_ = pool.Close(ctx)
	})
	return &testBridge{url: srv.URL + h.Path(), metrics: srv.URL + "/metrics", reg: reg}
}

func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "metrics-test-client", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{}}}, nil)
	if err != nil {
		t.Fatalf("connecting the SDK client to the bridge: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// scrape reads /metrics with the token, and parses it with the Prometheus
// text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/plain") // the text format, not protobuf
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value is the value of the series of name with these labels (all of
// them), or -1 if there is none. For a histogram it is the sample count.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(want) {
			continue
		}
		for _, lp := range m.Label {
			if want[lp.GetName()] != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// Known traffic from a real SDK client through the bridge to a real child,
// then the counts scraped over HTTP: they match exactly.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	m := metrics.New()
	// One event per log: each answer evicts the one before.
	b := startBridge(t, m, session.Options{LogMaxEvents: 1})

	// Session 1: initialize, tools/list, three calls, an unknown tool (a
	// JSON-RPC error), a resume of an evicted stream (410), DELETE.
	cs := connect(t, b.url)
	sess1, err := b.reg.Get(cs.ID())
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no-such-tool"}); err == nil {
		t.Fatal("calling an unknown tool succeeded")
	}
	req, _ := http.NewRequest("GET", b.url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Last-Event-ID", "1_0") // the initialize answer's stream, evicted
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Fatalf("resuming an evicted stream: %s, want 410", resp.Status)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	<-sess1.Stopped() // after its end was observed

	// Session 2: its server crashes during a call.
	cs2 := connect(t, b.url)
	sess2, err := b.reg.Get(cs2.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs2.CallTool(ctx, &mcp.CallToolParams{Name: "crash"}); err == nil {
		t.Fatal("a call whose server crashed succeeded")
	}
	<-sess2.Stopped()

	fams := scrape(t, b.metrics)
	srv := []string{"server", "default"}
	with := func(kv ...string) []string { return append(append([]string{}, srv...), kv...) }
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mcp_bridge_sessions_created_total", srv, 2},
		{"mcp_bridge_sessions_active", srv, 0},
		{"mcp_bridge_sessions_ended_total", with("reason", "deleted"), 1},
		{"mcp_bridge_sessions_ended_total", with("reason", "server_exited"), 1},
		{"mcp_bridge_children_started_total", with("sandbox", "local"), 2},
		{"mcp_bridge_children_failed_total", with("sandbox", "local"), 0},
		{"mcp_bridge_child_start_seconds", with("sandbox", "local"), 2},
		{"mcp_bridge_requests_total", with("method", "initialize", "outcome", "ok"), 2},
		{"mcp_bridge_requests_total", with("method", "tools/list", "outcome", "ok"), 1},
		{"mcp_bridge_requests_total", with("method", "tools/call", "outcome", "ok"), 3},
		{"mcp_bridge_requests_total", with("method", "tools/call", "outcome", "error"), 1},
		{"mcp_bridge_requests_total", with("method", "tools/call", "outcome", "aborted"), 1},
		{"mcp_bridge_request_duration_seconds", with("method", "tools/call"), 5},
		{"mcp_bridge_request_duration_seconds", with("method", "initialize"), 2},
		{"mcp_bridge_event_log_resumes_total", with("outcome", "gone"), 1},
		// Session 1 logged six answers and holds the last; session 2 its
		// initialize answer, then the error that answered the crashed call.
		{"mcp_bridge_event_log_evictions_total", srv, 6},
		{"mcp_bridge_event_log_bytes", srv, 0},
		{"mcp_bridge_warm_pool_misses_total", srv, 2},
		{"mcp_bridge_warm_pool_hits_total", srv, 0},
		{"mcp_bridge_policy_denials_total", srv, 0},
		{"mcp_bridge_children_oom_total", with("sandbox", "local"), 0},
	} {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, dir := range []string{"to_server", "from_server"} {
		if got := value(fams, "mcp_bridge_message_bytes_total", with("direction", dir)...); got <= 0 {
			t.Errorf("mcp_bridge_message_bytes_total{direction=%s} = %v", dir, got)
		}
	}
	if t.Failed() {
		t.Logf("families: %v", keys(fams))
	}
}

// gather reads the metrics without HTTP.
func gather(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}

func asExit(err error, target **sandbox.ExitError) bool { return errors.As(err, target) }

func keys(fams map[string]*dto.MetricFamily) []string {
	var out []string
	for k, f := range fams {
		if strings.HasPrefix(k, "mcp_bridge") {
			out = append(out, k+"="+f.String())
		}
	}
	return out
}

// /metrics on the main listener is behind the endpoint's token check.
func TestMetricsNeedTheToken(t *testing.T) {
	b := startBridge(t, metrics.New(), session.Options{})
	resp, err := http.Get(b.metrics)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a token: %s, want 401", resp.Status)
	}
}

// A request the interception point refuses (as the tool policy does)
// counts as refused, and the policy's own counter is the one it
// increments.
func TestMetricsRefusedAndDenied(t *testing.T) {
	m := metrics.New()
	srvm := m.Server(metrics.DefaultServer)
	deny := func(next peer.Handler) peer.Handler {
		return func(msg *peer.Message) error {
			if msg.Dir == peer.ToChild && msg.Env.Method == "tools/call" {
				srvm.PolicyDenied()
				return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "denied by policy"}
			}
			return next(msg)
		}
	}
	b := startBridge(t, m, session.Options{}, deny)
	cs := connect(t, b.url)
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err == nil || !strings.Contains(err.Error(), "denied by policy") {
		t.Fatalf("a denied call: %v", err)
	}
	fams := scrape(t, b.metrics)
	if got := value(fams, "mcp_bridge_requests_total", "server", "default", "method", "tools/call", "outcome", "refused"); got != 1 {
		t.Errorf("refused tools/call = %v, want 1", got)
	}
	if got := value(fams, "mcp_bridge_policy_denials_total", "server", "default"); got != 1 {
		t.Errorf("policy denials = %v, want 1", got)
	}
}

// A request the client cancels counts as cancelled, once: the late answer
// of the server, if any, is dropped before the interception point.
func TestMetricsCancelled(t *testing.T) {
	m := metrics.New()
	b := startBridge(t, m, session.Options{})
	cs := connect(t, b.url)
	post := func(body string) *http.Response {
		req, _ := http.NewRequest("POST", b.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The response's headers come once the request was written to the
	// server, past the interception point.
	call := post(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"block","arguments":{}}}`)
	defer call.Body.Close()
	if call.StatusCode != 200 {
		t.Fatalf("the call: %s", call.Status)
	}
	cancel := post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1","reason":"test"}}`)
	cancel.Body.Close()
	if cancel.StatusCode != http.StatusAccepted {
		t.Fatalf("the cancellation: %s", cancel.Status)
	}
	io.Copy(io.Discard, call.Body) // the stream ends: the request is no longer in flight
	fams := scrape(t, b.metrics)
	if got := value(fams, "mcp_bridge_requests_total", "server", "default", "method", "tools/call", "outcome", "cancelled"); got != 1 {
		t.Errorf("cancelled tools/call = %v, want 1", got)
	}
	if got := value(fams, "mcp_bridge_requests_total", "server", "default", "method", "tools/call", "outcome", "ok"); got != -1 {
		t.Errorf("ok tools/call = %v, want none", got)
	}
}

// Watching a server's new pool (a reloaded configuration) replaces the
// old one's figures, and servers are told apart by their label.
func TestWatchSparesAgainReplaces(t *testing.T) {
	m := metrics.New()
	a, other := m.Server("a"), m.Server("b")
	logger := slog.New(slog.DiscardHandler)
	failing := sandbox.NewLocal(&sandbox.LocalOptions{Command: "/nonexistent/mcp-server", Logger: logger})
	for i, s := range []*metrics.Server{a, a, other} {
		pool := sandbox.NewSpares(failing, 0, logger)
		if err := s.WatchSpares(pool); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		for range i + 1 {
			if _, err := pool.Launch(t.Context(), "s"); err == nil {
				t.Fatal("launching a command that does not exist succeeded")
			}
		}
		pool.Close(t.Context())
	}
	fams := gather(t, m)
	if got := value(fams, "mcp_bridge_warm_pool_misses_total", "server", "a"); got != 2 {
		t.Errorf("server a's misses = %v, want 2 (its second pool's)", got)
	}
	if got := value(fams, "mcp_bridge_warm_pool_misses_total", "server", "b"); got != 3 {
		t.Errorf("server b's misses = %v, want 3", got)
	}
}

func TestMethodLabelIsBounded(t *testing.T) {
	for in, want := range map[string]string{
		"tools/call": "tools/call", "initialize": "initialize", "x/anything": "other", "": "other",
		"sampling/createMessage": "other", // a server's request, never a client's
	} {
		if got := metrics.MethodLabel(in); got != want {
			t.Errorf("MethodLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// Drop removes a server's gauges and scrape-time figures, keeps its
// counters, and a view asked for again continues them.
func TestDropRemovesGauges(t *testing.T) {
	m := metrics.New()
	logger := slog.New(slog.DiscardHandler)
	failing := sandbox.NewLocal(&sandbox.LocalOptions{Command: "/nonexistent/mcp-server", Logger: logger})
	a, b := m.Server("a"), m.Server("b")
	for _, s := range []*metrics.Server{a, b} {
		if err := s.WatchRegistry(session.NewRegistry(&session.Options{Launcher: session.LauncherOf(failing), Logger: logger})); err != nil {
			t.Fatal(err)
		}
		if err := s.WatchSpares(sandbox.NewSpares(failing, 0, logger)); err != nil {
			t.Fatal(err)
		}
		s.SessionStarted(nil)
		s.SessionEnded(nil, session.ErrRetired)
	}
	a.Drop()
	fams := gather(t, m)
	for _, name := range []string{"mcp_bridge_sessions_active", "mcp_bridge_event_log_events", "mcp_bridge_event_log_bytes", "mcp_bridge_warm_pool_misses_total"} {
		if got := value(fams, name, "server", "a"); got != -1 {
			t.Errorf("%s{server=a} = %v after Drop, want no series", name, got)
		}
		if got := value(fams, name, "server", "b"); got == -1 {
			t.Errorf("%s{server=b} is gone", name)
		}
	}
	if got := value(fams, "mcp_bridge_sessions_ended_total", "server", "a", "reason", "retired"); got != 1 {
		t.Errorf("sessions ended of a = %v, want 1 (counters stay)", got)
	}
	again := m.Server("a")
	if again == a {
		t.Fatal("Server returned the dropped view")
	}
	again.SessionStarted(nil)
	fams = gather(t, m)
	if got := value(fams, "mcp_bridge_sessions_created_total", "server", "a"); got != 2 {
		t.Errorf("sessions created of a = %v, want 2 (continued)", got)
	}
	if got := value(fams, "mcp_bridge_sessions_active", "server", "a"); got != 1 {
		t.Errorf("sessions active of a = %v, want 1", got)
	}
}

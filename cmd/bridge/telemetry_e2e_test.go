package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
)

// The binary serves /metrics on its listener, and sends the span of each
// request to the OTLP/HTTP endpoint of --otlp-endpoint (here a receiver
// that decodes what an OpenTelemetry collector would get), flushing them
// at exit.
func TestTelemetryOfTheBinary(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	spans := make(chan []string, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		var names []string
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
		spans <- names
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	defer collector.Close()

	p := startBridgeBinary(t, bridgeBin, "--otlp-endpoint", collector.URL, "--", helloBin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // a session: its initialize is a client request, traced
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil {
		t.Fatal(err)
	}
	cs.Close()

	resp, err := http.Get(strings.TrimSuffix(p.url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	calls := 0.0
	for _, m := range fams["mcp_bridge_requests_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.Label {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["method"] == "tools/call" && l["outcome"] == "ok" && l["server"] == "default" {
			calls = m.Counter.GetValue()
		}
	}
	if calls != 1 {
		t.Errorf("mcp_bridge_requests_total{method=tools/call,outcome=ok} = %v, want 1", calls)
	}

	// SIGTERM: the bridge flushes its spans before it exits.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the bridge exited with %v:\n%s", err, strings.Join(<-p.done, "\n"))
	}
	var got []string
	for len(spans) > 0 {
		got = append(got, <-spans...)
	}
	joined := strings.Join(got, ",")
	if !strings.Contains(joined, "tools/call echo") || !strings.Contains(joined, "initialize") {
		t.Fatalf("the collector got spans %q, want initialize and tools/call echo", got)
	}
}

// scrapeFamilies gets and parses /metrics with the Prometheus text parser.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// metricValue is the value of the series of name with these labels (pairs
// of name and value; others may be there too), and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.Label {
			l[lp.GetName()] = lp.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && l[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// Under --config each server's metrics carry its name: known traffic on
// two servers (2025 sessions and revision 2026-07-28 clients of their
// stateless pools, a call one server's own policy denies), scraped and
// parsed, gives exact counts per server; the global audit log names the
// server of each line; once a removed server has drained, its gauges are
// gone and its counters stay.
func TestConfigFileMetricsPerServer(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	everything := childtest.EverythingServer(t)
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  deny: [test_image_content]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(dir, "audit.log")
	one := fmt.Sprintf(`"one": {"command": %q}`, helloBin)
	// pool-min -1: no child started ahead, so that the children started
	// for two are known: its session's, the era probe's and its pool's one.
	two := fmt.Sprintf(`"two": {"command": %q, "policy": %q, "pool-min": -1}`, everything, policyFile)
	// --no-aggregate: the children counted are the servers' own (the
	// aggregate at /mcp would add a catalog child of each).
	b := startConfigBridge(t, bridgeBin, fmt.Sprintf(`{"bridge": {"audit-log": %q}, "mcpServers": {%s, %s}}`, auditFile, one, two), "--no-aggregate")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// 2025 sessions: three calls on one; on two, two calls and one the
	// policy of two denies.
	s1 := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/one/mcp"})
	for i := range 3 {
		if err := echo(ctx, s1, fmt.Sprint("one ", i)); err != nil {
			t.Fatal(err)
		}
	}
	s2 := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/two/mcp"})
	if v := s2.InitializeResult().ProtocolVersion; v == "2026-07-28" {
		t.Fatalf("sdkConnect negotiated %s, want a 2025 session", v)
	}
	for range 2 {
		if _, err := s2.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s2.CallTool(ctx, &mcp.CallToolParams{Name: "test_image_content"}); err == nil || !strings.Contains(err.Error(), "policy denies it") {
		t.Fatalf("a tool the policy of two denies: %v", err)
	}
	// Revision 2026-07-28 clients (the SDK's default): one call each, on
	// the server's own pool.
	stateless := func(name string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/" + name + "/mcp"}, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { cs.Close() })
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("%s: negotiated %q, want 2026-07-28", name, v)
		}
		return cs
	}
	n1, n2 := stateless("one"), stateless("two")
	if err := echo(ctx, n1, "stateless one"); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.CallTool(ctx, &mcp.CallToolParams{Name: "test_image_content"}); err == nil || !strings.Contains(err.Error(), "policy denies it") {
		t.Fatalf("a stateless call of a tool the policy of two denies: %v", err)
	}

	// server/discover per server: each pool answers for its own server.
	discovered := map[string]string{}
	for _, name := range []string{"one", "two"} {
		resp := statelessPost(t, ctx, b.base+"/servers/"+name+"/mcp", "1", "server/discover", "")
		// "serverInfo" in the result's _meta (basic/index, _meta).
		var body struct {
			Result struct {
				Meta struct {
					ServerInfo struct{ Name string } `json:"io.modelcontextprotocol/serverInfo"`
				} `json:"_meta"`
				SupportedVersions []string
			}
		}
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || body.Result.Meta.ServerInfo.Name == "" || !slices.Contains(body.Result.SupportedVersions, "2026-07-28") {
			t.Fatalf("server/discover of %s: %d %v %+v", name, resp.StatusCode, err, body)
		}
		discovered[name] = body.Result.Meta.ServerInfo.Name
	}
	if discovered["one"] == discovered["two"] {
		t.Errorf("server/discover: both servers say they are %q", discovered["one"])
	}
	t.Logf("server/discover: %v", discovered)

	fams := scrapeFamilies(t, b.base+"/metrics")
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mcp_bridge_requests_total", []string{"server", "one", "method", "tools/call", "outcome", "ok"}, 4},
		{"mcp_bridge_requests_total", []string{"server", "two", "method", "tools/call", "outcome", "ok"}, 3},
		{"mcp_bridge_requests_total", []string{"server", "two", "method", "tools/call", "outcome", "refused"}, 2},
		{"mcp_bridge_requests_total", []string{"server", "one", "method", "initialize", "outcome", "ok"}, 1},
		{"mcp_bridge_requests_total", []string{"server", "two", "method", "initialize", "outcome", "ok"}, 1},
		{"mcp_bridge_sessions_created_total", []string{"server", "one"}, 1},
		{"mcp_bridge_sessions_created_total", []string{"server", "two"}, 1},
		{"mcp_bridge_sessions_active", []string{"server", "one"}, 1},
		{"mcp_bridge_sessions_active", []string{"server", "two"}, 1},
		{"mcp_bridge_policy_denials_total", []string{"server", "one"}, 0},
		{"mcp_bridge_policy_denials_total", []string{"server", "two"}, 2},
		{"mcp_bridge_event_log_events", []string{"server", "one"}, -1}, // present; any value
		{"mcp_bridge_event_log_events", []string{"server", "two"}, -1},
	} {
		got, ok := metricValue(fams, c.name, c.labels...)
		if !ok || (c.want >= 0 && got != c.want) {
			t.Errorf("%s%v = %v (present: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := metricValue(fams, "mcp_bridge_requests_total", "server", "default"); ok {
		t.Error("a series labelled server=default under --config")
	}
	for _, srv := range []string{"one", "two"} {
		if got, _ := metricValue(fams, "mcp_bridge_children_started_total", "server", srv, "sandbox", "local"); got < 2 {
			t.Errorf("children started for %s: %v, want its session's and its pool's", srv, got)
		}
		if got, _ := metricValue(fams, "mcp_bridge_message_bytes_total", "server", srv, "direction", "to_server"); got <= 0 {
			t.Errorf("bytes to %s: %v", srv, got)
		}
	}
	started2, _ := metricValue(fams, "mcp_bridge_children_started_total", "server", "two", "sandbox", "local")
	if started2 != 3 {
		t.Errorf("children started for two = %v, want 3 (a session, the era probe, one child of the pool)", started2)
	}

	// one is removed: once drained, its gauges are gone, its counters stay;
	// two is unchanged and keeps its pool (no child started for it).
	b.rewrite(t, fmt.Sprintf(`{"bridge": {"audit-log": %q}, "mcpServers": {%s}}`, auditFile, two))
	if rec := b.waitLog(t, "configuration reloaded"); fmt.Sprint(rec["removed"]) != "[one]" || fmt.Sprint(rec["unchanged"]) != "[two]" {
		t.Fatalf("reload: %v", rec)
	}
	b.waitLog(t, "server drained")
	if _, err := n2.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text"}); err != nil {
		t.Fatalf("a stateless call to the unchanged server after the reload: %v", err)
	}
	if err := echo(ctx, n1, "removed"); err == nil {
		t.Error("a stateless call to the removed server succeeded")
	}
	fams = scrapeFamilies(t, b.base+"/metrics")
	for _, gauge := range []string{"mcp_bridge_sessions_active", "mcp_bridge_event_log_events", "mcp_bridge_event_log_bytes"} {
		if v, ok := metricValue(fams, gauge, "server", "one"); ok {
			t.Errorf("%s{server=one} = %v after the server drained, want no series", gauge, v)
		}
		if _, ok := metricValue(fams, gauge, "server", "two"); !ok {
			t.Errorf("%s{server=two} is gone", gauge)
		}
	}
	if got, _ := metricValue(fams, "mcp_bridge_requests_total", "server", "one", "method", "tools/call", "outcome", "ok"); got != 4 {
		t.Errorf("tools/call ok of the removed server = %v, want 4 (counters stay)", got)
	}
	if got, _ := metricValue(fams, "mcp_bridge_sessions_ended_total", "server", "one", "reason", "retired"); got != 1 {
		t.Errorf("sessions of one ended as retired = %v, want 1", got)
	}
	if got, _ := metricValue(fams, "mcp_bridge_requests_total", "server", "two", "method", "tools/call", "outcome", "ok"); got != 4 {
		t.Errorf("tools/call ok of two = %v, want 4", got)
	}
	if got, _ := metricValue(fams, "mcp_bridge_children_started_total", "server", "two", "sandbox", "local"); got != started2 {
		t.Errorf("children started for the unchanged server went from %v to %v across the reload: its pool was not kept", started2, got)
	}

	// A changed policy file is a changed server: replaced on SIGHUP.
	if err := os.WriteFile(policyFile, []byte("tools:\n  deny: [test_simple_text]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.rewrite(t, fmt.Sprintf(`{"bridge": {"audit-log": %q}, "mcpServers": {%s}}`, auditFile, two))
	if rec := b.waitLog(t, "configuration reloaded"); fmt.Sprint(rec["changed"]) != "[two]" {
		t.Fatalf("reload after the policy file changed: %v", rec)
	}
	if _, err := n2.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text"}); err == nil || !strings.Contains(err.Error(), "policy denies it") {
		t.Fatalf("a tool the new policy denies: %v", err)
	}

	// The global audit log names the server of each line.
	servers := map[string]int{}
	for _, r := range readAudit(t, auditFile) {
		servers[r.Server]++
		if r.Tool == "test_image_content" && (r.Server != "two" || r.Outcome != "denied") {
			t.Errorf("audit line of the denied call: %+v", r)
		}
	}
	if servers["one"] == 0 || servers["two"] == 0 || servers[""] != 0 {
		t.Errorf("audit lines by server: %v, want lines of one and two, none without a server", servers)
	}
}

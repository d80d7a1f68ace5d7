package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
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

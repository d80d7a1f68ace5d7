package tracing_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// The caller's trace, as its traceparent header says.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// header adds headers to every request of the SDK client.
type header map[string]string

func (h header) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// observer ends the spans of a session's unanswered requests at its end.
type observer struct{ t *tracing.Tracer }

func (observer) SessionStarted(*session.Session)            {}
func (o observer) SessionEnded(s *session.Session, _ error) { o.t.Forget(s) }
func (observer) EventEvicted(int)                           {}
func (observer) Resumed(error)                              {}

// startBridge runs a bridge with tracing into an in-memory exporter in
// front of the test binary as its server, and connects an SDK client
// whose requests carry the caller's traceparent header.
func startBridge(t *testing.T) (*mcp.ClientSession, *tracetest.InMemoryExporter) {
	cs, exp, _ := startBridgeReg(t)
	return cs, exp
}

func startBridgeReg(t *testing.T) (*mcp.ClientSession, *tracetest.InMemoryExporter, *session.Registry) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracer := tracing.New(tp, "default")
	logger := slog.New(slog.DiscardHandler)
	reg := session.NewRegistry(&session.Options{
		Launcher: session.LauncherOf(sandbox.NewLocal(&sandbox.LocalOptions{
			Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: logger,
		})),
		Logger:    logger,
		Intercept: tracer.Intercept,
		Observer:  observer{tracer},
	})
	h := bridge.NewHandler(reg, &bridge.Options{Logger: logger, TraceContext: tracing.HeaderToMeta})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the registry: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
		_ = tp.Shutdown(ctx)
	})
	c := mcp.NewClient(&mcp.Implementation{Name: "tracing-test-client", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: srv.URL + h.Path(),
		HTTPClient: &http.Client{Transport: header{"traceparent": callerParent}}}, nil)
	if err != nil {
		t.Fatalf("connecting the SDK client to the bridge: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, exp, reg
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func findSpan(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var names []string
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			return s
		}
		names = append(names, s.Name)
	}
	t.Fatalf("no span %q among %q", name, names)
	return tracetest.SpanStub{}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A request's span continues the caller's traceparent header, and the
// child gets the span's own context in _meta, so its spans join the trace.
func TestSpanContinuesTheCallersTraceAndReachesTheChild(t *testing.T) {
	cs, exp := startBridge(t)
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "trace"})
	if err != nil {
		t.Fatal(err)
	}
	seen := res.Content[0].(*mcp.TextContent).Text

	span := findSpan(t, exp, "tools/call trace")
	if got := span.Parent.TraceID().String(); got != callerTrace {
		t.Errorf("the span's trace is %s, want the caller's %s", got, callerTrace)
	}
	if got := span.Parent.SpanID().String(); got != callerSpan || !span.Parent.IsRemote() {
		t.Errorf("the span's parent is %s (remote %v), want the caller's span %s", got, span.Parent.IsRemote(), callerSpan)
	}
	for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "trace", "mcp_bridge.server": "default"} {
		if got := attr(span, k); got != want {
			t.Errorf("attribute %s = %q, want %q", k, got, want)
		}
	}
	if span.SpanKind.String() != "server" || span.Status.Code != codes.Unset {
		t.Errorf("span kind %s, status %v", span.SpanKind, span.Status)
	}
	want := "00-" + callerTrace + "-" + span.SpanContext.SpanID().String() + "-01"
	if seen != want {
		t.Errorf("the child saw traceparent %q, want the bridge span's %q", seen, want)
	}
	// The initialize POST carried the header too.
	if init := findSpan(t, exp, "initialize"); init.Parent.TraceID().String() != callerTrace {
		t.Errorf("initialize's span is in trace %s", init.Parent.TraceID())
	}
}

// A traceparent the client put in _meta wins over the header: it names the
// request itself.
func TestMetaTraceparentWinsOverTheHeader(t *testing.T) {
	cs, exp := startBridge(t)
	const metaTrace, metaSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "trace",
		Meta: mcp.Meta{"traceparent": "00-" + metaTrace + "-" + metaSpan + "-01", "other": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	span := findSpan(t, exp, "tools/call trace")
	if span.Parent.TraceID().String() != metaTrace || span.Parent.SpanID().String() != metaSpan {
		t.Errorf("the span's parent is %s/%s, want the _meta's %s/%s", span.Parent.TraceID(), span.Parent.SpanID(), metaTrace, metaSpan)
	}
}

// A JSON-RPC error answer marks the span as an error, with its code.
func TestErrorAnswerMarksTheSpan(t *testing.T) {
	cs, exp := startBridge(t)
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "no-such-tool"}); err == nil {
		t.Fatal("calling an unknown tool succeeded")
	}
	span := findSpan(t, exp, "tools/call no-such-tool")
	if span.Status.Code != codes.Error || attr(span, "error.type") == "" {
		t.Errorf("status %v, error.type %q", span.Status, attr(span, "error.type"))
	}
}

// A request whose session ends before its answer (the server crashed)
// ends its span as aborted.
func TestSessionEndEndsTheSpan(t *testing.T) {
	cs, exp, reg := startBridgeReg(t)
	sess, err := reg.Get(cs.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "crash"}); err == nil {
		t.Fatal("a call whose server crashed succeeded")
	}
	<-sess.Stopped() // after the session's end was observed
	span := findSpan(t, exp, "tools/call crash")
	if span.Status.Code != codes.Error || attr(span, "error.type") != "aborted" {
		t.Errorf("status %v, error.type %q; want an error, aborted", span.Status, attr(span, "error.type"))
	}
}

func TestSetMeta(t *testing.T) {
	kv := map[string]string{"traceparent": callerParent}
	for _, c := range []struct{ in, wantParams string }{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"_meta":{"traceparent":"` + callerParent + `"}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}`, `{"_meta":{"traceparent":"` + callerParent + `"}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params": { "name":"x"}}`, `{"_meta":{"traceparent":"` + callerParent + `"},"name":"x"}`},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":7,"traceparent":"00-old"}}}`,
			`{"name":"x","_meta":{"progressToken":7,"traceparent":"` + callerParent + `"}}`},
		{`{"params":{"a":[1,{"b":2}]},"jsonrpc":"2.0","method":"m","id":"s"}`, `{"_meta":{"traceparent":"` + callerParent + `"},"a":[1,{"b":2}]}`},
	} {
		env, err := jsonrpc.Parse([]byte(c.in))
		if err != nil {
			t.Fatal(err)
		}
		out, err := tracing.SetMeta(jsonrpc.Message{Data: []byte(c.in), Env: env}, kv)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		outEnv, err := jsonrpc.Parse(out)
		if err != nil {
			t.Fatalf("%s: the result %s does not parse: %v", c.in, out, err)
		}
		if outEnv.ID != env.ID || outEnv.Method != env.Method {
			t.Errorf("%s: the envelope changed: %+v", out, outEnv)
		}
		params, _ := jsonrpc.Lookup(out, "params")
		if !jsonEqual(t, params, []byte(c.wantParams)) {
			t.Errorf("%s: params %s, want %s", c.in, params, c.wantParams)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// An invalid traceparent header is ignored, as W3C Trace Context asks.
func TestHeaderToMetaIgnoresInvalidTraceparent(t *testing.T) {
	data := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	env, _ := jsonrpc.Parse(data)
	msgs := []jsonrpc.Message{{Data: data, Env: env}}
	h := http.Header{}
	h.Set("traceparent", "00-00000000000000000000000000000000-"+callerSpan+"-01") // an all-zero trace ID is invalid
	tracing.HeaderToMeta(h, msgs)
	if strings.Contains(string(msgs[0].Data), "traceparent") {
		t.Fatalf("an invalid traceparent reached _meta: %s", msgs[0].Data)
	}
	h.Set("traceparent", callerParent)
	tracing.HeaderToMeta(h, msgs)
	if !strings.Contains(string(msgs[0].Data), callerParent) {
		t.Fatalf("a valid traceparent did not reach _meta: %s", msgs[0].Data)
	}
}

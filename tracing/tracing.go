// Package tracing makes an OpenTelemetry span of every client request that
// passes the bridge, and carries the trace to the MCP server, so that a
// server's own spans join the caller's trace.
//
// The trace context travels in params._meta, as the MCP specification
// reserves it ("the keys traceparent, tracestate, and baggage are reserved
// for OpenTelemetry trace context propagation", basic/index, revision
// 2026-07-28; SEP-414). A client's W3C traceparent HTTP header is copied
// into _meta of the POST's requests that carry none (HeaderToMeta, a
// bridge.Options.TraceContext hook), so that the interceptor
// (Tracer.Intercept) has one place to look: it continues that context in a
// span for the request and hands the child the span's own context in
// _meta. The span ends with the answer.
//
// Tracing is off unless an OTLP endpoint is configured (Setup): then no
// interceptor and no hook are installed, and a message costs nothing more
// (BenchmarkChain).
package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// DefaultServiceName is the service.name of the bridge's spans unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another.
const DefaultServiceName = "mcp-bridge"

// TracerName is the instrumentation scope of the bridge's spans.
const TracerName = "github.com/mcp-bridge/mcp-bridge/tracing"

// MaxPending bounds the spans of one Tracer waiting for their request's
// end. Beyond it, new requests get no span: memory stays bounded whatever
// a front end forgets to end.
const MaxPending = 100_000

// Options configure Setup. Every zero value means the documented default.
type Options struct {
	// Endpoint is the OTLP/HTTP base URL of the collector, such as
	// http://collector:4318 (spans go to its /v1/traces), as
	// OTEL_EXPORTER_OTLP_ENDPOINT. Empty means the standard variables
	// decide: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; with neither, tracing is off.
	Endpoint string
}

// Enabled reports whether opts or the environment ask for tracing: an
// endpoint is configured and OTEL_SDK_DISABLED is not "true".
func Enabled(opts *Options) bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return (opts != nil && opts.Endpoint != "") ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Setup returns a tracer provider that batches spans to the OTLP/HTTP
// endpoint of opts or of the OTEL_EXPORTER_OTLP_* variables, or nil when
// tracing is off (see Enabled). The exporter reads the other standard
// variables itself (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, their _TRACES_ forms), the provider reads
// OTEL_TRACES_SAMPLER and its argument, and the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Only the http/protobuf
// protocol is built in: OTEL_EXPORTER_OTLP_PROTOCOL=grpc is refused. The
// caller shuts the provider down at exit, which flushes the last spans.
func Setup(ctx context.Context, opts *Options) (*sdktrace.TracerProvider, error) {
	if !Enabled(opts) {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: the bridge exports traces over OTLP http/protobuf only; unset it or set it to http/protobuf (the collector's port 4318)", v, p)
			}
			break
		}
	}
	var eopts []otlptracehttp.Option
	if opts != nil && opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--otlp-endpoint %q: want the collector's base URL, such as http://collector:4318", opts.Endpoint)
		}
		// As OTEL_EXPORTER_OTLP_ENDPOINT: the signal's path is appended.
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		eopts = append(eopts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, eopts...)
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", DefaultServiceName)),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("the trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// propagator reads and writes traceparent and tracestate (W3C Trace
// Context), in HTTP headers and in _meta alike.
var propagator = propagation.TraceContext{}

// Tracer makes the spans of one configured server's requests. Its methods
// are safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	server string

	mu       sync.Mutex
	pending  map[any]map[jsonrpc.ID]trace.Span // by Origin, and id as the client wrote it
	npending int
}

// New returns the Tracer of the server with this name (the config file's
// server name, or "default"), making spans with tp.
func New(tp trace.TracerProvider, server string) *Tracer {
	return &Tracer{
		tracer:  tp.Tracer(TracerName),
		server:  server,
		pending: make(map[any]map[jsonrpc.ID]trace.Span),
	}
}

// Intercept is the Tracer's peer.Interceptor. For each client request it
// starts a span, a child of the trace context in the request's _meta when
// there is one, named after the method and its tool or prompt ("tools/call
// get_weather", as OpenTelemetry's conventions for MCP name them); it
// writes the span's own context into _meta (traceparent, tracestate) for
// the server, and ends the span when the request is answered, refused,
// cancelled, or its client forgotten (Forget).
func (t *Tracer) Intercept(next peer.Handler) peer.Handler {
	return func(m *peer.Message) error {
		switch {
		case m.Own:
		case m.Dir == peer.FromChild:
			if m.Env.Kind == jsonrpc.KindResponse && m.Origin != nil {
				if span := t.take(m.Origin, m.Env.ID); span != nil {
					if m.Abandoned {
						// Its server ended before answering (peer.Message.Abandoned).
						span.SetAttributes(attribute.String("error.type", "aborted"))
						span.SetStatus(codes.Error, "the MCP server ended before answering")
					} else if m.Env.IsError {
						code, msg := errorOf(m.Data)
						span.SetAttributes(attribute.String("rpc.response.status_code", code), attribute.String("error.type", code))
						span.SetStatus(codes.Error, msg)
					}
					span.End()
				}
			}
		case m.Env.Kind == jsonrpc.KindRequest:
			span := t.start(m)
			err := next(m)
			if err != nil && span != nil && t.take(m.Origin, m.Env.ID) == span {
				span.SetAttributes(attribute.String("error.type", "refused"))
				span.SetStatus(codes.Error, "refused by the bridge: "+err.Error())
				span.End()
			}
			return err
		case m.Env.Method == "notifications/cancelled" && m.Env.RequestID != "":
			if span := t.take(m.Origin, m.Env.RequestID); span != nil {
				span.SetAttributes(attribute.String("error.type", "cancelled"))
				span.SetStatus(codes.Error, "cancelled")
				span.End()
			}
		}
		return next(m)
	}
}

// start starts the span of a client request and writes its context into
// the request's _meta.
func (t *Tracer) start(m *peer.Message) trace.Span {
	ctx := context.Background()
	var carrier propagation.MapCarrier
	if meta := m.Env.MetaAt.In(m.Data); meta != nil {
		carrier = metaCarrier(meta)
		ctx = propagator.Extract(ctx, carrier)
	}
	method := m.Env.Method
	name := method
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs,
		attribute.String("mcp.method.name", method),
		attribute.String("jsonrpc.request.id", requestID(m.Env.ID)),
		attribute.String("mcp_bridge.server", t.server))
	if target := m.Env.Name(m.Data); target != "" {
		switch method {
		case "tools/call":
			attrs = append(attrs, attribute.String("gen_ai.tool.name", target), attribute.String("gen_ai.operation.name", "execute_tool"))
			name += " " + target
		case "prompts/get":
			attrs = append(attrs, attribute.String("gen_ai.prompt.name", target))
			name += " " + target
		}
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))

	out := propagation.MapCarrier{}
	propagator.Inject(ctx, out)
	if data, err := SetMeta(m.Message, out); err == nil {
		if err := m.Replace(data); err != nil {
			span.SetAttributes(attribute.String("mcp_bridge.trace_context", "not passed: "+err.Error()))
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	spans := t.pending[m.Origin]
	_, again := spans[m.Env.ID]
	if t.npending >= MaxPending && !again {
		span.End() // untracked: better a short span than unbounded memory
		return nil
	}
	if spans == nil {
		spans = make(map[jsonrpc.ID]trace.Span)
		t.pending[m.Origin] = spans
	}
	if old := spans[m.Env.ID]; old != nil {
		old.End()
	} else {
		t.npending++
	}
	spans[m.Env.ID] = span
	return span
}

// take removes and returns the span of a request, or nil.
func (t *Tracer) take(origin any, id jsonrpc.ID) trace.Span {
	t.mu.Lock()
	defer t.mu.Unlock()
	spans := t.pending[origin]
	span := spans[id]
	if span == nil {
		return nil
	}
	delete(spans, id)
	t.npending--
	if len(spans) == 0 {
		delete(t.pending, origin)
	}
	return span
}

// Forget ends the spans of the requests of this Origin still waiting for
// an answer: their client went away (a session's end, through
// session.Observer.SessionEnded).
func (t *Tracer) Forget(origin any) {
	t.mu.Lock()
	spans := t.pending[origin]
	delete(t.pending, origin)
	t.npending -= len(spans)
	t.mu.Unlock()
	for _, span := range spans {
		span.SetAttributes(attribute.String("error.type", "aborted"))
		span.SetStatus(codes.Error, "the session ended before an answer")
		span.End()
	}
}

// requestID is an id as the client wrote it, for the span's attribute.
func requestID(id jsonrpc.ID) string {
	if len(id) == 0 {
		return ""
	}
	return string(id[1:]) // the number, or the string, without its kind
}

// errorOf reads error.code and error.message of an error response.
func errorOf(data []byte) (code, msg string) {
	e, ok := jsonrpc.Lookup(data, "error")
	if !ok {
		return "", ""
	}
	if c, ok := jsonrpc.Lookup(e, "code"); ok {
		code = string(c)
	}
	if v, ok := jsonrpc.Lookup(e, "message"); ok {
		msg, _ = jsonrpc.StringValue(v)
	}
	return code, msg
}

// metaCarrier is the trace context of a _meta object.
func metaCarrier(meta []byte) propagation.MapCarrier {
	c := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := jsonrpc.Lookup(meta, k); ok {
			if s, ok := jsonrpc.StringValue(v); ok {
				c[k] = s
			}
		}
	}
	return c
}

// HeaderToMeta copies the W3C trace context of a POST's HTTP headers
// (traceparent, tracestate) into params._meta of its requests that carry
// no traceparent of their own: a bridge.Options.TraceContext hook. A
// traceparent that is not valid W3C Trace Context is ignored, as the
// specification asks of a receiver.
func HeaderToMeta(h http.Header, msgs []jsonrpc.Message) {
	if h.Get("traceparent") == "" {
		return
	}
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.HeaderCarrier(h)))
	if !sc.IsValid() {
		return
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), carrier)
	for i := range msgs {
		m := &msgs[i]
		if m.Env.Kind != jsonrpc.KindRequest {
			continue
		}
		if meta := m.Env.MetaAt.In(m.Data); meta != nil {
			if _, ok := jsonrpc.Lookup(meta, "traceparent"); ok {
				continue
			}
		}
		data, err := SetMeta(*m, carrier)
		if err != nil {
			continue
		}
		if env, err := jsonrpc.Parse(data); err == nil {
			m.Data, m.Env = data, env
		}
	}
}

// SetMeta returns a copy of a request with the string members of kv set in
// params._meta (replacing members of the same names), creating _meta, and
// params, where the request has none. The rest of the message is copied
// as it is.
func SetMeta(m jsonrpc.Message, kv map[string]string) ([]byte, error) {
	if len(kv) == 0 {
		return m.Data, nil
	}
	data := m.Data
	if meta := m.Env.MetaAt.In(data); meta != nil {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(meta, &members); err != nil {
			return nil, fmt.Errorf("params._meta: %w", err)
		}
		for k, v := range kv {
			members[k], _ = json.Marshal(v)
		}
		raw, err := json.Marshal(members)
		if err != nil {
			return nil, err
		}
		return m.Env.Rewrite(data, jsonrpc.Edit{At: m.Env.MetaAt, Raw: raw}), nil
	}
	raw, err := json.Marshal(kv)
	if err != nil {
		return nil, err
	}
	if params, ok := jsonrpc.Lookup(data, "params"); ok {
		if len(params) == 0 || params[0] != '{' {
			return nil, errors.New("params is not an object: no _meta can be added")
		}
		at := cap(data) - cap(params) // Lookup returns a sub-slice of data
		if at < 0 || at >= len(data) || &data[at] != &params[0] {
			return nil, errors.New("locating params")
		}
		ins := append([]byte(`"_meta":`), raw...)
		if rest := bytes.TrimLeft(params[1:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
			ins = append(ins, ',')
		}
		return jsonrpc.Rewrite(data, jsonrpc.Edit{At: jsonrpc.Span{Start: int32(at + 1), End: int32(at + 1)}, Raw: ins}), nil
	}
	end := bytes.LastIndexByte(data, '}')
	if end < 0 {
		return nil, errors.New("not a JSON object")
	}
	ins := append(append([]byte(`,"params":{"_meta":`), raw...), '}')
	return jsonrpc.Rewrite(data, jsonrpc.Edit{At: jsonrpc.Span{Start: int32(end), End: int32(end)}, Raw: ins}), nil
}

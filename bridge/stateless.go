package bridge

// The stateless front end: MCP revision 2026-07-28 on the same endpoint as
// the 2025 sessions. A POST carrying that revision's MCP-Protocol-Version
// (or any revision the sessions do not serve) and no Mcp-Session-Id comes
// here; everything else keeps the session semantics. Requests are served
// by package pool; this file owns the HTTP rules of the revision
// (basic/transports/streamable-http): the mirrored headers, the per-request
// _meta, the status codes of its errors, and one response stream per
// request whose closing cancels the request.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// Header names of revision 2026-07-28, in canonical form.
const (
	hdrMethod = "Mcp-Method"
	hdrName   = "Mcp-Name"
)

// metaNames are the members of a request's _meta this front end reads,
// found as the request is parsed (jsonrpc.ParseMeta).
var metaNames = [...]string{
	pool.MetaProtocolVersion,
	pool.MetaClientCapabilities,
	pool.MetaLogLevel,
}

// logLevels are the log levels of revision 2026-07-28 (RFC 5424 severities,
// server/utilities/logging).
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// isStateless reports whether a POST goes to the stateless front end (sid
// and v: its Mcp-Session-Id and MCP-Protocol-Version): a
// protocol version the sessions do not serve, and no session (an
// Mcp-Session-Id beside MCP-Protocol-Version 2026-07-28 is ignored). An absent
// header means 2025-03-26; initialize always starts a session.
func (h *Handler) isStateless(r *http.Request, sid, v string) bool {
	if h.opts.Stateless == nil {
		return false
	}
	if sid != "" && v != pool.Version {
		// A request of revision 2026-07-28 never belongs to a session:
		// its Mcp-Session-Id, which platforms that route by it stamp on
		// every request (Bedrock AgentCore), is ignored, as the Go SDK's
		// stateless server does. Other versions with one are
		// a session's.
		return false
	}
	if v == "" || headerValue(r.Header, hdrMethod) == "initialize" {
		return false
	}
	for _, s := range supportedVersions {
		if v == s {
			return false
		}
	}
	return true
}

// SessionVersions are the revisions served with sessions, newest first:
// what server/discover lists after 2026-07-28 (pool.Options.OtherVersions).
func SessionVersions() []string {
	out := make([]string, 0, len(supportedVersions))
	for i := len(supportedVersions) - 1; i >= 0; i-- {
		out = append(out, supportedVersions[i])
	}
	return out
}

// statelessVersions is what an UnsupportedProtocolVersionError lists.
func statelessVersions() []string {
	return append([]string{pool.Version}, SessionVersions()...)
}

// serveStateless serves one POST of revision 2026-07-28; version is its
// MCP-Protocol-Version, which servePost read (a header lookup is about 150
// instructions: each is read once).
func (h *Handler) serveStateless(w http.ResponseWriter, r *http.Request, owner auth.Tag, version string) {
	if !postHeadersOK(w, r) {
		return
	}
	body, err := h.readBody(w, r)
	if err != nil {
		h.bodyFailed(w, err)
		return
	}
	// The members of _meta this front end reads are found as the body is
	// parsed, in the same reading.
	var found [len(metaNames)][]byte
	env, err := jsonrpc.ParseMeta(body, metaNames[:], found[:])
	if err != nil {
		code := jsonrpc.CodeInvalidRequest
		if jsonrpc.IsParseError(err) {
			code = jsonrpc.CodeParseError
		}
		if _, batch, _ := jsonrpc.SplitBatch(body); batch {
			err = errors.New("the body must be a single JSON-RPC request (revision " + pool.Version + " has no batches)")
		}
		WriteError(w, http.StatusBadRequest, jsonrpc.RawID(body), code, "Bad Request: "+err.Error(), nil)
		return
	}
	rawID := env.IDAt.In(body)
	switch env.Kind {
	case jsonrpc.KindResponse:
		WriteError(w, http.StatusBadRequest, rawID, jsonrpc.CodeInvalidRequest,
			"Bad Request: a client sends no responses in revision "+pool.Version+" (answers to the server's questions go in inputResponses)", nil)
		return
	case jsonrpc.KindNotification:
		// "This revision of the core protocol defines no client-to-server
		// notifications over Streamable HTTP ... closing the SSE response
		// stream is itself the cancellation signal." Accepted and ignored.
		w.WriteHeader(http.StatusAccepted)
		return
	}

	// "If the server does not implement the requested protocol version ...
	// it MUST respond with 400 Bad Request and an
	// UnsupportedProtocolVersionError listing its supported versions."
	if v := version; v != pool.Version {
		WriteError(w, http.StatusBadRequest, rawID, pool.CodeUnsupportedProtocolVersion,
			"Unsupported protocol version "+quote(v)+"; this bridge serves "+strings.Join(statelessVersions(), ", "),
			map[string]any{"supported": statelessVersions(), "requested": v})
		return
	}
	name := env.Name(body) // params.name, decoded once for every use below
	if msg := checkHeaders(r, body, &env, name); msg != "" {
		WriteError(w, http.StatusBadRequest, rawID, pool.CodeHeaderMismatch, "Header mismatch: "+msg, nil)
		return
	}
	// "A request missing any required field is malformed; the server MUST
	// reject it with JSON-RPC error code -32602 (Invalid params). On HTTP,
	// the response status MUST be 400 Bad Request." (basic/index, _meta)
	v, caps, lvl := found[0], found[1], found[2]
	switch {
	case env.MetaAt.IsZero() || v == nil || caps == nil || v[0] != '"' || caps[0] != '{':
		WriteError(w, http.StatusBadRequest, rawID, jsonrpc.CodeInvalidParams,
			"Invalid params: _meta must carry io.modelcontextprotocol/protocolVersion (a string) and io.modelcontextprotocol/clientCapabilities (an object) on every request", nil)
		return
	case !jsonrpc.IsString(v, pool.Version):
		meta, _ := jsonrpc.StringValue(v)
		WriteError(w, http.StatusBadRequest, rawID, pool.CodeHeaderMismatch,
			"Header mismatch: MCP-Protocol-Version "+quote(version)+" does not match _meta's io.modelcontextprotocol/protocolVersion "+quote(meta), nil)
		return
	}
	// The answer is built in a buffer of the SSE frames' (pool.Request.Answer),
	// given back once it is written.
	answer := frameBufs.Get().(*[]byte)
	defer putFrameBuf(answer)
	req := &pool.Request{Principal: owner, Msg: jsonrpc.Message{Data: body, Env: env}, Caps: caps, Name: name, Answer: (*answer)[:0]}
	req.Caller = auth.FromContext(r.Context())
	if lvl != nil {
		// "If the io.modelcontextprotocol/logLevel value carried in a
		// request's _meta is not a recognized log level, the server SHOULD
		// reject that request with ... -32602 (Invalid params)"
		// (server/utilities/logging).
		s, isString := jsonrpc.StringValue(lvl)
		if !isString || !slices.Contains(logLevels, s) {
			WriteError(w, http.StatusBadRequest, rawID, jsonrpc.CodeInvalidParams,
				"Invalid params: _meta's io.modelcontextprotocol/logLevel must be one of "+strings.Join(logLevels, ", "), nil)
			return
		}
		req.LogLevel = s
	}

	// The answer is one JSON body unless the child says something first
	// (progress, logs, a subscription's notifications): then an SSE stream
	// scoped to this request, without event IDs ("Resumable SSE streams via
	// Last-Event-ID are not supported").
	dl := h.deadline(w)
	// Each write gets WriteTimeout to reach the client, as on the session
	// streams; the last renewal covers the end of the response.
	defer dl.extend()
	streaming := false
	keeper := newStreamKeeper(w, h.opts.WriteTimeout, h.keepAlives)
	write := func(data []byte) error {
		dl.extend()
		if !streaming {
			streaming = true
			startSSE(w)
		}
		if data == nil {
			if _, err := io.WriteString(w, ":\n\n"); err != nil {
				return err
			}
		} else if err := writeData(w, data); err != nil {
			return err
		}
		return dl.rc.Flush()
	}
	emit := write
	if keeper != nil {
		emit = func(data []byte) error {
			return keeper.emit(func() error {
				// The keeper's timer may have started the stream.
				streaming = keeper.streaming
				err := write(data)
				keeper.streaming = streaming
				return err
			})
		}
	}
	// One call: the pool refuses a method its children cannot be asked,
	// has paramHeaders check a tools/call's Mcp-Param headers against the
	// tool's x-mcp-header annotations (known from the tools/list answers
	// the pool saw, or listed now), and serves the request, reading the
	// children's era once.
	final, err := h.opts.Stateless.Call(r.Context(), req, paramHeaders(r.Header), emit)
	if keeper != nil && keeper.finish() {
		streaming = true
	}
	if err != nil && r.Context().Err() == nil {
		// The refusals, before any child saw the request. A type switch:
		// errors.As would put its target on the heap on every request.
		var status, code int
		var msg string
		switch e := err.(type) {
		case *pool.MethodNotFoundError:
			// "If the server does not implement the requested RPC
			// method, it MUST respond with 404 Not Found and a
			// JSON-RPC error with code -32601 (Method not found)."
			status, code, msg = http.StatusNotFound, jsonrpc.CodeMethodNotFound, e.Error()
		case *pool.HeaderMismatchError:
			status, code, msg = http.StatusBadRequest, pool.CodeHeaderMismatch, "Header mismatch: "+e.Reason
		case *ambiguousParamError:
			status, code, msg = http.StatusBadRequest, jsonrpc.CodeInvalidRequest, "Bad Request: "+e.reason
		}
		if status != 0 {
			if streaming {
				// A keep-alive started the stream while the era was
				// probed or the tools listed: the refusal is its event.
				_ = writeData(w, jsonrpc.ErrorResponse(rawID, code, msg, nil))
				return
			}
			WriteError(w, status, rawID, code, msg, nil)
			return
		}
	}
	if err != nil && h.opts.Forward != nil && !streaming {
		// Only here: errors.As would put fwd on the heap on every request.
		if fwd := (*pool.ForwardError)(nil); errors.As(err, &fwd) {
			// The requestState verified under the shared secret: forward
			// the retry, body and all, to the instance holding the parked
			// call.
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			h.opts.Forward(w, r, fwd.Instance)
			return
		}
	}
	switch {
	case err == nil:
	case streaming || r.Context().Err() != nil:
		return // the client left (a cancellation, passed on), or its stream broke
	default:
		h.statelessFailed(w, r, rawID, err)
		return
	}
	dl.extend()
	if streaming {
		_ = writeData(w, final)
		return
	}
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	setDate(hd)
	w.WriteHeader(statusOf(final))
	w.Write(final)
}

// setDate gives a response its Date header, the value net/http would
// write, formatted once a second (lastDate) rather than on each response:
// net/http's own (time.Time.AppendFormat, for every response without one)
// was 1.5% of a stateless call's instructions.
func setDate(hd http.Header) {
	now := time.Now()
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		hd["Date"] = d.value
		return
	}
	// (A slice of cap 1: an Add to one response's header appends to a
	// copy, never to what the second's other responses share.)
	v := []string{time.Unix(sec, 0).UTC().Format(http.TimeFormat)}
	lastDate.Store(&httpDate{sec: sec, value: v})
	hd["Date"] = v
}

// httpDate is one second's Date header value.
type httpDate struct {
	sec   int64
	value []string
}

// lastDate is the Date header value of the second of the last response.
var lastDate atomic.Pointer[httpDate]

// paramHeaders is the front end's side of pool.Call: a request's headers,
// checked against its tool's x-mcp-header annotations. (A map: no
// allocation to pass it as a pool.Front.)
type paramHeaders http.Header

// CheckParamHeaders implements pool.Front.
func (hd paramHeaders) CheckParamHeaders(body []byte, annotated []pool.ParamHeader) error {
	if msg := ambiguousParamPath(body, annotated); msg != "" {
		return &ambiguousParamError{msg}
	}
	if key, msg := paramHeaderMismatch(http.Header(hd), body, annotated); msg != "" {
		return &pool.HeaderMismatchError{Header: key, Reason: msg}
	}
	return nil
}

// ambiguousParamError refuses a tools/call whose annotated argument the
// body gives twice (ambiguousParamPath): 400 and -32600.
type ambiguousParamError struct{ reason string }

func (e *ambiguousParamError) Error() string { return e.reason }

// writeData writes one SSE event without an ID.
func writeData(w http.ResponseWriter, data []byte) error {
	bp := frameBufs.Get().(*[]byte)
	defer putFrameBuf(bp)
	b := append(append(append((*bp)[:0], "data: "...), data...), "\n\n"...)
	*bp = b
	_, err := w.Write(b)
	return err
}

// statusOf is the HTTP status of an answer sent as one JSON body: the
// errors revision 2026-07-28 gives a status of their own get it.
func statusOf(answer []byte) int {
	if resultFirst(answer) || !bytes.Contains(answer, []byte(`"error"`)) {
		return http.StatusOK
	}
	env, err := jsonrpc.Parse(answer)
	if err != nil || !env.IsError {
		return http.StatusOK
	}
	_, rpcErr, _ := jsonrpc.DecodeResponse(answer)
	if rpcErr == nil {
		return http.StatusOK
	}
	switch rpcErr.Code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case pool.CodeHeaderMismatch, pool.CodeMissingRequiredClientCapability, pool.CodeUnsupportedProtocolVersion:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// resultFirst reports whether an answer starts with a "result" member,
// first or after "jsonrpc" and "id" as most servers write them: then it is
// no error response (the bridge's parsing refuses a response with both),
// which bytes.Contains would have to read all of it to say.
func resultFirst(answer []byte) bool {
	if bytes.HasPrefix(answer, []byte(`{"result":`)) {
		return true
	}
	rest, ok := bytes.CutPrefix(answer, []byte(`{"jsonrpc":"2.0","id":`))
	if !ok || len(rest) == 0 {
		return false
	}
	i := 0
	if rest[0] == '"' { // a string id, if it has no escapes
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 || bytes.IndexByte(rest[1:1+end], '\\') >= 0 {
			return false
		}
		i = end + 2
	} else {
		for i < len(rest) && strings.IndexByte("0123456789-+.eE", rest[i]) >= 0 {
			i++
		}
	}
	return bytes.HasPrefix(rest[i:], []byte(`,"result":`))
}

// statelessFailed answers a request the pool could not serve.
func (h *Handler) statelessFailed(w http.ResponseWriter, r *http.Request, rawID []byte, err error) {
	var fwd *pool.ForwardError
	switch {
	case r.Context().Err() != nil:
		return
	case errors.As(err, &fwd):
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError,
			"Service Unavailable: "+err.Error()+", which this instance cannot reach; send the request again without requestState", nil)
	case errors.Is(err, pool.ErrClosed):
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError, "Service Unavailable: "+err.Error(), nil)
	case errors.Is(err, pool.ErrPrincipalShare):
		// One principal may not take every child of the pool.
		h.logger.Warn("refused a request: its principal holds its share of the pool's MCP servers", "err", err)
		WriteError(w, http.StatusTooManyRequests, rawID, jsonrpc.CodeServerError,
			"Too Many Requests: "+err.Error()+" (the bridge's --pool-max-per-principal)", nil)
	case errors.Is(err, peer.ErrTooManyRequests), errors.Is(err, peer.ErrBusy):
		// The limits of a session hold here with its statuses (peer.Limits).
		w.Header().Set("Retry-After", "1")
		status := http.StatusTooManyRequests
		if errors.Is(err, peer.ErrBusy) {
			status = http.StatusServiceUnavailable
		}
		WriteError(w, status, rawID, jsonrpc.CodeServerError, http.StatusText(status)+": "+err.Error(), nil)
	case errors.Is(err, pool.ErrLaunch):
		h.logger.Error("the stateless front end could not start an MCP server", "err", err)
		WriteError(w, http.StatusBadGateway, rawID, jsonrpc.CodeServerError, "Bad Gateway: "+err.Error(), nil)
	case errors.Is(err, context.DeadlineExceeded):
		WriteError(w, http.StatusGatewayTimeout, rawID, jsonrpc.CodeServerError, "Gateway Timeout: "+err.Error(), nil)
	default:
		WriteError(w, http.StatusInternalServerError, rawID, jsonrpc.CodeInternalError, err.Error(), nil)
	}
}

// checkHeaders validates the mirrored headers against the body: "Servers
// that process the request body MUST reject requests where the values
// specified in the headers do not match the corresponding values in the
// request body" (basic/transports/streamable-http, Server Validation). It
// returns what is wrong, or "". name is env.Name(body).
func checkHeaders(r *http.Request, body []byte, env *jsonrpc.Envelope, name string) string {
	vals := r.Header[hdrMethod] // one lookup for both checks
	var m string
	if len(vals) > 0 {
		m = vals[0]
	}
	switch {
	case m == "":
		return "the Mcp-Method header is required"
	case len(vals) != 1:
		// As for Mcp-Name: whatever routed on another of them saw another
		// method than the server will.
		return "exactly one Mcp-Method header is required"
	case m != env.Method:
		return "Mcp-Method header value " + quote(m) + " does not match body value " + quote(env.Method)
	}
	var member string
	switch env.Method {
	case "tools/call", "prompts/get":
		member = "name"
	case "resources/read":
		member = "uri"
	default:
		return ""
	}
	vals, present := r.Header[hdrName]
	if !present || len(vals) != 1 {
		return "exactly one Mcp-Name header is required for " + env.Method
	}
	if !validHeaderValue(vals[0]) {
		return "the Mcp-Name header contains characters other than visible ASCII, space and tab (send such a name in the =?base64?...?= form)"
	}
	inHeader, ok := decodeHeaderValue(vals[0])
	if !ok {
		return "the Mcp-Name header is not valid base64 in its =?base64?...?= form"
	}
	var inBody string
	isString := !env.NameAt.IsZero()
	if member == "name" {
		inBody = name // params.name, found by Parse already
	} else {
		params, _ := jsonrpc.Lookup(body, "params")
		raw, _ := jsonrpc.Lookup(params, member)
		inBody, isString = jsonrpc.StringValue(raw)
	}
	if !isString || inHeader != inBody {
		return "Mcp-Name header value " + quote(inHeader) + " does not match body value params." + member + " " + quote(inBody)
	}
	return ""
}

// checkParamHeaders validates the Mcp-Param-{Name} headers of a tools/call
// against its arguments, for the tool's x-mcp-header annotations. It
// returns what is wrong, or "". The spec's table (basic/transports/
// streamable-http, Server Behavior for Custom Headers): "Parameter value
// provided: Server MUST validate header matches body ... Parameter value
// is null / not in arguments: Server MUST NOT expect the header ... Client
// omits header but value is in body: Server MUST reject the request". A
// header sent for a value the body does not have is a mismatch as well:
// whatever routed on it saw a value the server would not act on. Headers
// no annotation names are not the bridge's: "Intermediate servers that do
// not recognize an Mcp-Param-{Name} header MUST forward it and otherwise
// ignore it".
func checkParamHeaders(hd http.Header, body []byte, annotated []pool.ParamHeader) string {
	_, msg := paramHeaderMismatch(hd, body, annotated)
	return msg
}

// paramHeaderMismatch is checkParamHeaders, which also returns the
// header it is about.
func paramHeaderMismatch(hd http.Header, body []byte, annotated []pool.ParamHeader) (header, reason string) {
	if len(annotated) == 0 {
		return "", ""
	}
	params, _ := jsonrpc.Lookup(body, "params")
	args, _ := jsonrpc.Lookup(params, "arguments")
	for _, a := range annotated {
		key := "Mcp-Param-" + a.Name
		vals := hd.Values(key)
		raw, present := args, true
		for _, k := range a.Path {
			if raw, present = jsonrpc.Lookup(raw, k); !present {
				break
			}
		}
		if !present || string(raw) == "null" {
			if len(vals) > 0 {
				return key, "the " + key + " header is present but " + a.Field() + " is absent or null in the body"
			}
			continue
		}
		if len(vals) != 1 {
			return key, "exactly one " + key + " header is required: " + a.Field() + " is in the body"
		}
		v := vals[0]
		// "Servers MUST reject requests with a recognized Mcp-Param-{Name}
		// header that contains invalid characters".
		if !validHeaderValue(v) {
			return key, "the " + key + " header contains characters other than visible ASCII, space and tab (send such a value in the =?base64?...?= form)"
		}
		decoded, ok := decodeHeaderValue(v)
		if !ok {
			return key, "the " + key + " header is not valid base64 in its =?base64?...?= form"
		}
		if !headerMatches(decoded, raw) {
			return key, key + " header value " + quote(v) + " does not match body value " + a.Field() + " " + string(raw)
		}
	}
	return "", ""
}

// headerMatches compares a decoded header value with the JSON value it
// mirrors: a string as is, a boolean as "true" or "false", an integer
// numerically ("When validating integer parameter values, servers SHOULD
// compare the header value and the body value numerically rather than as
// strings (e.g., 42.0 and 42 are considered equal)"). Other values (numbers
// with a fraction, objects, arrays) cannot be mirrored: no header matches.
func headerMatches(header string, raw []byte) bool {
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '"':
		s, ok := jsonrpc.StringValue(raw)
		return ok && s == header
	case string(raw) == "true" || string(raw) == "false":
		return header == string(raw)
	}
	body, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || body != math.Trunc(body) || math.Abs(body) > maxSafeInteger {
		return false
	}
	h, err := strconv.ParseFloat(strings.TrimSpace(header), 64)
	return err == nil && h == body
}

// maxSafeInteger bounds the integers a header may mirror: "Integer values
// MUST be within the safe range for JavaScript (-2^53+1 to 2^53-1)".
const maxSafeInteger = 1<<53 - 1

// validHeaderValue reports whether a header value has only the characters
// the spec allows in plain form: "visible ASCII characters (0x21-0x7E),
// space (0x20), and horizontal tab (0x09)" (Value Encoding). net/http
// lets bytes from 0x80 through.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
}

// decodeHeaderValue decodes the "=?base64?...?=" form of a header value
// (basic/transports/streamable-http, Value Encoding).
func decodeHeaderValue(v string) (string, bool) {
	inner, ok := strings.CutPrefix(v, "=?base64?")
	if !ok || !strings.HasSuffix(inner, "?=") {
		return v, true
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(inner, "?="))
	if err != nil {
		return "", false
	}
	return string(b), true
}

func quote(s string) string { return "'" + s + "'" }

// methodNotAllowed answers GET and DELETE without a session: "HTTP GET or
// DELETE to the MCP endpoint: respond with 405 Method Not Allowed"
// (revision 2026-07-28 to clients of earlier ones without a session).
func methodNotAllowed(w http.ResponseWriter) {
	w.Header().Set("Allow", "POST")
	WriteError(w, http.StatusMethodNotAllowed, nil, jsonrpc.CodeInvalidRequest,
		"Method Not Allowed: without Mcp-Session-Id this endpoint takes POST (revision "+pool.Version+"); start a session with initialize to use GET and DELETE", nil)
}

package connect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

const (
	sessionIDHeader       = "Mcp-Session-Id"
	protocolVersionHeader = "Mcp-Protocol-Version"
	lastEventIDHeader     = "Last-Event-Id"
	// revisionStateless is the first revision without the standalone GET
	// stream (SEP-2575).
	revisionStateless = "2026-07-28"
)

// streamable speaks Streamable HTTP: each message is a POST; an answer
// comes as one JSON body or an SSE stream, which is resumed with GET and
// Last-Event-ID when it breaks; the standalone GET stream carries what
// the server sends outside requests.
type streamable struct {
	*forwarder
	auto bool // fall back to HTTP+SSE on a 4xx answer to initialize
	// ctx ends this transport's requests and streams; cancel is called by
	// close (which may precede a fallback, so it is not the forwarder's).
	ctx    context.Context
	cancel context.CancelFunc

	// wg counts the goroutines of POSTs and streams; close waits for them
	// after cancelling the forwarder's context.
	wg sync.WaitGroup

	mu              sync.Mutex
	sessionID       string
	protocolVersion string // from the initialize result that passed through
	initID          string // the id of the initialize request in flight
	standalone      bool   // the standalone stream was started
	// calls cancels the stream of each request in flight, by id, when
	// the client cancels the request (notifications/cancelled): "The
	// sender of the cancellation notification SHOULD ignore any response
	// to the request that arrives afterward."
	calls map[string]context.CancelFunc
	// stateless holds the ids of the requests in flight sent in revision
	// 2026-07-28, whose cancellation is the closing of their stream.
	stateless map[string]bool
	// toolLists holds the ids of the tools/list requests in flight, whose
	// answers tell the x-mcp-header annotations of each tool (tools).
	toolLists map[string]bool
	tools     map[string][]paramHeader
	// listedFor holds the tools a listing of bridge connect's own was
	// made for, so that a tool the remote does not list costs one.
	listedFor map[string]bool
	ownID     int // the last id of bridge connect's own requests
}

func newStreamable(f *forwarder, auto bool) *streamable {
	ctx, cancel := context.WithCancel(f.ctx)
	return &streamable{forwarder: f, auto: auto, ctx: ctx, cancel: cancel}
}

// send POSTs one message. It returns once the request is written (so the
// server receives messages in the client's order) but never waits for an
// answer, except for initialize, whose status decides the transport.
func (s *streamable) send(env *envelope, raw []byte) (err error) {
	isInit := env.isRequest() && env.Method == "initialize"
	pv := metaProtocolVersion(env.Params)
	if env.Method == "notifications/cancelled" && s.cancelStateless(env.Params) {
		// "closing the SSE response stream is itself the cancellation
		// signal" (2026-07-28): the notification is not sent.
		return nil
	}
	if isInit {
		s.mu.Lock()
		s.initID = string(env.ID)
		s.mu.Unlock()
	}
	ctx := s.ctx
	if env.isRequest() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(s.ctx)
		key := string(env.ID)
		s.mu.Lock()
		if s.calls == nil {
			s.calls = make(map[string]context.CancelFunc)
		}
		s.calls[key] = cancel
		if pv >= revisionStateless {
			if s.stateless == nil {
				s.stateless = make(map[string]bool)
			}
			s.stateless[key] = true
		}
		if env.Method == "tools/list" {
			if s.toolLists == nil {
				s.toolLists = make(map[string]bool)
			}
			s.toolLists[key] = true
		}
		s.mu.Unlock()
		defer func() {
			if err != nil {
				s.endCall(key)
			}
		}()
	}
	req, err := s.post(ctx, env, raw, pv)
	if err != nil {
		return err
	}
	if isInit {
		resp, err := s.client.Do(req)
		if err != nil {
			return fmt.Errorf("sending initialize to %s: %w", s.opts.URL, err)
		}
		if s.auto && resp.StatusCode >= 400 && resp.StatusCode < 500 &&
			resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			// "If it fails with an HTTP 4xx status code (e.g., 405 Method
			// Not Allowed or 404 Not Found): Issue a GET request to the
			// server URL, expecting that this will open an SSE stream and
			// return an endpoint event as the first event." (2025-03-26,
			// backwards compatibility). 401 and 403 are about credentials,
			// which the old transport would refuse too.
			drain(resp)
			return errFallback
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.endCall(string(env.ID))
			s.handle(ctx, env, resp)
		}()
		return nil
	}

	written := make(chan struct{})
	var once sync.Once
	markWritten := func() { once.Do(func() { close(written) }) }
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { markWritten() },
	}))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer markWritten()
		if env.isRequest() {
			defer s.endCall(string(env.ID))
		}
		resp, err := s.client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("a message did not reach the remote", "method", env.Method, "err", err)
				s.answerError(env.ID, codeInternalError, fmt.Sprintf("bridge connect: the remote %s was not reached: %v", s.opts.URL, err))
			}
			return
		}
		markWritten()
		resp = s.retryHeaderMismatch(ctx, env, raw, pv, resp)
		s.handle(ctx, env, resp)
		switch env.Method {
		case "notifications/initialized":
			s.startStandalone()
		case "notifications/cancelled":
			s.cancelCall(env.Params)
		}
	}()
	select {
	case <-written:
	case <-s.ctx.Done():
	}
	return nil
}

// post builds the POST of one message with the headers it needs.
func (s *streamable) post(ctx context.Context, env *envelope, raw []byte, pv string) (*http.Request, error) {
	req, err := s.newRequest(ctx, http.MethodPost, raw)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if pv != "" {
		req.Header.Set(protocolVersionHeader, pv)
	}
	if v := req.Header.Get(protocolVersionHeader); v >= revisionStateless {
		s.learnToolOf(ctx, env, v)
		s.setStatelessHeaders(req.Header, env)
	}
	return req, nil
}

// retryHeaderMismatch sends a tools/call of revision 2026-07-28 again when
// the remote refused its Mcp-Param headers: "If the server rejects a
// request with a HeaderMismatch error because required Mcp-Param-*
// headers are missing or do not match the body, the client SHOULD call
// tools/list to check for changes to the tool's inputSchema, then retry
// the original request with the appropriate headers." Once; it returns
// the answer to hand on (the first one, when there is no retry).
func (s *streamable) retryHeaderMismatch(ctx context.Context, env *envelope, raw []byte, pv string, resp *http.Response) *http.Response {
	if env.Method != "tools/call" || pv < revisionStateless || resp.StatusCode != http.StatusBadRequest {
		return resp
	}
	body, err := readBody(resp.Body, 64<<10)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var m struct {
		Error *rpcError `json:"error"`
	}
	if err != nil || json.Unmarshal(body, &m) != nil || m.Error == nil || m.Error.Code != codeHeaderMismatch {
		return resp
	}
	var p struct {
		Name string `json:"name"`
	}
	json.Unmarshal(env.Params, &p)
	s.mu.Lock()
	delete(s.tools, p.Name)
	delete(s.listedFor, p.Name)
	s.mu.Unlock()
	s.log.Info("the remote refused the Mcp-Param headers of a call: listing its tools again, then retrying", "tool", p.Name, "error", m.Error.Message)
	req, err := s.post(ctx, env, raw, pv)
	if err != nil {
		return resp
	}
	again, err := s.client.Do(req)
	if err != nil {
		return resp
	}
	return again
}

// codeHeaderMismatch is the HeaderMismatch error of revision 2026-07-28.
const codeHeaderMismatch = -32020

// endCall forgets the request id and stops its stream.
func (s *streamable) endCall(id string) {
	s.mu.Lock()
	cancel := s.calls[id]
	delete(s.calls, id)
	delete(s.stateless, id)
	delete(s.toolLists, id)
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// cancelCall stops the stream of the request a notifications/cancelled
// names, once the notification has reached the remote.
func (s *streamable) cancelCall(params json.RawMessage) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) == nil && isID(p.RequestID) {
		s.endCall(string(bytes.TrimSpace(p.RequestID)))
	}
}

// cancelStateless stops the stream of the request a notifications/cancelled
// names when that request was sent in revision 2026-07-28, and reports
// whether it did.
func (s *streamable) cancelStateless(params json.RawMessage) bool {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || !isID(p.RequestID) {
		return false
	}
	id := string(bytes.TrimSpace(p.RequestID))
	s.mu.Lock()
	stateless := s.stateless[id]
	s.mu.Unlock()
	if stateless {
		s.endCall(id)
	}
	return stateless
}

// newRequest builds a request to the remote with the session's headers.
func (s *streamable) newRequest(ctx context.Context, method string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.opts.URL, r)
	if err != nil {
		return nil, fmt.Errorf("request to %s: %w", s.opts.URL, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessionID != "" {
		req.Header.Set(sessionIDHeader, s.sessionID)
	}
	if s.protocolVersion != "" {
		// "the client MUST include the MCP-Protocol-Version: <version>
		// HTTP header on all subsequent requests" (2025-06-18).
		req.Header.Set(protocolVersionHeader, s.protocolVersion)
	}
	return req, nil
}

// handle reads the answer to one POST.
func (s *streamable) handle(ctx context.Context, env *envelope, resp *http.Response) {
	defer drain(resp)
	if sid := resp.Header.Get(sessionIDHeader); sid != "" {
		s.mu.Lock()
		if s.sessionID == "" {
			s.sessionID = sid
		}
		s.mu.Unlock()
	}
	what := "a message"
	if env.Method != "" {
		what = env.Method
	}
	if !s.checkStatus(resp, env.ID, what) {
		return
	}
	if !env.isRequest() {
		return // 202 Accepted for a notification or a response
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		wd := newWatchdog(s.opts.EventTimeout, func() { resp.Body.Close() })
		wd.arm()
		body, err := readBody(resp.Body, s.opts.MaxMessageBytes)
		wd.disarm()
		if err == nil {
			err = s.deliverRemote(body)
		} else if wd.fired.Load() {
			err = wd.err("the JSON answer")
		}
		if err != nil {
			s.log.Error("the remote's answer was not forwarded", "method", what, "err", err)
			s.answerError(env.ID, codeInternalError, fmt.Sprintf("bridge connect: the answer of the remote to %s was refused: %v", what, err))
			return
		}
	case "text/event-stream":
		s.stream(ctx, env.ID, resp)
	default:
		s.answerError(env.ID, codeInternalError, fmt.Sprintf("bridge connect: the remote answered %s with Content-Type %q", what, ct))
	}
}

// checkStatus reports whether resp succeeded. When not, it answers the
// request id with an error, or fails the whole forwarder when the remote
// refused the credentials or ended the session.
func (s *streamable) checkStatus(resp *http.Response, id json.RawMessage, what string) bool {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return true
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		s.fail(s.unauthorized(resp.StatusCode, resp.Header.Get("WWW-Authenticate"), what))
		return false
	case resp.StatusCode == http.StatusNotFound && s.SessionID() != "":
		// "The server MAY terminate the session at any time, after which
		// it MUST respond to requests containing that session ID with
		// HTTP 404 Not Found." A stdio server has no way to make its
		// client start over, so it ends, as a crashed server would.
		s.fail(fmt.Errorf("%w (404 to %s, session %s): restart the client to start a new one", ErrSessionGone, what, s.SessionID()))
		return false
	}
	body, _ := readBody(resp.Body, 64<<10)
	// The bridge and the SDKs put a JSON-RPC error in the body: pass its
	// code and message on.
	var msg struct {
		Error *rpcError `json:"error"`
	}
	rerr := rpcError{Code: codeInternalError}
	if resp.StatusCode < 500 {
		rerr.Code = codeInvalidRequest
	}
	if json.Unmarshal(body, &msg) == nil && msg.Error != nil {
		rerr = *msg.Error
	} else {
		rerr.Message = fmt.Sprintf("bridge connect: the remote answered %s with %s: %s", what, resp.Status, strings.TrimSpace(string(body)))
	}
	if !isID(id) {
		s.log.Warn("the remote refused a message", "method", what, "status", resp.StatusCode, "error", rerr.Message)
		return false
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{"2.0", id, rerr})
	if err == nil {
		s.deliver(b)
	}
	return false
}

func (s *streamable) SessionID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionID
}

// deliverRemote writes a message of the remote to stdout, noting the
// protocol revision when it is the answer to initialize. A message that is
// not JSON-RPC (not UTF-8, not a JSON object or array) is refused with a
// *badMessageError: the stdio client would choke on it.
func (s *streamable) deliverRemote(msg []byte) error {
	if err := checkMessage(msg); err != nil {
		return err
	}
	s.mu.Lock()
	initID := s.initID
	listing := len(s.toolLists) > 0
	s.mu.Unlock()
	if listing {
		var res struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(msg, &res) == nil && isID(res.ID) && res.Result != nil {
			s.mu.Lock()
			ok := s.toolLists[string(bytes.TrimSpace(res.ID))]
			s.mu.Unlock()
			if ok {
				s.learnTools(res.Result)
			}
		}
	}
	if initID != "" && bytes.Contains(msg, []byte(`"protocolVersion"`)) {
		var res struct {
			ID     json.RawMessage `json:"id"`
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if json.Unmarshal(msg, &res) == nil && string(res.ID) == initID && res.Result.ProtocolVersion != "" {
			s.mu.Lock()
			s.protocolVersion, s.initID = res.Result.ProtocolVersion, ""
			s.mu.Unlock()
		}
	}
	s.deliver(msg)
	return nil
}

// startStandalone opens the GET stream once the session is initialized:
// "The client MAY issue an HTTP GET to the MCP endpoint. This can be used
// to open an SSE stream, allowing the server to communicate to the client,
// without the client first sending data via HTTP POST."
func (s *streamable) startStandalone() {
	s.mu.Lock()
	if s.standalone || s.protocolVersion >= revisionStateless {
		s.mu.Unlock()
		return
	}
	s.standalone = true
	s.mu.Unlock()
	resp, err := s.get(s.ctx, "")
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("the standalone SSE stream could not be opened: messages the server sends outside requests are lost", "err", err)
		}
		return
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		// "or else return HTTP 405 Method Not Allowed, indicating that the
		// server does not offer an SSE stream at this endpoint."
		drain(resp)
		s.log.Debug("the remote offers no standalone SSE stream (405)")
		return
	}
	if !s.checkStatus(resp, nil, "the standalone GET") {
		drain(resp)
		return
	}
	s.stream(s.ctx, nil, resp)
}

// get opens a GET stream, resuming after lastID when it is not empty.
func (s *streamable) get(ctx context.Context, lastID string) (*http.Response, error) {
	req, err := s.newRequest(ctx, http.MethodGet, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set(lastEventIDHeader, lastID)
	}
	return s.client.Do(req)
}

// stream forwards the events of an SSE answer, for the request callID (nil
// for the standalone stream), resuming it with Last-Event-ID when the
// connection breaks before the answer: "the client SHOULD ... issue an
// HTTP GET to the MCP endpoint with the Last-Event-ID header".
func (s *streamable) stream(ctx context.Context, callID json.RawMessage, resp *http.Response) {
	what := "the standalone stream"
	if callID != nil {
		what = "the stream of request " + string(callID)
	}
	var lastID, progressID string
	retry := DefaultRetry
	tries := 0
	for {
		answered, err := s.readEvents(resp.Body, callID, &lastID, &retry)
		resp.Body.Close()
		if answered || ctx.Err() != nil {
			return
		}
		if isHostile(err) {
			// Resuming would replay the same event: give up the stream.
			s.log.Error("closed a stream of the remote", "stream", what, "err", err)
			if callID == nil {
				s.log.Error("messages the remote sends outside requests are lost from now on")
			}
			s.answerError(callID, codeInternalError, fmt.Sprintf("bridge connect: closed the remote's stream: %v", err))
			return
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			s.log.Warn("a stream of the remote broke", "stream", what, "err", err)
		}
		if lastID == "" && callID != nil {
			// Without an event ID there is nothing to resume from.
			s.answerError(callID, codeInternalError, "bridge connect: the remote closed the stream before answering")
			return
		}
		if lastID != progressID {
			progressID, tries = lastID, 0
		}
		if tries++; tries > maxRetries {
			s.log.Warn("giving up resuming a stream that brings nothing new", "stream", what, "tries", maxRetries)
			s.answerError(callID, codeInternalError, "bridge connect: the remote's stream broke and could not be resumed")
			return
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		resp, err = s.get(ctx, lastID)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("resuming a stream failed", "stream", what, "err", err)
				s.answerError(callID, codeInternalError, fmt.Sprintf("bridge connect: resuming the stream failed: %v", err))
			}
			return
		}
		if !s.checkStatus(resp, callID, "resuming "+what) {
			return
		}
	}
}

// readEvents forwards the message events of one SSE body. It reports
// whether the answer to callID was among them, and keeps the last event ID
// and the retry delay the server announced.
//
// Every bound holds as the bytes arrive: an event's data may not grow past
// MaxMessageBytes (errEventTooLarge, before the blank line that would end
// it), and a line or an event, once its first byte arrived, must arrive
// whole within EventTimeout (errDrip; the body is closed). An event that is
// not a JSON-RPC message ends the stream of a request with a
// *badMessageError, and is skipped on the standalone stream.
func (s *streamable) readEvents(body io.Reader, callID json.RawMessage, lastID *string, retry *time.Duration) (bool, error) {
	r := bufio.NewReaderSize(body, 64<<10)
	closeBody := func() {}
	if c, ok := body.(io.Closer); ok {
		closeBody = func() { c.Close() }
	}
	wd := newWatchdog(s.opts.EventTimeout, closeBody)
	defer wd.disarm()
	max := s.opts.MaxMessageBytes
	var data []byte
	var event string
	hasData, inEvent := false, false
	for {
		// The first byte of a line arms the watchdog; the wait for it
		// between events is not bounded.
		if _, err := r.Peek(1); err == nil {
			wd.arm()
		}
		line, err := readLine(r, max)
		if wd.fired.Load() {
			return false, wd.err("an SSE event")
		}
		if errors.Is(err, errLineTooLong) {
			return false, fmt.Errorf("%w: an SSE line over %d bytes", errEventTooLarge, max)
		}
		if err != nil && len(line) == 0 {
			if err == io.EOF {
				return false, nil
			}
			return false, err
		}
		if len(line) == 0 {
			// A blank line dispatches the event; an empty data buffer
			// dispatches nothing (SSE spec), such as the priming events
			// of 2025-11-25, an id with empty data.
			if len(data) > 0 && (event == "" || event == "message") {
				if err := s.deliverRemote(data); err != nil {
					if callID != nil {
						return false, err
					}
					s.log.Error("skipped an event of the remote's standalone stream", "err", err)
				} else if callID != nil && isAnswerTo(data, callID) {
					return true, nil
				}
			}
			data, event, hasData, inEvent = data[:0], "", false, false
			wd.disarm()
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if len(field) > 0 {
			inEvent = true // a comment (empty field name) is no part of one
		}
		switch string(field) {
		case "data":
			if len(data)+1+len(value) > max {
				// Checked per line, not when the event ends: an endless
				// event must not grow the process.
				return false, fmt.Errorf("%w: an SSE event over %d bytes (raise --max-message-bytes)", errEventTooLarge, max)
			}
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			event = string(value)
		case "id":
			if !bytes.ContainsRune(value, 0) {
				*lastID = string(value)
			}
		case "retry":
			if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
				*retry = time.Duration(ms) * time.Millisecond
			}
		}
		if !inEvent {
			wd.disarm()
		}
		if err != nil { // the last line had no end
			return false, nil
		}
	}
}

var (
	errEventTooLarge = errors.New("message too large")
	errDrip          = errors.New("the remote is too slow")
)

// badMessageError is a message of the remote that is not JSON-RPC.
type badMessageError struct{ why string }

func (e *badMessageError) Error() string {
	return "a message of the remote is not JSON-RPC: " + e.why
}

// isHostile reports whether err is a bound or a malformed message, after
// which a stream is not resumed.
func isHostile(err error) bool {
	var bad *badMessageError
	return errors.Is(err, errEventTooLarge) || errors.Is(err, errDrip) || errors.As(err, &bad)
}

// checkMessage refuses what must not reach stdout: a line there is a JSON
// object (a message) or array (a batch of 2025-03-26) in UTF-8 ("Messages
// are individual JSON-RPC requests, notifications, or responses", "JSON-RPC
// messages MUST be UTF-8 encoded").
func checkMessage(msg []byte) error {
	if !utf8.Valid(msg) {
		return &badMessageError{"it is not valid UTF-8"}
	}
	t := bytes.TrimSpace(msg)
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return &badMessageError{"it is not a JSON object"}
	}
	if !json.Valid(t) {
		return &badMessageError{"it is not valid JSON"}
	}
	return nil
}

// watchdog closes a body when what began arriving does not end in time.
type watchdog struct {
	d     time.Duration
	stop  func()
	t     *time.Timer
	fired atomic.Bool
}

func newWatchdog(d time.Duration, stop func()) *watchdog {
	if d <= 0 {
		d = DefaultEventTimeout
	}
	return &watchdog{d: d, stop: stop}
}

// arm starts the countdown unless it runs already.
func (w *watchdog) arm() {
	if w.t == nil {
		w.t = time.AfterFunc(w.d, func() { w.fired.Store(true); w.stop() })
	}
}

func (w *watchdog) disarm() {
	if w.t != nil {
		w.t.Stop()
		w.t = nil
	}
}

func (w *watchdog) err(what string) error {
	return fmt.Errorf("%w: %s did not arrive whole within %v of its first byte (a slow drip; raise --event-timeout if the remote is just slow)", errDrip, what, w.d)
}

// isAnswerTo reports whether msg is the response to request id.
func isAnswerTo(msg []byte, id json.RawMessage) bool {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	return json.Unmarshal(msg, &m) == nil && m.Method == "" && bytes.Equal(bytes.TrimSpace(m.ID), bytes.TrimSpace(id))
}

// close stops every stream, then ends the session: "Clients that no longer
// need a particular session ... SHOULD send an HTTP DELETE to the MCP
// endpoint with the Mcp-Session-Id header, to explicitly terminate the
// session." 405 means the server does not allow it, which is fine.
func (s *streamable) close() {
	sid := s.SessionID()
	s.cancel()
	s.wg.Wait()
	if sid == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), deleteTimeout)
	defer cancel()
	req, err := s.newRequest(ctx, http.MethodDelete, nil)
	if err != nil {
		return
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.log.Warn("ending the remote session failed; it ends at the remote's idle timeout", "session", sid, "err", err)
		return
	}
	drain(resp)
	s.log.Debug("ended the remote session", "session", sid, "status", resp.StatusCode)
}

// readBody reads at most max bytes of body.
func readBody(body io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("a body over %d bytes", max)
	}
	return b, nil
}

// drain closes resp's body, after reading what remains of a short body of
// known length so that the connection can be reused (never a stream's: a
// server may keep it open).
func drain(resp *http.Response) {
	if resp.ContentLength >= 0 && resp.ContentLength <= 4<<10 {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
}

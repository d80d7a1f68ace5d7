package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Request is one stateless request, as the front end validated it.
type Request struct {
	// Principal is who sends it: the owner tag of its principal ("" without
	// authentication). Legacy children are never shared across principals,
	// each principal holds its share of the children at most, and a
	// requestState is good for its principal only.
	Principal auth.Tag
	// Caller is who sends it as the front end established it, in full
	// (subject, client and scopes), for the interception point: the
	// call's Caller method returns it (peer.Origin), and a call is the
	// Origin of its messages on the child's connection, so per-caller
	// policy holds on children shared by every client. No pool key
	// (Principal is); nil without authentication.
	Caller *auth.Principal
	// Msg is the JSON-RPC request.
	Msg jsonrpc.Message
	// Caps is _meta's io.modelcontextprotocol/clientCapabilities, as written.
	Caps json.RawMessage
	// Name is params.name, if the front end decoded it already (Call
	// reads it for a tools/call; "": Call decodes it).
	Name string
	// LogLevel is _meta's io.modelcontextprotocol/logLevel, or "".
	LogLevel string
	// Answer, if not nil, is memory of the caller's that Serve may build
	// its answer in (from Answer[:0], within its capacity): the answer it
	// returns may share it. Serve keeps no reference to it once it has
	// returned, so the caller may use it again once it is done with the
	// answer. (A decorated answer was an allocation per request; the
	// front end writes it and is done with it.)
	Answer []byte
}

// The sets of methods below are switches rather than maps: each request
// asks four or five of them, and a switch on a string costs a few
// comparisons where a map lookup costs a call and a probe.

// legacyMethod reports whether method is one of revision 2026-07-28 a
// legacy child can serve, mapped one to one.
func legacyMethod(method string) bool {
	switch method {
	case "tools/list", "tools/call",
		"prompts/list", "prompts/get",
		"resources/list", "resources/read", "resources/templates/list",
		"completion/complete":
		return true
	}
	return false
}

// inputMethod reports whether method may answer with an
// InputRequiredResult: "Servers MUST NOT send InputRequiredResult
// responses on any other client requests" (basic/patterns/mrtr).
func inputMethod(method string) bool {
	switch method {
	case "tools/call", "prompts/get", "resources/read":
		return true
	}
	return false
}

// cacheableMethod reports whether method's results are CacheableResults:
// "Require ttlMs and cacheScope fields on results returned by tools/list,
// prompts/list, resources/list, resources/read, and
// resources/templates/list" (changelog).
func cacheableMethod(method string) bool {
	switch method {
	case "tools/list", "prompts/list", "resources/list",
		"resources/read", "resources/templates/list":
		return true
	}
	return false
}

// removedMethod reports whether revision 2026-07-28 removed method: it is
// never passed to a child.
func removedMethod(method string) bool {
	switch method {
	case "initialize", "ping", "logging/setLevel",
		"resources/subscribe", "resources/unsubscribe":
		return true
	}
	return false
}

// IsKnown reports whether a legacy child can be asked method (the front
// end answers 404 for others, "If the server does not implement the
// requested RPC method, it MUST respond with 404 Not Found").
func (p *Pool) IsKnown(ctx context.Context, method string) (bool, error) {
	if method == "server/discover" || method == "subscriptions/listen" {
		return true, nil
	}
	if removedMethod(method) {
		return false, nil
	}
	era, err := p.Era(ctx)
	if err != nil {
		return false, err
	}
	return era == EraModern || legacyMethod(method), nil
}

// Serve answers one request. Messages the child sends for it before the
// answer (progress, logs) go to emit, in order (nil asks for a keep-alive
// comment on a long subscription stream); the answer is returned,
// with the request's own id. Errors the client should see as JSON-RPC
// errors are answers; Serve fails only when ctx ends (the request was
// cancelled: the child is told), when emit fails, when no child can start
// (ErrLaunch), at shutdown (ErrClosed), and with *ForwardError.
func (p *Pool) Serve(ctx context.Context, req *Request, emit func([]byte) error) ([]byte, error) {
	switch req.Msg.Env.Method {
	case "server/discover":
		return p.serveDiscover(ctx, req)
	case "subscriptions/listen":
		return p.subs.listen(ctx, req, emit)
	}
	era, err := p.Era(ctx)
	if err != nil {
		return nil, err
	}
	return p.serveEra(ctx, era, req, emit)
}

// serveEra is Serve once the children's era is known, for a method other
// than server/discover and subscriptions/listen.
func (p *Pool) serveEra(ctx context.Context, era Era, req *Request, emit func([]byte) error) ([]byte, error) {
	rawID := req.Msg.Env.IDAt.In(req.Msg.Data)
	method := req.Msg.Env.Method
	if era == EraModern {
		if removedMethod(method) {
			return errorResponse(rawID, jsonrpc.CodeMethodNotFound, "Method not found: "+method+" is not part of revision "+Version, nil), nil
		}
		if err := p.admit(); err != nil {
			return nil, err
		}
		defer p.leave()
		return p.serveModern(ctx, req, emit)
	}
	if !legacyMethod(method) {
		return errorResponse(rawID, jsonrpc.CodeMethodNotFound, "Method not found: "+method, nil), nil
	}
	if err := p.admit(); err != nil {
		return nil, err
	}
	defer p.leave()
	var params []byte
	if mentionsRequestState(req.Msg.Data) { // one fast scan spares two
		params, _ = jsonrpc.Lookup(req.Msg.Data, "params")
	}
	if rs, ok := jsonrpc.Lookup(params, "requestState"); ok {
		state, ok := jsonrpc.StringValue(rs)
		if !ok || !inputMethod(method) {
			return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: requestState must be the string of an InputRequiredResult of "+method, nil), nil
		}
		return p.retry(ctx, req, params, state, emit)
	}
	return p.serveLegacy(ctx, req, params, emit)
}

// serveModern passes a request through to a modern child.
func (p *Pool) serveModern(ctx context.Context, req *Request, emit func([]byte) error) ([]byte, error) {
	c := newCall(p, req)
	c.solo = req.LogLevel != ""
	if req.Msg.Env.Method == "tools/list" {
		c.toolsGen = p.tools.generation()
	}
	ch, err := p.acquire(ctx, modernKey, sharedOwner, nil, false, false, c)
	if err != nil {
		return nil, err
	}
	c.ch = ch
	if err := ch.conn.Send(c, req.Msg); err != nil {
		p.release(ch, c, false)
		return nil, p.sendFailed(err)
	}
	return c.wait(ctx, req.Msg.Env.IDAt.In(req.Msg.Data), req.Answer, emit)
}

// serveLegacy maps a request onto a legacy child of its principal and
// capabilities.
func (p *Pool) serveLegacy(ctx context.Context, req *Request, params []byte, emit func([]byte) error) ([]byte, error) {
	rawID := req.Msg.Env.IDAt.In(req.Msg.Data)
	key, caps, err := legacyKey(req.Principal, req.Caps)
	if err != nil {
		return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: "+MetaClientCapabilities+": "+err.Error(), nil), nil
	}
	c := newCall(p, req)
	c.legacy = true
	c.solo = req.LogLevel != ""
	if req.Msg.Env.Method == "tools/list" {
		c.toolsGen = p.tools.generation()
	}
	c.mayAsk = inputMethod(req.Msg.Env.Method)
	// A call that may ask holds its child, so that the child's questions
	// are attributed exactly; unless the client declared nothing the
	// child could ask for (then it is initialized without those
	// capabilities, and a question is refused; see child.Route).
	c.exclusive = c.mayAsk && declaresInputs(caps)
	ch, err := p.acquire(ctx, key, req.Principal, caps, true, c.exclusive, c)
	if err != nil {
		return nil, err
	}
	c.ch = ch
	if req.LogLevel != "" {
		ch.setLogLevel(ctx, req.LogLevel)
	}
	msg := legacyMessage(req.Msg)
	if err := ch.conn.Send(c, msg); err != nil {
		p.release(ch, c, false)
		return nil, p.sendFailed(err)
	}
	return c.wait(ctx, rawID, req.Answer, emit)
}

// legacyMessage is a client's request as a legacy child gets it: without
// the per-request members of revision 2026-07-28 in its _meta (protocol
// version, client capabilities and information, log level), which the
// child was given once, at initialize, in its own revision's terms. A
// server that reads them takes the request for one of revision 2026-07-28
// ("if the request carries io.modelcontextprotocol/protocolVersion in its
// _meta field, it follows the new sessionless protocol", the Go SDK's
// server): one limited to the 2025 revisions refuses it with "unsupported
// protocol version". Every other member (progressToken, a vendor's) goes
// through as written.
//
// The result is one copy of the message, whose Envelope is moved rather
// than read again (a second Parse was 7% of a stateless call's
// instructions).
func legacyMessage(m jsonrpc.Message) jsonrpc.Message {
	stripped, _ := m.WithoutMetaMembers(perRequestMeta)
	return stripped
}

// perRequestMeta reports the _meta members of revision 2026-07-28 that a
// 2025 revision carries at initialize instead.
func perRequestMeta(name []byte) bool {
	switch string(name) {
	case MetaProtocolVersion, MetaClientCapabilities, MetaClientInfo, MetaLogLevel:
		return true
	}
	return false
}

// call is one client request in flight on a child, through every round of
// its multi round-trip. It is the origin of its messages on the child's
// connection, so the child's answers and progress come back to it.
type call struct {
	pool      *Pool
	req       *Request // the first request: its id is the one the child knows
	reqv      Request  // what req points to: a copy, so that no Request escapes to the heap for its call
	ch        *child
	legacy    bool
	exclusive bool
	solo      bool   // it set a log level: it holds its child alone
	listen    bool   // a subscriptions/listen stream
	toolsGen  uint64 // for tools/list: the tool cache's generation at the start
	mayAsk    bool   // tools/call, prompts/get, resources/read
	digest    string // params digest, for the requestState (computed when parked)

	deadline peer.Timeout // the request timeout of the round served (Pool.timeouts)
	late     atomic.Bool  // it passed: wait answers with a timeout error

	mu     sync.Mutex
	caller *auth.Principal // the Caller of the request being served: the first, then each retry's
	// retried: a retry serves the call now; token is its
	// _meta.progressToken (nil: none), which the child's progress gets.
	retried bool
	token   []byte
	queue   []item
	first   [1]item       // queue's first backing array: most calls get one item, the answer
	signal  chan struct{} // cap 1: the queue grew
	over    bool          // answered or cancelled

	// Under pool.mu: the child whose calls list holds it (see takeLocked).
	on             *child
	prevOn, nextOn *call

	// Under pool.mu, while parked:
	stateID string
	round   int
	keys    int // input request keys handed out
	pending []pendingInput
	timer   *time.Timer
	active  bool // a retry is running the call
}

// pendingInput is a request of the child that waits for the client.
type pendingInput struct {
	key    string
	method string
	rawID  []byte // the child's id for it
	params json.RawMessage
}

// newCall returns the call of req.
func newCall(p *Pool, req *Request) *call {
	c := &call{pool: p, reqv: *req, caller: req.Caller, signal: make(chan struct{}, 1)}
	c.reqv.Answer = nil // the caller's, for this request's answer only
	c.req, c.queue = &c.reqv, c.first[:0]
	return c
}

// Caller is the Caller of the request the call serves now (a retry's
// once one resumes it: the same principal, whose token may have gained
// scopes), or nil. The interception point asks it of a message's Origin
// (peer.Origin): the answer it filters is the answer to that request.
func (c *call) Caller() *auth.Principal {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.caller
}

func (c *call) push(it item) {
	c.mu.Lock()
	c.queue = append(c.queue, it)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// next returns the next item, waiting until there is one, ctx ends or
// the request timeout passes (Expire).
func (c *call) next(ctx context.Context) (item, bool) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			it := c.queue[0]
			c.queue[0] = item{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return it, true
		}
		c.mu.Unlock()
		if c.late.Load() {
			return item{}, false
		}
		select {
		case <-c.signal:
		case <-ctx.Done():
			return item{}, false
		}
	}
}

// nextInput returns a queued input request without waiting, if one is next.
func (c *call) nextInput() (item, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 && c.queue[0].kind == itemInput {
		it := c.queue[0]
		c.queue = c.queue[1:]
		return it, true
	}
	return item{}, false
}

func (c *call) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// wait relays the child's messages for the call until its answer, which
// goes to rawID (the id of the request being answered: a retry's differs
// from the one the child knows), built in buf's memory if it fits (that
// request's Answer).
func (c *call) wait(ctx context.Context, rawID, buf []byte, emit func([]byte) error) ([]byte, error) {
	p := c.pool
	if p.timeouts != nil {
		// A new round (an MRTR retry) starts its own timeout. (An Expire
		// of the round before that ran as it was parked would have run
		// within nanoseconds of the park, a client's round trip ago.)
		c.late.Store(false)
		p.timeouts.Start(&c.deadline, c)
		defer p.timeouts.Stop(&c.deadline)
	}
	for {
		it, ok := c.next(ctx)
		if !ok {
			if ctx.Err() == nil {
				return p.timedOut(c, rawID), nil
			}
			p.cancelCall(c, "the client closed its response stream")
			return nil, ctx.Err()
		}
		switch it.kind {
		case itemNotify:
			data := it.msg.Data
			if it.msg.Env.Method == "notifications/progress" {
				if p.timeouts != nil {
					// A progress notification restarts the timeout, as
					// it does a session's (session.Options.RequestTimeout).
					p.timeouts.Restart(&c.deadline)
				}
				var ok bool
				if data, ok = c.progress(data); !ok {
					continue
				}
			}
			if err := emit(data); err != nil {
				p.cancelCall(c, "the client's response stream failed")
				return nil, err
			}
		case itemFinal:
			p.finish(c)
			if c.req.Msg.Env.Method == "tools/list" {
				params, _ := jsonrpc.Lookup(c.req.Msg.Data, "params")
				_, cursor := jsonrpc.Lookup(params, "cursor")
				p.tools.learnAnswer(c.toolsGen, !cursor, it.msg.Data)
			}
			return c.answer(it.msg, rawID, buf), nil
		case itemEnded:
			p.finish(c)
			return errorResponse(rawID, jsonrpc.CodeServerError, fmt.Sprintf("the MCP server ended before answering (%v); send the request again", it.err), nil), nil
		case itemInput:
			return c.park(it, rawID)
		}
	}
}

// progress renders a progress notification of the child for the request
// being served: after an MRTR round, the retry's. The child knows only
// the first request's progressToken, which the peer restored; the client
// tracks the retry's, and drops what carries another ("unknown token"). Without a token in the retry, it is dropped (false).
func (c *call) progress(data []byte) ([]byte, bool) {
	c.mu.Lock()
	retried, token := c.retried, c.token
	c.mu.Unlock()
	if !retried {
		return data, true
	}
	if token == nil {
		return nil, false
	}
	env, err := jsonrpc.Parse(data)
	if err != nil || env.ProgressToken == "" {
		return nil, false
	}
	return jsonrpc.Rewrite(data, jsonrpc.Edit{At: env.ProgressTokenAt, Raw: token}), true
}

// answer renders the child's answer for the client, in buf's memory if it
// fits.
func (c *call) answer(m jsonrpc.Message, rawID, buf []byte) []byte {
	if !c.legacy {
		return m.Data // a modern child's own answer, with the client's id restored
	}
	return c.pool.decorateMsg(m, rawID, c.req.Msg.Env.Method, c.ch.serverInfo, buf)
}

// finish ends a call that got its answer: its child is free again.
func (p *Pool) finish(c *call) {
	c.mu.Lock()
	c.over = true
	c.mu.Unlock()
	p.mu.Lock()
	if c.stateID != "" && p.parked[c.stateID] == c {
		delete(p.parked, c.stateID)
	}
	c.stopTimer()
	p.mu.Unlock()
	p.release(c.ch, c, true)
}

// cancelCall ends a call the client gave up: the child gets
// notifications/cancelled ("Closing the SSE response stream MUST be
// treated by the server as cancellation of that request",
// basic/transports/streamable-http). A child held by the call is stopped
// rather than reused: it may still ask or log about the call, and
// attribution must stay exact.
func (p *Pool) cancelCall(c *call, reason string) {
	c.mu.Lock()
	if c.over {
		c.mu.Unlock()
		return
	}
	c.over = true
	c.mu.Unlock()
	_ = c.ch.conn.Send(c, peer.CancelledNotification(c.req.Msg.Env.IDAt.In(c.req.Msg.Data), reason))
	p.mu.Lock()
	if c.stateID != "" && p.parked[c.stateID] == c {
		delete(p.parked, c.stateID)
	}
	c.stopTimer()
	if c.exclusive || c.solo {
		p.retireLocked(c.ch)
	}
	p.mu.Unlock()
	p.release(c.ch, c, false)
}

// capabilityFor is the client capability an input request needs.
func capabilityFor(method string) string {
	switch method {
	case "elicitation/create":
		return "elicitation"
	case "sampling/createMessage":
		return "sampling"
	case "roots/list":
		return "roots"
	}
	return ""
}

// park answers the client with an InputRequiredResult for the child's
// request (and any others already queued behind it), leaving the call on
// its child until the retry or expiry.
func (c *call) park(first item, rawID []byte) ([]byte, error) {
	p := c.pool
	inputs := []item{first}
	for {
		it, ok := c.nextInput()
		if !ok {
			break
		}
		inputs = append(inputs, it)
	}
	var declared map[string]json.RawMessage
	_ = json.Unmarshal(c.req.Caps, &declared)
	var missing []string
	for _, it := range inputs {
		if capName := capabilityFor(it.msg.Env.Method); declared[capName] == nil && !contains(missing, capName) {
			missing = append(missing, capName)
		}
	}
	if len(missing) > 0 {
		// "Servers MUST NOT send an inputRequests that the client has not
		// declared support for in its capabilities" (basic/patterns/mrtr).
		for _, it := range inputs {
			c.ch.answerError(it.msg, jsonrpc.CodeInvalidRequest, "the client did not declare the capability this needs")
		}
		p.cancelCall(c, "the client lacks a capability the server asked for")
		req := map[string]any{}
		for _, m := range missing {
			req[m] = map[string]any{}
		}
		return errorResponse(rawID, CodeMissingRequiredClientCapability,
			"Missing required client capability: the server asks for "+joinQuoted(missing)+" during this request",
			map[string]any{"requiredCapabilities": req}), nil
	}
	if c.digest == "" {
		params, _ := jsonrpc.Lookup(c.req.Msg.Data, "params")
		var err error
		if c.digest, err = paramsDigest(params); err != nil {
			for _, it := range inputs {
				c.ch.answerError(it.msg, jsonrpc.CodeInternalError, "the client's request cannot be resumed")
			}
			p.cancelCall(c, "the request's params cannot be digested")
			return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil), nil
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.cancelCall(c, "the bridge is shutting down")
		return errorResponse(rawID, jsonrpc.CodeServerError, "the bridge is shutting down; send the request again", nil), nil
	}
	for _, it := range inputs {
		c.keys++
		params, _ := jsonrpc.Lookup(it.msg.Data, "params")
		c.pending = append(c.pending, pendingInput{
			key:    "input-" + strconv.Itoa(c.keys),
			method: it.msg.Env.Method,
			rawID:  it.msg.Env.IDAt.In(it.msg.Data),
			params: params,
		})
	}
	result := c.parkLocked()
	p.mu.Unlock()
	return response(rawID, result), nil
}

// parkLocked registers the call as parked for another round and renders
// its InputRequiredResult.
func (c *call) parkLocked() []byte {
	p := c.pool
	if c.stateID == "" {
		c.stateID = randomID()
	}
	c.round++
	c.active = false
	p.parked[c.stateID] = c
	round := c.round
	c.stopTimer()
	c.timer = time.AfterFunc(p.opts.StateTTL, func() { p.expire(c, round) })
	state := p.signer.Sign(&State{
		ID: c.stateID, Round: round, Instance: p.opts.Instance,
		Principal: principalDigest(c.req.Principal),
		Method:    c.req.Msg.Env.Method, Digest: c.digest,
		Expires: time.Now().Add(p.opts.StateTTL).UnixMilli(),
	})
	requests := make(map[string]any, len(c.pending))
	for _, in := range c.pending {
		r := map[string]any{"method": in.method}
		if in.params != nil {
			r["params"] = in.params
		}
		requests[in.key] = r
	}
	out := map[string]any{
		"resultType":    "input_required",
		"inputRequests": requests,
		"requestState":  state,
	}
	if c.ch.serverInfo != nil {
		out["_meta"] = map[string]any{MetaServerInfo: c.ch.serverInfo}
	}
	b, _ := json.Marshal(out)
	return b
}

// expire ends a parked call whose client did not come back: the child's
// questions are declined or cancelled, the call is cancelled, its child
// freed.
func (p *Pool) expire(c *call, round int) {
	p.mu.Lock()
	if p.parked[c.stateID] != c || c.round != round || c.active {
		p.mu.Unlock()
		return
	}
	delete(p.parked, c.stateID)
	pending := c.pending
	c.pending = nil
	p.mu.Unlock()
	p.logger.Info("a parked request expired: the client did not retry it", "method", c.req.Msg.Env.Method, "ttl", p.opts.StateTTL)
	c.declineAll(pending)
	p.cancelCall(c, "the client did not answer the server's request in time")
}

// declineAll answers the child's pending questions without the client:
// elicitations are cancelled, the others fail.
func (c *call) declineAll(pending []pendingInput) {
	for _, in := range pending {
		var b []byte
		if in.method == "elicitation/create" {
			b = response(in.rawID, []byte(`{"action":"cancel"}`))
		} else {
			b = errorResponse(in.rawID, jsonrpc.CodeInternalError, "the client did not answer in time", nil)
		}
		c.ch.send(b)
	}
}

// retry resumes a parked call with the client's inputResponses.
func (p *Pool) retry(ctx context.Context, req *Request, params []byte, raw string, emit func([]byte) error) ([]byte, error) {
	rawID := req.Msg.Env.IDAt.In(req.Msg.Data)
	refuse := func(err error) ([]byte, error) {
		return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil), nil
	}
	st, err := p.signer.Parse(raw)
	if err != nil {
		return refuse(err)
	}
	digest, err := paramsDigest(params)
	if err != nil {
		return refuse(err)
	}
	if err := st.Check(time.Now(), req.Principal, req.Msg.Env.Method, digest); err != nil {
		return refuse(err)
	}
	if st.Instance != p.opts.Instance {
		return nil, &ForwardError{Instance: st.Instance}
	}
	var responses map[string]json.RawMessage
	if ir, ok := jsonrpc.Lookup(params, "inputResponses"); ok {
		if err := json.Unmarshal(ir, &responses); err != nil {
			return refuse(fmt.Errorf("inputResponses must be an object: %w", err))
		}
	}
	p.mu.Lock()
	c := p.parked[st.ID]
	switch {
	case c == nil:
		p.mu.Unlock()
		return refuse(errors.New("the request this requestState continues has ended (answered, cancelled, expired, or the bridge restarted); send it again without requestState"))
	case c.round != st.Round || c.active:
		p.mu.Unlock()
		return refuse(errors.New("this requestState was already used; retry with the latest one"))
	}
	c.active = true
	c.stopTimer()
	meta, _ := jsonrpc.Lookup(params, "_meta")
	token, _ := jsonrpc.Lookup(meta, "progressToken")
	c.mu.Lock()
	c.caller = req.Caller // the same principal (Check): its token's scopes now
	c.retried, c.token = true, bytes.Clone(token)
	c.mu.Unlock()
	var answered, missing []pendingInput
	for _, in := range c.pending {
		if _, ok := responses[in.key]; ok {
			answered = append(answered, in)
		} else {
			missing = append(missing, in)
		}
	}
	c.pending = missing
	p.mu.Unlock()
	for _, in := range answered {
		c.ch.send(response(in.rawID, responses[in.key]))
	}
	if len(missing) > 0 {
		// "If the client fails to send all the information requested ...
		// the server SHOULD respond with a new InputRequiredResult
		// requesting the missing information again" (basic/patterns/mrtr).
		for {
			it, ok := c.nextInput()
			if !ok {
				break
			}
			p.mu.Lock()
			c.keys++
			ps, _ := jsonrpc.Lookup(it.msg.Data, "params")
			c.pending = append(c.pending, pendingInput{key: "input-" + strconv.Itoa(c.keys), method: it.msg.Env.Method, rawID: it.msg.Env.IDAt.In(it.msg.Data), params: ps})
			p.mu.Unlock()
		}
		p.mu.Lock()
		result := c.parkLocked()
		p.mu.Unlock()
		return response(rawID, result), nil
	}
	return c.wait(ctx, rawID, req.Answer, emit)
}

// declaresInputs reports whether canonical client capabilities declare
// anything a legacy child may ask for mid-call.
func declaresInputs(caps json.RawMessage) bool {
	var found [len(inputCapabilities)][]byte
	jsonrpc.LookupEach(caps, inputCapabilities[:], found[:])
	return found[0] != nil || found[1] != nil || found[2] != nil
}

// inputCapabilities are the client capabilities a legacy child may use
// mid-call.
var inputCapabilities = [...]string{"elicitation", "sampling", "roots"}

// decorateMsg is decorate without decoding the result, in the common case:
// a result object without _meta, resultType, ttlMs or cacheScope gets them
// inserted after its '{', in one copy of the answer, made in buf's memory
// if it fits.
func (p *Pool) decorateMsg(m jsonrpc.Message, rawID []byte, method string, serverInfo json.RawMessage, buf []byte) []byte {
	data := m.Data
	// The Envelope located the result as it parsed the answer: no need to
	// read the answer again.
	at := m.Env.ResultAt
	if m.Env.IsError || at.IsZero() || int(at.End) > len(data) || data[at.Start] != '{' || data[at.End-1] != '}' {
		return p.decorate(data, rawID, method, serverInfo)
	}
	res := data[at.Start:at.End]
	// A result with a member of these names takes the slow path, which
	// is right for every result. They are looked for as written first
	// (one fast scan of a result that has none); a name may also be
	// written with \u escapes (the short ones, such as \n, stand for no
	// character of these names): "resultT\u0079pe" is resultType, and
	// inserting ours before it would let the child's win, as the last of
	// two. Only a member of the result itself
	// counts: a tool's own _meta in a list, or the names in a text, do
	// not make it slow.
	if mentionsDecoration(res) || bytes.Contains(res, []byte(`\u`)) {
		var found [len(decorationNames)][]byte
		if !jsonrpc.LookupEach(res, decorationNames[:], found[:]) ||
			found[0] != nil || found[1] != nil || found[2] != nil || found[3] != nil {
			return p.decorate(data, rawID, method, serverInfo)
		}
	}
	// What goes after the result's '{' (built on the stack), and the
	// client's id: one copy of the answer, in buf or of its exact size.
	var insBuf [192]byte
	ins := append(insBuf[:0], `"resultType":"complete"`...)
	if serverInfo != nil {
		ins = append(ins, `,"_meta":{"`+MetaServerInfo+`":`...)
		ins = append(ins, serverInfo...)
		ins = append(ins, '}')
	}
	if cacheableMethod(method) {
		ins = append(ins, `,"ttlMs":0,"cacheScope":`...)
		ins = append(ins, p.cacheScope()...)
	}
	if len(bytes.TrimSpace(res[1:len(res)-1])) > 0 {
		ins = append(ins, ',')
	}
	after := at.Start + 1
	edits := [2]jsonrpc.Edit{{At: jsonrpc.Span{Start: after, End: after}, Raw: ins}}
	if idAt := m.Env.IDAt; !idAt.IsZero() && !bytes.Equal(idAt.In(data), rawID) {
		edits[1] = jsonrpc.Edit{At: idAt, Raw: rawID}
	}
	return jsonrpc.AppendRewrite(buf[:0], data, edits[:]...)
}

// decorationNames are the members of a result that decorate sets.
var decorationNames = [...]string{"_meta", "resultType", "ttlMs", "cacheScope"}

// mentionsDecoration reports whether res holds "_meta", "resultType",
// "ttlMs" or "cacheScope" (quotes included) anywhere: bytes.Contains of
// each. Each is looked for from a byte of it that JSON seldom has, as
// mentionsRequestState does: four IndexByte scans (vectorized) of a short
// result cost a third of one loop over its bytes testing each for a
// quote, and a fraction of it for a large one.
func mentionsDecoration(res []byte) bool {
	return anchored(res, '_', `"`, `meta"`) || anchored(res, 'T', `"result`, `ype"`) ||
		anchored(res, 'M', `"ttl`, `s"`) || anchored(res, 'S', `"cache`, `cope"`)
}

// mentionsRequestState is bytes.Contains(data, []byte(`"requestState"`)),
// anchored on the rare capital S rather than on the quote that every
// JSON string starts with: bytes.Index, finding a quote every few bytes,
// falls back to comparing at every position (2k instructions for a short
// request).
func mentionsRequestState(data []byte) bool {
	return anchored(data, 'S', `"request`, `tate"`)
}

// anchored reports whether data holds before, anchor and after, in a row:
// it finds each anchor with bytes.IndexByte, then compares around it.
func anchored(data []byte, anchor byte, before, after string) bool {
	for i := 0; ; i++ {
		j := bytes.IndexByte(data[i:], anchor)
		if j < 0 {
			return false
		}
		i += j
		if i >= len(before) && string(data[i-len(before):i]) == before && hasPrefix(data[i+1:], after) {
			return true
		}
	}
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// decorate turns a legacy child's answer into one of revision 2026-07-28:
// resultType, serverInfo, ttlMs and cacheScope on a result; retired error
// codes rewritten. "-32002 — resource not found (2025-11-25 and earlier;
// replaced by -32602) ... -32042 — URL elicitation required (2025-11-25
// only). Implementations of this protocol version MUST NOT emit these
// codes" (basic/index, Error Codes).
func (p *Pool) decorate(data, rawID []byte, method string, serverInfo json.RawMessage) []byte {
	result, rpcErr, err := jsonrpc.DecodeResponse(data)
	switch {
	case err != nil:
		return errorResponse(rawID, jsonrpc.CodeInternalError, "the MCP server's answer is not valid: "+err.Error(), nil)
	case rpcErr != nil:
		switch rpcErr.Code {
		case -32002:
			rpcErr.Code = jsonrpc.CodeInvalidParams
		case -32042:
			rpcErr.Code = jsonrpc.CodeInternalError
			rpcErr.Message = "the server requires a URL elicitation, which revision " + Version + " carries in an InputRequiredResult: " + rpcErr.Message
		}
		return rpcErr.Response(rawID)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(result, &m); err != nil || m == nil {
		return errorResponse(rawID, jsonrpc.CodeInternalError, "the MCP server's result is not an object", nil)
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	if serverInfo != nil {
		meta := map[string]json.RawMessage{}
		if old, ok := m["_meta"]; ok {
			_ = json.Unmarshal(old, &meta)
		}
		meta[MetaServerInfo] = serverInfo
		m["_meta"], _ = json.Marshal(meta)
	}
	if cacheableMethod(method) {
		// A legacy server says nothing of freshness: its list_changed
		// notifications are the only signal, so nothing is fresh.
		if _, ok := m["ttlMs"]; !ok {
			m["ttlMs"] = json.RawMessage(`0`)
		}
		if _, ok := m["cacheScope"]; !ok {
			m["cacheScope"] = p.cacheScope()
		}
	}
	b, _ := json.Marshal(m)
	return response(rawID, b)
}

func (p *Pool) cacheScope() json.RawMessage {
	if p.opts.PrivateCache {
		return json.RawMessage(`"private"`)
	}
	return json.RawMessage(`"public"`)
}

// serveDiscover answers server/discover for the bridge: the child's
// identity and capabilities (a modern child's own discover result, or a
// legacy child's initialize result), and the revisions of both eras the
// bridge serves on this endpoint.
func (p *Pool) serveDiscover(ctx context.Context, req *Request) ([]byte, error) {
	rawID := req.Msg.Env.IDAt.In(req.Msg.Data)
	era, err := p.Era(ctx)
	if err != nil {
		return nil, err
	}
	base := map[string]json.RawMessage{}
	if era == EraModern {
		p.mu.Lock()
		d := p.discover
		p.mu.Unlock()
		if d == nil {
			c := newCall(p, req)
			ch, err := p.acquire(ctx, modernKey, sharedOwner, nil, false, false, c)
			if err != nil {
				return nil, err
			}
			d, err = ch.conn.Call(ctx, "server/discover", map[string]any{"_meta": map[string]any{
				MetaProtocolVersion: Version, MetaClientCapabilities: map[string]any{}, MetaClientInfo: bridgeInfo}})
			p.release(ch, c, err == nil)
			if err != nil {
				var rpcErr *jsonrpc.Error
				if errors.As(err, &rpcErr) {
					return rpcErr.Response(rawID), nil
				}
				return nil, err
			}
			p.mu.Lock()
			p.discover = d
			p.mu.Unlock()
		}
		_ = json.Unmarshal(d, &base)
	} else {
		p.mu.Lock()
		init := p.init
		p.mu.Unlock()
		if init == nil {
			key, caps, err := legacyKey(req.Principal, req.Caps)
			if err != nil {
				return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil), nil
			}
			c := newCall(p, req)
			ch, err := p.acquire(ctx, key, req.Principal, caps, true, false, c)
			if err != nil {
				return nil, err
			}
			p.release(ch, c, false) // nothing was sent: its initialize result is known
			init = ch.init
		}
		var r struct {
			Capabilities json.RawMessage `json:"capabilities"`
			ServerInfo   json.RawMessage `json:"serverInfo"`
			Instructions json.RawMessage `json:"instructions"`
		}
		_ = json.Unmarshal(init, &r)
		base["capabilities"] = r.Capabilities
		if r.Capabilities == nil {
			base["capabilities"] = json.RawMessage(`{}`)
		}
		if r.Instructions != nil {
			base["instructions"] = r.Instructions
		}
		if r.ServerInfo != nil {
			base["_meta"], _ = json.Marshal(map[string]json.RawMessage{MetaServerInfo: r.ServerInfo})
		}
	}
	base["resultType"] = json.RawMessage(`"complete"`)
	base["supportedVersions"], _ = json.Marshal(append([]string{Version}, p.opts.OtherVersions...))
	base["ttlMs"] = json.RawMessage(strconv.FormatInt(DefaultDiscoverTTL.Milliseconds(), 10))
	base["cacheScope"] = p.cacheScope()
	b, _ := json.Marshal(base)
	return response(rawID, b), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func joinQuoted(list []string) string {
	s := ""
	for i, x := range list {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(x)
	}
	return s
}

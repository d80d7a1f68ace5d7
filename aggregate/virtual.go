package aggregate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// maxLine bounds a message a virtual child reads from its client.
const maxLine = 1 << 30

// virtual is a virtual child: one client (a 2025 session, or a pool's
// child slot) of the aggregate. Its stdin loop answers what the catalog
// knows and hands the rest to member children (slots), started on first
// need; what they send comes back through their Routers. It is the
// Origin of what it sends them (peer.Origin).
type virtual struct {
	a       *Aggregate
	id      string
	session string
	ctx     context.Context // the launch's values (the principal's credentials), never cancelled
	logger  *slog.Logger

	inR  *io.PipeReader // the loop reads what the client writes
	inW  *io.PipeWriter
	outR *io.PipeReader // the client reads what the virtual child writes
	outW *io.PipeWriter
	wmu  sync.Mutex // one message at a time on outW

	mu          sync.Mutex
	clientCaps  json.RawMessage
	clientInfo  json.RawMessage
	initialized bool
	slots       map[*member]*slot
	inflight    map[jsonrpc.ID]*slot // the client's requests, by id
	relays      map[jsonrpc.ID]relay // the requests of members to the client, by the id the client knows
	next        int64                // the last id given to a relayed request
	logLevel    json.RawMessage
	stopping    bool
	// refused are the members ended for this virtual child by their pin
	// enforcer (slot.pinEnded), with why: out of its lists, their
	// requests refused.
	refused map[*member]error

	wg       sync.WaitGroup // slots' goroutines, list waits
	stopOnce sync.Once
	quit     chan struct{} // closed when stopping begins: waits end
	done     chan struct{} // closed once everything stopped
}

// Caller is nil: a virtual child reads its client's messages as the lines
// of its stdin, which say nobody's principal, so its members' guards see
// no caller (what a member's policy allows nobody, no caller gets).
func (v *virtual) Caller() *auth.Principal { return nil }

// relay is a member child's request to the client, under a fresh id.
type relay struct {
	s     *slot
	rawID []byte // the id as the member child wrote it
}

func (a *Aggregate) launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	a.life.Lock()
	closed := a.closed
	a.life.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: session %s: the aggregate %q is closed", sandbox.ErrLaunch, sessionID, a.opts.Name)
	}
	a.mu.Lock()
	a.seq++
	v := &virtual{
		a: a, id: "aggregate " + a.opts.Name + " #" + strconv.FormatInt(a.seq, 10), session: sessionID,
		ctx:   context.WithoutCancel(ctx),
		slots: map[*member]*slot{}, inflight: map[jsonrpc.ID]*slot{}, relays: map[jsonrpc.ID]relay{},
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	v.logger = a.logger.With("session", sessionID)
	v.inR, v.inW = io.Pipe()
	v.outR, v.outW = io.Pipe()
	a.virtuals[v] = struct{}{}
	a.mu.Unlock()
	go v.loop()
	return v, nil
}

func (v *virtual) ID() string            { return v.id }
func (v *virtual) Stdin() io.WriteCloser { return v.inW }
func (v *virtual) Stdout() io.Reader     { return v.outR }
func (v *virtual) Wait() error           { <-v.done; return nil }

// Stop ends the virtual child: its member children are stopped (each in
// bounded steps), then its stdout ends.
func (v *virtual) Stop(ctx context.Context) error {
	v.inR.CloseWithError(io.ErrClosedPipe)
	select {
	case <-v.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop reads the client's messages until stdin ends, then stops.
func (v *virtual) loop() {
	sc := bufio.NewScanner(v.inR)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		data := append([]byte(nil), line...)
		env, err := jsonrpc.Parse(data)
		if err != nil {
			v.write(jsonrpc.ErrorResponse(jsonrpc.RawID(data), jsonrpc.CodeParseError, err.Error(), nil))
			continue
		}
		v.handle(jsonrpc.Message{Data: data, Env: env})
	}
	v.stop()
}

// stop stops the member children, ends stdout and marks the child exited.
func (v *virtual) stop() {
	v.stopOnce.Do(func() {
		v.inR.CloseWithError(io.ErrClosedPipe)
		close(v.quit)
		v.mu.Lock()
		v.stopping = true
		slots := make([]*slot, 0, len(v.slots))
		for _, s := range v.slots {
			slots = append(slots, s)
		}
		v.mu.Unlock()
		v.a.mu.Lock()
		delete(v.a.virtuals, v)
		v.a.mu.Unlock()
		// The member children stop side by side: each in bounded steps.
		ctx, cancel := context.WithTimeout(context.Background(), v.a.opts.StopBudget)
		var stopping sync.WaitGroup
		for _, s := range slots {
			stopping.Go(func() { s.close(ctx) })
		}
		stopping.Wait()
		cancel()
		v.wg.Wait()
		v.outW.Close()
		close(v.done)
	})
}

// write puts one message on stdout as one line.
func (v *virtual) write(data []byte) {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	if _, err := v.outW.Write(data); err == nil {
		_, _ = v.outW.Write(newline)
	}
}

var newline = []byte{'\n'}

func (v *virtual) answer(env *jsonrpc.Envelope, data []byte, result any) {
	b, _ := json.Marshal(result)
	out := append([]byte(`{"jsonrpc":"2.0","id":`), env.IDAt.In(data)...)
	out = append(append(append(out, `,"result":`...), b...), '}')
	v.write(out)
}

func (v *virtual) fail(env *jsonrpc.Envelope, data []byte, code int, msg string) {
	v.write(jsonrpc.ErrorResponse(env.IDAt.In(data), code, msg, nil))
}

// CodeResourceNotFound answers a read of a URI no member serves
// (server/resources, "Error Handling": "Resource not found: -32002").
const CodeResourceNotFound = -32002

func (v *virtual) handle(m jsonrpc.Message) {
	env := &m.Env
	switch env.Kind {
	case jsonrpc.KindResponse:
		v.relayAnswer(m)
		return
	case jsonrpc.KindNotification:
		v.notification(m)
		return
	}
	switch env.Method {
	case "initialize":
		v.initialize(m)
	case "ping":
		v.answer(env, m.Data, struct{}{})
	case "tools/list":
		v.list(m, kindTools)
	case "prompts/list":
		v.list(m, kindPrompts)
	case "resources/list":
		v.list(m, kindResources)
	case "resources/templates/list":
		v.list(m, kindTemplates)
	case "tools/call":
		v.byName(m, false)
	case "prompts/get":
		v.byName(m, true)
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		v.byURI(m)
	case "completion/complete":
		v.complete(m)
	case "logging/setLevel":
		v.setLevel(m)
	default:
		v.fail(env, m.Data, jsonrpc.CodeMethodNotFound, "method not found: "+env.Method)
	}
}

// initialize answers with the merged capabilities and instructions.
func (v *virtual) initialize(m jsonrpc.Message) {
	var p struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ClientInfo      json.RawMessage `json:"clientInfo"`
	}
	if params, ok := jsonrpc.Lookup(m.Data, "params"); ok {
		_ = json.Unmarshal(params, &p)
	}
	v.mu.Lock()
	v.clientCaps, v.clientInfo = p.Capabilities, p.ClientInfo
	v.mu.Unlock()
	// "If the server supports the requested protocol version, it MUST
	// respond with the same version. Otherwise, the server MUST respond
	// with another protocol version it supports" (basic/lifecycle). The
	// virtual child forwards messages as they are; it speaks each 2025
	// revision as its members do.
	version := ProtocolVersion
	switch p.ProtocolVersion {
	case "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25":
		version = p.ProtocolVersion
	}
	a := v.a
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.InitializeTimeout)
	_ = a.Ready(ctx) // the capabilities of members still loading then are left out
	cancel()
	view := a.currentView()
	res := map[string]any{
		"protocolVersion": version,
		"capabilities":    view.caps,
		"serverInfo":      map[string]any{"name": a.opts.Name, "version": "1"},
	}
	if view.instructions != "" {
		res["instructions"] = view.instructions
	}
	v.answer(&m.Env, m.Data, res)
}

// view is the aggregate's view, or, once a member child of this virtual
// child changed its lists, one with that child's own lists (fetched
// first if they changed again).
// Without fetch, the own lists last fetched serve (routing, which must
// not wait for a member in the client's loop).
func (v *virtual) view(fetch bool) *view {
	a := v.a
	v.mu.Lock()
	var dirty []*slot
	var over map[*member]*lists
	for _, s := range v.slots {
		if fetch && s.dirty && s.conn != nil {
			dirty = append(dirty, s)
		}
	}
	v.mu.Unlock()
	for _, s := range dirty {
		cat, _ := s.m.snapshot()
		if cat == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.InitializeTimeout)
		l := &lists{caps: cat.caps, instructions: cat.instructions}
		v.mu.Lock()
		conn := s.conn
		s.dirty = false
		v.mu.Unlock()
		err := s.m.fetch(ctx, conn, l)
		cancel()
		v.mu.Lock()
		if err == nil {
			s.own = l
		} else {
			v.logger.Warn("aggregate: listing a member child's own lists failed; the catalog's serve", "member", s.m.cfg.Name, "err", err)
		}
		v.mu.Unlock()
	}
	v.mu.Lock()
	for _, s := range v.slots {
		if s.own != nil {
			if over == nil {
				over = map[*member]*lists{}
			}
			over[s.m] = s.own
		}
	}
	refused := make([]*member, 0, len(v.refused))
	for m := range v.refused {
		refused = append(refused, m)
	}
	v.mu.Unlock()
	for _, m := range refused {
		// Its capabilities stay (a client initialized with them), its
		// items go.
		if cat, _ := m.snapshot(); cat != nil {
			if over == nil {
				over = map[*member]*lists{}
			}
			over[m] = &lists{caps: cat.caps}
		}
	}
	cur := a.currentView()
	if over == nil {
		return cur
	}
	return a.build(cur.members, over)
}

// list answers a list from the catalog, once every member was tried.
func (v *virtual) list(m jsonrpc.Message, k kind) {
	a := v.a
	if p, ok := jsonrpc.Lookup(m.Data, "params"); ok {
		if c, ok := jsonrpc.Lookup(p, "cursor"); ok && string(c) != "null" {
			// The aggregate's lists are one page: it gave no cursor.
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, "invalid cursor: the aggregate's lists have one page")
			return
		}
	}
	ready := func() {
		view := v.view(true)
		if a.opts.FailClosed && len(view.down) > 0 {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, downMessage(view.down[0], view.downErr[0])+" (the aggregate fails closed)")
			return
		}
		out := append([]byte(`{"jsonrpc":"2.0","id":`), m.Env.IDAt.In(m.Data)...)
		out = append(append(append(out, `,"result":`...), view.lists[k]...), '}')
		v.write(out)
	}
	if v.ownLists() == 0 && a.ready() { // ready already: answered at once
		ready()
		return
	}
	// Not in the loop: the client's other requests go on meanwhile (a
	// member a reload added may take a while to list).
	ctx, cancel := context.WithCancel(context.Background())
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		defer cancel()
		ctx, stop := context.WithTimeout(ctx, a.opts.InitializeTimeout)
		defer stop()
		go func() { // ends with ctx, or makes it end
			select {
			case <-v.quit:
				stop()
			case <-ctx.Done():
			}
		}()
		_ = a.Ready(ctx)
		ready()
	}()
}

// ownLists counts the member children of this virtual child whose own
// lists replace the catalog's.
func (v *virtual) ownLists() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := len(v.refused)
	for _, s := range v.slots {
		if s.dirty || s.own != nil {
			n++
		}
	}
	return n
}

func refusedMessage(m *member, err error) string {
	return fmt.Sprintf("aggregate member %q was ended for this session: %v; the other members go on", m.cfg.Name, err)
}

func downMessage(m *member, err error) string {
	return fmt.Sprintf("aggregate member %q is unavailable: %v; it is started again with backoff", m.cfg.Name, err)
}

// byName routes a tools/call or prompts/get by its advertised name, with
// params.name rewritten to the member's own.
func (v *virtual) byName(m jsonrpc.Message, prompt bool) {
	a := v.a
	adv := m.Env.Name(m.Data)
	view := a.currentView()
	if v.ownLists() > 0 {
		view = v.view(false)
	}
	routes := view.tools
	what := "tool"
	if prompt {
		routes, what = view.prompts, "prompt"
	}
	r, ok := routes[adv]
	if !ok {
		mem, name := view.memberOf(a, adv)
		if mem == nil {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, fmt.Sprintf("unknown %s %q: the aggregate's names begin with a member's prefix", what, adv))
			return
		}
		r = route{mem, name} // not listed (yet): the member says whether it knows it
	}
	m.Data = m.Env.Rewrite(m.Data, jsonrpc.Edit{At: m.Env.NameAt, Raw: jsonString(r.name)})
	v.send(r.m, m, view)
}

// byURI routes resources/read, subscribe and unsubscribe by params.uri.
func (v *virtual) byURI(m jsonrpc.Message) {
	a := v.a
	var uri string
	if p, ok := jsonrpc.Lookup(m.Data, "params"); ok {
		if u, ok := jsonrpc.Lookup(p, "uri"); ok {
			uri, _ = jsonrpc.StringValue(u)
		}
	}
	view := a.currentView()
	mem := view.resource(a, uri)
	if mem == nil {
		msg := "Resource not found: no member of the aggregate serves " + strconv.Quote(uri)
		if err := view.clash(uri); err != nil {
			msg = "Resource not found: " + err.Error()
		}
		v.write(jsonrpc.ErrorResponse(m.Env.IDAt.In(m.Data), CodeResourceNotFound, msg, map[string]string{"uri": uri}))
		return
	}
	// The aggregate declares resources.subscribe when some member does;
	// a subscription to a resource of a member that does not is refused
	// here, without starting that member's child, so that the pool, which
	// subscribes the virtual child to each URI of a subscriptions/listen,
	// leaves the URI out of its acknowledgment: "The notifications field
	// in the acknowledgment reflects the subset the server agreed to
	// honor" (basic/patterns/subscriptions, 2026-07-28). A member down
	// says nothing now: the request goes on and fails naming it.
	if m.Env.Method == "resources/subscribe" && mem.subscribable() == subscribeNo {
		v.fail(&m.Env, m.Data, jsonrpc.CodeMethodNotFound, fmt.Sprintf(
			"resources/subscribe: aggregate member %q, which serves %q, does not support resource subscriptions", mem.cfg.Name, uri))
		return
	}
	v.send(mem, m, view)
}

// complete routes completion/complete by its ref: a prompt's advertised
// name (rewritten), or a resource template's URI.
func (v *virtual) complete(m jsonrpc.Message) {
	a := v.a
	var p struct {
		Ref struct {
			Type string `json:"type"`
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"ref"`
	}
	params, _ := jsonrpc.Lookup(m.Data, "params")
	_ = json.Unmarshal(params, &p)
	view := a.currentView()
	switch p.Ref.Type {
	case "ref/prompt":
		r, ok := view.prompts[p.Ref.Name]
		if !ok {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, fmt.Sprintf("unknown prompt %q", p.Ref.Name))
			return
		}
		var whole map[string]json.RawMessage
		var pm map[string]json.RawMessage
		var ref map[string]json.RawMessage
		if json.Unmarshal(m.Data, &whole) != nil || json.Unmarshal(whole["params"], &pm) != nil || json.Unmarshal(pm["ref"], &ref) != nil {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, "invalid params")
			return
		}
		ref["name"] = jsonString(r.name)
		pm["ref"], _ = json.Marshal(ref)
		whole["params"], _ = json.Marshal(pm)
		data, _ := json.Marshal(whole)
		env, err := jsonrpc.Parse(data)
		if err != nil {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, "invalid params")
			return
		}
		v.send(r.m, jsonrpc.Message{Data: data, Env: env}, view)
	case "ref/resource":
		mem := view.templateURIs[p.Ref.URI]
		if mem == nil {
			mem = view.resource(a, p.Ref.URI)
		}
		if err := view.clash(p.Ref.URI); err != nil {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, err.Error())
			return
		}
		if mem == nil {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, fmt.Sprintf("no member of the aggregate serves %q", p.Ref.URI))
			return
		}
		v.send(mem, m, view)
	default:
		v.fail(&m.Env, m.Data, jsonrpc.CodeInvalidParams, fmt.Sprintf("unknown ref type %q", p.Ref.Type))
	}
}

// setLevel keeps the level for member children started later and sets it
// on those running.
func (v *virtual) setLevel(m jsonrpc.Message) {
	params, _ := jsonrpc.Lookup(m.Data, "params")
	v.mu.Lock()
	v.logLevel = append(json.RawMessage(nil), params...)
	slots := make([]*slot, 0, len(v.slots))
	for _, s := range v.slots {
		slots = append(slots, s)
	}
	v.mu.Unlock()
	for _, s := range slots {
		s.setLevel(params)
	}
	v.answer(&m.Env, m.Data, struct{}{})
}

// notification handles the client's notifications.
func (v *virtual) notification(m jsonrpc.Message) {
	switch m.Env.Method {
	case "notifications/initialized":
		v.mu.Lock()
		v.initialized = true
		v.mu.Unlock()
	case "notifications/cancelled":
		v.mu.Lock()
		s := v.inflight[m.Env.RequestID]
		v.mu.Unlock()
		if s != nil {
			s.enqueue(m)
		}
	case "notifications/roots/list_changed":
		v.mu.Lock()
		for _, s := range v.slots {
			s.enqueue(m)
		}
		v.mu.Unlock()
	}
}

// relayAnswer passes the client's answer to a member child's request
// back, under the id the member gave it.
func (v *virtual) relayAnswer(m jsonrpc.Message) {
	v.mu.Lock()
	r, ok := v.relays[m.Env.ID]
	delete(v.relays, m.Env.ID)
	v.mu.Unlock()
	if !ok {
		v.logger.Debug("aggregate: dropping an answer to no request of a member", "id", string(m.Env.ID))
		return
	}
	m.Data = m.Env.Rewrite(m.Data, jsonrpc.Edit{At: m.Env.IDAt, Raw: r.rawID})
	r.s.enqueue(m)
}

// send hands a client request to the member's child of this virtual
// child, starting one if needed.
func (v *virtual) send(mem *member, m jsonrpc.Message, view *view) {
	a := v.a
	if a.opts.FailClosed && len(view.down) > 0 {
		v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, downMessage(view.down[0], view.downErr[0])+" (the aggregate fails closed)")
		return
	}
	for i, d := range view.down {
		if d == mem {
			v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, downMessage(mem, view.downErr[i]))
			return
		}
	}
	v.mu.Lock()
	if v.stopping {
		v.mu.Unlock()
		v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, "the aggregate's session is ending")
		return
	}
	if mem.removed.Load() {
		// Update sets it before it sweeps this virtual child's slots
		// (under v.mu): no slot of a removed member outlives the sweep.
		v.mu.Unlock()
		v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, removedMessage(mem))
		return
	}
	if err := v.refused[mem]; err != nil {
		v.mu.Unlock()
		v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, refusedMessage(mem, err))
		return
	}
	s := v.slots[mem]
	if s == nil {
		limit := a.opts.MaxChildren
		if limit == 0 {
			limit = len(view.members)
		}
		if len(v.slots) >= limit {
			v.mu.Unlock()
			v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, fmt.Sprintf(
				"cannot start aggregate member %q: this session already runs %d member servers, the aggregate's bound per session; a member server stops once idle for the idle timeout", mem.cfg.Name, limit))
			return
		}
		if !a.takeChild() {
			v.mu.Unlock()
			v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, fmt.Sprintf(
				"cannot start aggregate member %q: the aggregate runs %d member servers, its bound across sessions; try again later", mem.cfg.Name, a.opts.MaxChildrenTotal))
			return
		}
		s = newSlot(v, mem)
		v.slots[mem] = s
		v.wg.Add(1)
		go s.run()
	}
	if m.Env.Kind == jsonrpc.KindRequest {
		v.inflight[m.Env.ID] = s
		s.busy++
		s.stopIdle()
	}
	v.mu.Unlock()
	s.enqueue(m)
}

// answered forgets a client request the member answered (or that was
// answered for it), and arms the member's idle timer when it was the
// last. Called with v.mu held.
func (v *virtual) answeredLocked(id jsonrpc.ID, s *slot) {
	if v.inflight[id] != s {
		return
	}
	delete(v.inflight, id)
	s.busy--
	if s.busy == 0 {
		s.armIdle()
	}
}

// listChanged sends the client the list_changed notifications, once it
// is initialized.
func (v *virtual) listChanged(methods []string) {
	v.mu.Lock()
	ok := v.initialized && !v.stopping
	v.mu.Unlock()
	if !ok {
		return
	}
	for _, method := range methods {
		v.write([]byte(`{"jsonrpc":"2.0","method":"` + method + `"}`))
	}
}

// errStopped ends what a slot had queued when it stops.
var errStopped = errors.New("the member server was stopped")

// slot is a member's child serving one virtual child.
type slot struct {
	v *virtual
	m *member

	qmu   sync.Mutex
	queue []jsonrpc.Message
	qsig  chan struct{} // a message was queued (buffered, 1)
	quit  chan struct{} // closed to stop run
	qonce sync.Once

	// Guarded by v.mu:
	conn   *peer.Conn // once started
	busy   int        // the client's requests in flight on it
	subs   int        // resources it is subscribed to
	idle   *time.Timer
	ended  bool
	closed bool
	// dirty: the child said its lists changed since own was fetched;
	// own: its own lists, which replace the catalog's for this virtual
	// child (a server whose lists differ per session).
	dirty bool
	own   *lists
	// onEnd is what Member.Intercept gave to tell of this slot's child's
	// end (nil: nothing): set before the child's connection starts, read
	// by Ended, which that connection calls.
	onEnd func(error)
}

func newSlot(v *virtual, m *member) *slot {
	return &slot{v: v, m: m, qsig: make(chan struct{}, 1), quit: make(chan struct{})}
}

func (s *slot) enqueue(m jsonrpc.Message) {
	s.qmu.Lock()
	s.queue = append(s.queue, m)
	s.qmu.Unlock()
	select {
	case s.qsig <- struct{}{}:
	default:
	}
}

// run starts the member's child, then writes what is queued to it, in
// order, until the slot stops.
func (s *slot) run() {
	v, a := s.v, s.v.a
	defer v.wg.Done()
	conn, err := s.start()
	if err != nil {
		v.logger.Warn("aggregate member could not start for a session", "member", s.m.cfg.Name, "err", err)
		s.gone(fmt.Sprintf("aggregate member %q could not start: %v", s.m.cfg.Name, err))
		return
	}
	for {
		select {
		case <-s.qsig:
		case <-s.quit:
			return // close stops the child
		case <-conn.Done():
			// It ended on its own (Ended answered its requests): the
			// process is still ours to release.
			ctx, cancel := context.WithTimeout(context.Background(), a.opts.InitializeTimeout)
			_ = conn.Close(ctx)
			cancel()
			return
		}
		s.qmu.Lock()
		msgs := s.queue
		s.queue = nil
		s.qmu.Unlock()
		for _, m := range msgs {
			if m.Env.Kind == jsonrpc.KindRequest && m.Env.Method == "resources/subscribe" {
				v.mu.Lock()
				s.subs++
				v.mu.Unlock()
			}
			if err := conn.Send(v, m); err != nil && m.Env.Kind == jsonrpc.KindRequest {
				v.mu.Lock()
				v.answeredLocked(m.Env.ID, s)
				v.mu.Unlock()
				v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, fmt.Sprintf("aggregate member %q: %v", s.m.cfg.Name, err))
			}
		}
	}
}

// start launches and initializes the member's child, with the client's
// capabilities (so that the member asks for elicitation, sampling and
// roots only when the client has them).
func (s *slot) start() (*peer.Conn, error) {
	v, a := s.v, s.v.a
	ctx, cancel := context.WithTimeout(v.ctx, a.opts.InitializeTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	child := v.session + "/" + s.m.cfg.Name
	proc, err := s.m.launch(ctx, child)
	if err != nil {
		return nil, err
	}
	po := a.opts.Peer
	po.Intercept = nil
	if s.m.cfg.Intercept != nil {
		po.Intercept, s.onEnd = s.m.cfg.Intercept(child, s.pinEnded)
	}
	po.Logger = v.logger.With("member", s.m.cfg.Name)
	conn := peer.New(proc, s, &po)
	v.mu.Lock()
	caps, info, level := v.clientCaps, v.clientInfo, v.logLevel
	s.conn = conn
	closed := s.closed
	v.mu.Unlock()
	if closed {
		_ = conn.Close(context.Background())
		return nil, errStopped
	}
	if len(caps) == 0 {
		caps = json.RawMessage(`{}`)
	}
	if len(info) == 0 {
		info = json.RawMessage(`{"name":"` + a.opts.Name + `","version":"1"}`)
	}
	if _, err := conn.Initialize(ctx, map[string]any{"protocolVersion": ProtocolVersion, "capabilities": caps, "clientInfo": info}); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	if level != nil {
		s.setLevel(level)
	}
	return conn, nil
}

func (s *slot) setLevel(params json.RawMessage) {
	s.v.mu.Lock()
	conn := s.conn
	s.v.mu.Unlock()
	if conn == nil {
		return
	}
	s.v.wg.Add(1)
	go func() {
		defer s.v.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.v.a.opts.InitializeTimeout)
		defer cancel()
		_, _ = conn.Call(ctx, "logging/setLevel", params)
	}()
}

// gone removes the slot from its virtual child and answers the client's
// requests on it with msg.
func (s *slot) gone(msg string) {
	v := s.v
	v.mu.Lock()
	if v.slots[s.m] == s {
		delete(v.slots, s.m)
	}
	first := !s.ended
	s.ended = true
	if s.idle != nil {
		s.idle.Stop()
	}
	var ids []jsonrpc.ID
	for id, o := range v.inflight {
		if o == s {
			ids = append(ids, id)
			delete(v.inflight, id)
		}
	}
	for id, r := range v.relays {
		if r.s == s {
			delete(v.relays, id)
		}
	}
	s.busy = 0
	own := (s.dirty || s.own != nil) && v.initialized && !v.stopping
	v.mu.Unlock()
	if own {
		// The session's lists of the member are the catalog's again.
		v.listChanged([]string{"notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"})
	}
	if first {
		a := v.a
		a.releaseChild()
	}
	// The queue holds the raw ids of requests not yet written; the ones
	// written are answered by id.
	s.qmu.Lock()
	queued := s.queue
	s.queue = nil
	s.qmu.Unlock()
	answered := map[jsonrpc.ID]bool{}
	for _, m := range queued {
		if m.Env.Kind == jsonrpc.KindRequest {
			answered[m.Env.ID] = true
			v.fail(&m.Env, m.Data, jsonrpc.CodeInternalError, msg)
		}
	}
	for _, id := range ids {
		if !answered[id] {
			v.write(jsonrpc.ErrorResponse(id.AppendJSON(nil), jsonrpc.CodeInternalError, msg, nil))
		}
	}
	s.qonce.Do(func() { close(s.quit) })
}

// close stops the slot's child (at the end of its virtual child, or when
// idle).
func (s *slot) close(ctx context.Context) {
	v := s.v
	v.mu.Lock()
	s.closed = true
	conn := s.conn
	v.mu.Unlock()
	s.qonce.Do(func() { close(s.quit) })
	if conn != nil {
		_ = conn.Close(ctx)
	} else {
		s.gone(errStopped.Error())
	}
}

// pinEnded is the pin enforcer's end of the member's child (pin.Hooks.End,
// with --on-pin-violation end-session: the child's own lists, after it
// said they changed, hold what the lock refuses). On the member's own
// path the client's session would end; here the member ends for this
// virtual child, as that session would: its child stops, its requests in
// flight and later ones are refused with the reason, and its items leave
// this client's lists (list_changed), for as long as the virtual child
// lives. The other members go on: one member's drift does not cut the
// client off the others (see pinEnd, the same choice for the catalog).
// It runs on the child's reader: the child stops on a goroutine.
func (s *slot) pinEnded(err error) {
	v := s.v
	v.logger.Warn("aggregate member ended for this session: its pin enforcer refuses what it offers (--on-pin-violation end-session)",
		"member", s.m.cfg.Name, "err", err)
	v.mu.Lock()
	if v.refused == nil {
		v.refused = map[*member]error{}
	}
	v.refused[s.m] = err
	run := !v.stopping
	if run {
		// Before stop waits (it sets stopping under v.mu first).
		v.wg.Add(1)
	}
	v.mu.Unlock()
	if !run {
		return
	}
	go func() {
		defer v.wg.Done()
		s.gone(refusedMessage(s.m, err))
		ctx, cancel := context.WithTimeout(context.Background(), v.a.opts.StopBudget)
		s.close(ctx)
		cancel()
		v.listChanged([]string{"notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"})
	}()
}

// armIdle starts the idle timer. Called with v.mu held.
func (s *slot) armIdle() {
	a := s.v.a
	if a.opts.IdleTimeout < 0 || s.subs > 0 || s.ended {
		return
	}
	if s.idle != nil {
		s.idle.Stop()
	}
	s.idle = time.AfterFunc(a.opts.IdleTimeout, func() {
		v := s.v
		v.mu.Lock()
		stop := s.busy == 0 && s.subs == 0 && !s.ended && !v.stopping && v.slots[s.m] == s
		if stop {
			delete(v.slots, s.m) // new requests start another child
		}
		v.mu.Unlock()
		if stop {
			v.logger.Debug("aggregate: stopping an idle member child", "member", s.m.cfg.Name)
			s.close(context.Background())
		}
	})
}

// stopIdle stops the idle timer. Called with v.mu held.
func (s *slot) stopIdle() {
	if s.idle != nil {
		s.idle.Stop()
	}
}

// Route gets what the member's child sends: answers and progress go to the
// client as they are, the child's requests under a fresh id, list changes
// to the catalog (which tells every virtual child, once).
func (s *slot) Route(m *peer.Message) {
	v := s.v
	switch {
	case m.Env.Kind == jsonrpc.KindResponse:
		if m.Origin == nil {
			return
		}
		v.mu.Lock()
		// m.Env.ID is the client's, also for a request peer renamed on
		// the child (Envelope.Rewrite re-reads it).
		v.answeredLocked(m.Env.ID, s)
		switch {
		case m.Method == "resources/unsubscribe" && !m.Env.IsError && s.subs > 0,
			m.Method == "resources/subscribe" && m.Env.IsError && s.subs > 0:
			s.subs--
		}
		v.mu.Unlock()
		v.write(m.Data)
	case m.Env.Kind == jsonrpc.KindRequest:
		v.mu.Lock()
		v.next++
		id := jsonrpc.NumberID(v.next)
		v.relays[id] = relay{s, append([]byte(nil), m.Env.IDAt.In(m.Data)...)}
		v.mu.Unlock()
		v.write(jsonrpc.Rewrite(m.Data, jsonrpc.Edit{At: m.Env.IDAt, Raw: id.AppendJSON(nil)}))
	case m.Method == "notifications/tools/list_changed", m.Method == "notifications/prompts/list_changed",
		m.Method == "notifications/resources/list_changed":
		// This session's child of the member changed its lists: from now
		// on the session's lists of that member are its child's own
		// (fetched at the next list), and the client hears of it as the
		// aggregate's list_changed. The catalog lists again too, for
		// a change that every child of the member shares.
		v.mu.Lock()
		s.dirty = true
		v.mu.Unlock()
		s.m.refresh()
		v.write(m.Data)
	case m.Method == "notifications/cancelled" && m.Env.RequestID != "":
		// The member gave up a request of its own to the client.
		v.mu.Lock()
		var fresh jsonrpc.ID
		for id, r := range v.relays {
			if r.s == s && jsonrpc.RawID(r.rawID) != nil && string(r.rawID) == string(m.Env.RequestIDAt.In(m.Data)) {
				fresh = id
				delete(v.relays, id)
				break
			}
		}
		v.mu.Unlock()
		if fresh != "" {
			v.write(jsonrpc.Rewrite(m.Data, jsonrpc.Edit{At: m.Env.RequestIDAt, Raw: fresh.AppendJSON(nil)}))
		}
	default:
		v.write(m.Data) // progress, resources/updated, log messages
	}
}

// Ended: the member's child ended; the client's requests on it are
// answered with an error naming the member, and its next request starts
// another.
func (s *slot) Ended(err error) {
	v := s.v
	v.mu.Lock()
	closed := s.closed
	v.mu.Unlock()
	if !closed {
		v.logger.Warn("aggregate member's child ended in a session; the next request starts another", "member", s.m.cfg.Name, "err", err)
	}
	if s.onEnd != nil {
		s.onEnd(err)
	}
	s.gone(fmt.Sprintf("aggregate member %q ended before answering: %v", s.m.cfg.Name, err))
}

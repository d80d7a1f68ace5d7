package aggregate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// kind is one of the lists an aggregate merges.
type kind int

const (
	kindTools kind = iota
	kindPrompts
	kindResources
	kindTemplates
)

var kinds = []kind{kindTools, kindPrompts, kindResources, kindTemplates}

func (k kind) method() string {
	return [...]string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"}[k]
}

func (k kind) field() string {
	return [...]string{"tools", "prompts", "resources", "resourceTemplates"}[k]
}

// capability is the server capability that says a member has the list.
func (k kind) capability() string {
	return [...]string{"tools", "prompts", "resources", "resources"}[k]
}

func (k kind) notification() string {
	return [...]string{"notifications/tools/list_changed", "notifications/prompts/list_changed",
		"notifications/resources/list_changed", "notifications/resources/list_changed"}[k]
}

// lists are what a member's catalog child answered.
type lists struct {
	caps         map[string]json.RawMessage
	instructions string
	items        [4][]json.RawMessage // per kind, as the member wrote them
	// modern: the member answered as a server of ModernVersion, whose
	// lists say how long they stay fresh and for whom: per kind, ttl is
	// the least ttlMs of its pages (-1: none said), private whether a
	// page was cacheScope "private". A member of a 2025 revision says
	// neither.
	modern  bool
	ttl     [4]int64
	private [4]bool
}

// hints takes the ttlMs and cacheScope of one page of kind k.
func (l *lists) hints(k kind, page map[string]json.RawMessage) {
	var ttl int64 = -1
	if raw, ok := page["ttlMs"]; ok {
		if json.Unmarshal(raw, &ttl) != nil || ttl < 0 {
			ttl = 0
		}
	} else {
		ttl = 0 // a page that says nothing is stale at once
	}
	if l.ttl[k] < 0 || ttl < l.ttl[k] {
		l.ttl[k] = ttl
	}
	var scope string
	_ = json.Unmarshal(page["cacheScope"], &scope)
	// "Defaults to public if absent" (the field is required in
	// 2026-07-28); anything but "public" is taken for "private".
	if scope != "" && scope != "public" {
		l.private[k] = true
	}
}

// member is one member of an aggregate and its catalog child.
type member struct {
	agg    *Aggregate
	cfg    Member
	prefix string
	first  chan struct{} // closed after the first load, whatever its outcome
	once   sync.Once
	// ctx ends when the member ends: at the aggregate's Close, or once
	// Update removed it (close).
	ctx    context.Context
	cancel context.CancelFunc
	// removed is set by Update, under the aggregate's mu: a virtual child
	// starts no child of it any more (send).
	removed atomic.Bool

	// pmu guards what tracks the children the member launched, so that
	// its Close comes after the last has exited (release).
	pmu      sync.Mutex
	procs    int           // launched and not exited
	retired  bool          // no launch any more
	procGone chan struct{} // closed once retired and procs is 0
	released bool

	mu       sync.Mutex
	lists    *lists                     // nil while down
	lastCaps map[string]json.RawMessage // the capabilities it had when last up
	err      error                      // why it is down
	conn     *peer.Conn                 // the catalog child, while it runs
	ended    *pinEnd                    // what ended conn's lists, if anything did
	failures int                        // loads failed in a row
	closing  bool                       // close ran: a load in progress keeps no child
	retry    *time.Timer
	loading  bool // a load or refresh runs
	again    bool // a list_changed came during it
	// legacy: the member did not answer server/discover as a server of
	// ModernVersion once; it is not probed again.
	legacy bool
}

// Caller is nil: the member is the Origin (peer.Origin) of what the
// aggregate answers its catalog child itself, for nobody's request.
func (m *member) Caller() *auth.Principal { return nil }

// load starts the catalog child and fetches its lists; on failure the
// member is down and a retry is scheduled.
func (m *member) load() {
	a := m.agg
	defer m.once.Do(func() { close(m.first) })
	if l := listsOfLock(m.cfg.Lock); l != nil {
		m.mu.Lock()
		m.lists, m.lastCaps = l, l.caps
		m.mu.Unlock()
		a.rebuild()
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, a.opts.InitializeTimeout)
	defer cancel()
	conn, r, end, err := m.start(ctx)
	if err != nil {
		m.fail(nil, err)
		return
	}
	var res struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
		Instructions string                     `json:"instructions"`
	}
	m.mu.Lock()
	legacy := m.legacy
	m.mu.Unlock()
	modern := false
	if !legacy {
		var answered bool
		modern, answered = m.discover(ctx, conn, &res)
		if !modern {
			if ctx.Err() != nil {
				m.fail(nil, ctx.Err())
				_ = conn.Close(context.Background())
				return
			}
			m.mu.Lock()
			m.legacy = true // not probed again
			m.mu.Unlock()
			res.Capabilities, res.Instructions = nil, ""
			if !answered {
				// "some legacy servers exit on any request before
				// initialize", or never answer it (the stdio
				// binding's probe): the catalog is a fresh child.
				stopCtx, stop := context.WithTimeout(context.Background(), a.opts.InitializeTimeout)
				_ = conn.Close(stopCtx)
				stop()
				if conn, r, end, err = m.start(ctx); err != nil {
					m.fail(nil, err)
					return
				}
			}
		}
	}
	r.own(conn)
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		_ = conn.Close(context.Background()) // Stop's steps are bounded
		return
	}
	m.conn, m.ended = conn, end
	m.mu.Unlock()
	if !modern {
		init, err := conn.Initialize(ctx, map[string]any{
			"protocolVersion": ProtocolVersion,
			"capabilities":    map[string]any{},
			"clientInfo":      map[string]any{"name": a.opts.Name + "-catalog", "version": "1"},
		})
		if err != nil {
			m.fail(conn, err)
			return
		}
		if err := json.Unmarshal(init, &res); err != nil {
			m.fail(conn, fmt.Errorf("reading its initialize result: %w", err))
			return
		}
	}
	l := &lists{caps: res.Capabilities, instructions: res.Instructions, modern: modern}
	if modern {
		m.listen(conn, l.caps)
	}
	if err := m.fetch(ctx, conn, l); err != nil {
		m.fail(conn, err)
		return
	}
	if err := end.get(); err != nil {
		m.fail(conn, err)
		return
	}
	m.mu.Lock()
	if m.conn != conn { // ended meanwhile
		m.mu.Unlock()
		return
	}
	m.lists, m.err, m.failures, m.lastCaps = l, nil, 0, l.caps
	m.mu.Unlock()
	// Logged once the view serves it: a call made on reading the line
	// reaches the member.
	a.rebuild()
	a.logger.Info("aggregate member is up", "member", m.cfg.Name)
}

// fetch lists every kind the member has, following nextCursor.
func (m *member) fetch(ctx context.Context, conn *peer.Conn, l *lists) error {
	a := m.agg
	for _, k := range kinds {
		if _, ok := l.caps[k.capability()]; !ok {
			continue
		}
		l.items[k] = nil
		l.ttl[k], l.private[k] = -1, false
		cursor := ""
		for range 1000 { // a member that never ends its pages
			var params map[string]any
			if cursor != "" {
				params = map[string]any{"cursor": cursor}
			}
			if l.modern {
				if params == nil {
					params = map[string]any{}
				}
				params["_meta"] = modernMeta(a)
			}
			var p any
			if params != nil {
				p = params
			}
			raw, err := conn.Call(ctx, k.method(), p)
			if err != nil {
				return fmt.Errorf("%s: %w", k.method(), err)
			}
			var page map[string]json.RawMessage
			if err := json.Unmarshal(raw, &page); err != nil {
				return fmt.Errorf("%s: %w", k.method(), err)
			}
			var items []json.RawMessage
			if p := page[k.field()]; p != nil {
				if err := json.Unmarshal(p, &items); err != nil {
					return fmt.Errorf("%s: %w", k.method(), err)
				}
			}
			l.items[k] = append(l.items[k], items...)
			if l.modern {
				l.hints(k, page)
			}
			cursor = ""
			if c := page["nextCursor"]; c != nil {
				_ = json.Unmarshal(c, &cursor)
			}
			if cursor == "" {
				break
			}
		}
	}
	return nil
}

// fail marks the member down after a failed load, or after its catalog
// child ended, and schedules a retry.
func (m *member) fail(conn *peer.Conn, err error) {
	a := m.agg
	m.mu.Lock()
	if conn != nil && m.conn != conn {
		m.mu.Unlock()
		return // an older child: a newer load owns the member
	}
	m.conn = nil
	wasUp := m.lists != nil
	m.lists, m.err = nil, err
	m.failures++
	first := m.failures == 1 // read here: a retry's load may fail meanwhile
	delay := a.opts.RetryMin << min(m.failures-1, 20)
	if delay > a.opts.RetryMax || delay <= 0 {
		delay = a.opts.RetryMax
	}
	closing := m.closing || !a.track()
	if !closing {
		m.retry = time.AfterFunc(delay, func() {
			defer a.wg.Done()
			if m.ctx.Err() == nil {
				m.load()
			}
		})
	}
	m.mu.Unlock()
	if conn != nil {
		// Not here: fail may run on conn's reader (Ended), which Close
		// waits for. Stop's steps are bounded.
		if a.track() {
			go func() { defer a.wg.Done(); _ = conn.Close(context.Background()) }()
		} else {
			go func() { _ = conn.Close(context.Background()) }() // at Close only
		}
	}
	if closing {
		return
	}
	if wasUp || first {
		a.rebuild() // before the line, as for "up"
	}
	a.logger.Warn("aggregate member is down: its tools, prompts and resources are left out of the lists until it starts again",
		"member", m.cfg.Name, "err", err, "retry_in", delay)
}

// refresh lists again after a list_changed, coalescing those that come
// meanwhile.
func (m *member) refresh() {
	m.mu.Lock()
	if m.loading || m.conn == nil || m.lists == nil {
		m.again = m.loading
		m.mu.Unlock()
		return
	}
	m.loading = true
	conn, end, caps, instr, modern := m.conn, m.ended, m.lists.caps, m.lists.instructions, m.lists.modern
	m.mu.Unlock()
	a := m.agg
	if !a.track() {
		m.mu.Lock()
		m.loading = false
		m.mu.Unlock()
		return
	}
	go func() {
		defer a.wg.Done()
		for {
			ctx, cancel := context.WithTimeout(m.ctx, a.opts.InitializeTimeout)
			l := &lists{caps: caps, instructions: instr, modern: modern}
			err := m.fetch(ctx, conn, l)
			cancel()
			if pinErr := end.get(); err == nil && pinErr != nil {
				m.mu.Lock()
				m.loading, m.again = false, false
				m.mu.Unlock()
				m.fail(conn, pinErr)
				return
			}
			m.mu.Lock()
			if err == nil && m.conn == conn {
				m.lists = l
			}
			again := m.again && err == nil
			m.again = false
			if !again {
				m.loading = false
			}
			m.mu.Unlock()
			if err != nil {
				if m.ctx.Err() == nil && !errors.Is(err, peer.ErrClosed) {
					a.logger.Warn("aggregate member: listing again after list_changed failed", "member", m.cfg.Name, "err", err)
				}
				m.mu.Lock()
				m.loading = false
				m.mu.Unlock()
				return
			}
			a.rebuild()
			if !again {
				return
			}
		}
	}()
}

// close ends the member's catalog child, its retries and what it does
// with them (m.ctx).
func (m *member) close(ctx context.Context) error {
	m.cancel()
	m.mu.Lock()
	m.closing = true
	conn := m.conn
	m.conn = nil
	if m.retry != nil && m.retry.Stop() {
		m.agg.wg.Done() // the retry will not run
	}
	m.mu.Unlock()
	if conn != nil {
		return conn.Close(ctx)
	}
	return nil
}

// launch starts one of the member's children (its catalog child, or one
// serving a virtual child) and tracks it until it exits; once the member
// is retired it starts none.
func (m *member) launch(ctx context.Context, name string) (sandbox.Process, error) {
	m.pmu.Lock()
	if m.retired {
		m.pmu.Unlock()
		return nil, fmt.Errorf("%w: aggregate member %q was removed from the aggregate", sandbox.ErrLaunch, m.cfg.Name)
	}
	m.procs++
	m.pmu.Unlock()
	proc, err := m.cfg.Launcher.Launch(ctx, name)
	if err != nil {
		m.exited()
		return nil, err
	}
	// Ends when the child has exited (a stopped child's Wait returns).
	go func() { _ = proc.Wait(); m.exited() }()
	return proc, nil
}

func (m *member) exited() {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	m.procs--
	if m.retired && m.procs == 0 {
		close(m.procGone)
	}
}

// release waits, within ctx, until every child the member launched has
// exited (starting none any more), then calls its Close, once.
func (m *member) release(ctx context.Context) error {
	m.pmu.Lock()
	if m.released {
		m.pmu.Unlock()
		return nil
	}
	m.released = true
	if !m.retired {
		m.retired = true
		m.procGone = make(chan struct{})
		if m.procs == 0 {
			close(m.procGone)
		}
	}
	gone := m.procGone
	m.pmu.Unlock()
	var err error
	select {
	case <-gone:
	case <-ctx.Done():
		err = fmt.Errorf("aggregate member %q: children still running: %w", m.cfg.Name, ctx.Err())
	}
	if m.cfg.Close != nil {
		// Released even when a child lingers: its process group is the
		// sandbox's to end, and the aggregate stops waiting.
		err = errors.Join(err, m.cfg.Close())
	}
	return err
}

// start launches a catalog child and connects to it; its router owns
// nothing yet.
func (m *member) start(ctx context.Context) (*peer.Conn, *catalogRouter, *pinEnd, error) {
	a := m.agg
	proc, err := m.launch(ctx, "aggregate-catalog-"+m.cfg.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	po := a.opts.Peer
	end := new(pinEnd)
	po.Intercept = nil
	if m.cfg.CatalogIntercept != nil {
		po.Intercept = m.cfg.CatalogIntercept(end.set)
	}
	po.Logger = a.logger.With("member", m.cfg.Name, "child", "catalog")
	r := &catalogRouter{m: m}
	return peer.New(proc, r, &po), r, end, nil
}

// ModernVersion is the stateless revision a member may speak to the
// catalog: its lists then say how long they stay fresh (ttlMs) and for
// whom (cacheScope), which the aggregate's lists merge.
const ModernVersion = "2026-07-28"

// probeTimeout bounds server/discover on a catalog child: "The server
// returns any other error, or does not respond within a reasonable
// timeout: the server is legacy" (basic/transports/stdio, Backward
// Compatibility).
const probeTimeout = 5 * time.Second

func modernMeta(a *Aggregate) map[string]any {
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    ModernVersion,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": a.opts.Name + "-catalog", "version": "1"},
	}
}

// discover probes the catalog child with server/discover, as the SDK
// clients do ("A client that supports both modern (per-request-metadata)
// MCP versions and a legacy version that requires an initialize
// handshake SHOULD probe with server/discover", basic/transports/stdio),
// and reports whether it speaks ModernVersion (res then gets its
// capabilities and instructions), and whether it answered at all (with
// an error, or a result without ModernVersion) and still runs: a legacy
// child that did can be initialized as it is.
func (m *member) discover(ctx context.Context, conn *peer.Conn, res any) (modern, answered bool) {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	raw, err := conn.Call(pctx, "server/discover", map[string]any{"_meta": modernMeta(m.agg)})
	alive := true
	select {
	case <-conn.Done():
		alive = false
	default:
	}
	if err != nil {
		var rpcErr *jsonrpc.Error
		m.agg.logger.Debug("aggregate member is legacy: it did not answer server/discover", "member", m.cfg.Name, "err", err)
		return false, alive && errors.As(err, &rpcErr)
	}
	var d struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if json.Unmarshal(raw, &d) != nil || !slices.Contains(d.SupportedVersions, ModernVersion) || json.Unmarshal(raw, res) != nil {
		m.agg.logger.Debug("aggregate member is legacy: its server/discover does not list "+ModernVersion, "member", m.cfg.Name, "versions", d.SupportedVersions)
		return false, alive
	}
	return true, true
}

// listen opens the modern catalog child's subscriptions/listen stream
// for the list changes of what it has: a server of ModernVersion sends
// list_changed only there ("The server MUST NOT send notification types
// the client has not explicitly requested", basic/patterns/
// subscriptions). The request stays open until the child or the
// aggregate ends.
func (m *member) listen(conn *peer.Conn, caps map[string]json.RawMessage) {
	a := m.agg
	want := map[string]bool{}
	for cap, field := range map[string]string{"tools": "toolsListChanged", "prompts": "promptsListChanged", "resources": "resourcesListChanged"} {
		if _, ok := caps[cap]; ok {
			want[field] = true
		}
	}
	if len(want) == 0 || !a.track() {
		return
	}
	go func() {
		defer a.wg.Done()
		_, err := conn.Call(m.ctx, "subscriptions/listen", map[string]any{"_meta": modernMeta(a), "notifications": want})
		if err != nil && m.ctx.Err() == nil && !errors.Is(err, peer.ErrClosed) {
			a.logger.Warn("aggregate member: its catalog cannot listen for list changes; they reach the aggregate only from sessions' children of it",
				"member", m.cfg.Name, "err", err)
		}
	}()
}

// pinEnd is what ends the lists of one catalog child: the reason its pin
// enforcer gave (pin.Hooks.End, with --on-pin-violation end-session),
// once. The enforcer calls it on the child's reader, in the middle of an
// answer to a list of the catalog's: it only records, and the load or
// refresh that listed takes the member down once its lists are in.
//
// Why the member, not every session: the catalog child is shared, so
// ending "the session" on its drift would end every session of the
// aggregate, and each new one at its first list, cutting every client
// off every other member for as long as one member drifts (the failure
// of a backend taking a whole gateway down). On the member's own path,
// end-session means no session uses a server that drifts; here the
// member is down, as a member that failed: out of the lists (all its
// items, not only those the lock refuses), its calls refused with this
// reason, started again with backoff (and down again while it drifts).
type pinEnd struct {
	mu  sync.Mutex
	err error
}

func (p *pinEnd) set(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *pinEnd) get() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// snapshot returns the member's lists, or nil and why it is down.
func (m *member) snapshot() (*lists, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lists == nil && m.err == nil {
		return nil, errors.New("its catalog is still loading")
	}
	return m.lists, m.err
}

// Whether a member supports resource subscriptions, as its catalog child
// declared (resources.subscribe).
const (
	subscribeUnknown = iota // down or still loading
	subscribeNo
	subscribeYes
)

func (m *member) subscribable() int {
	m.mu.Lock()
	l := m.lists
	m.mu.Unlock()
	if l == nil {
		return subscribeUnknown
	}
	var rc struct {
		Subscribe bool `json:"subscribe"`
	}
	if r, ok := l.caps["resources"]; !ok || json.Unmarshal(r, &rc) != nil || !rc.Subscribe {
		return subscribeNo
	}
	return subscribeYes
}

// catalogRouter gets what a catalog child sends on its own. conn is its
// connection once it is the member's catalog (own): until then (the era
// probe) nothing it says concerns the member.
type catalogRouter struct {
	m    *member
	mu   sync.Mutex
	conn *peer.Conn
}

func (r *catalogRouter) own(c *peer.Conn) {
	r.mu.Lock()
	r.conn = c
	r.mu.Unlock()
}

func (r *catalogRouter) owned() *peer.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

func (r *catalogRouter) Route(msg *peer.Message) {
	conn := r.owned()
	if conn == nil {
		return
	}
	switch {
	case msg.Env.Kind == jsonrpc.KindNotification && strings.HasSuffix(msg.Method, "/list_changed"):
		r.m.refresh()
	case msg.Env.Kind == jsonrpc.KindNotification && msg.Method == "notifications/subscriptions/acknowledged":
		// "The notifications field in the acknowledgment reflects the
		// subset the server agreed to honor" (basic/patterns/
		// subscriptions): what it leaves out changes without a word,
		// until a session's child of the member says so.
		params, _ := jsonrpc.Lookup(msg.Data, "params")
		n, _ := jsonrpc.Lookup(params, "notifications")
		r.m.agg.logger.Debug("aggregate member's catalog listens for list changes", "member", r.m.cfg.Name, "honored", string(n))
	case msg.Env.Kind == jsonrpc.KindRequest:
		// The catalog child declared no client capability: it may ping.
		var reply []byte
		if msg.Method == "ping" {
			reply = append(append([]byte(`{"jsonrpc":"2.0","id":`), msg.Env.IDAt.In(msg.Data)...), `,"result":{}}`...)
		} else {
			reply = jsonrpc.ErrorResponse(msg.Env.IDAt.In(msg.Data), jsonrpc.CodeMethodNotFound, "the aggregate's catalog client has no "+msg.Method, nil)
		}
		if env, err := jsonrpc.Parse(reply); err == nil {
			_ = conn.Send(r.m, jsonrpc.Message{Data: reply, Env: env})
		}
	}
}

func (r *catalogRouter) Ended(err error) {
	conn := r.owned()
	r.m.mu.Lock()
	cur := r.m.conn
	r.m.mu.Unlock()
	if conn != nil && conn == cur && r.m.ctx.Err() == nil {
		r.m.fail(conn, fmt.Errorf("its catalog child ended: %w", err))
	}
}

// route says where an advertised name goes.
type route struct {
	m    *member
	name string // the member's own name
}

// tmpl is a resource template of a member.
type tmpl struct {
	m  *member
	re *regexp.Regexp
}

// view is the merged catalog: the lists' results as virtual children
// send them, and the routes. Immutable once built.
type view struct {
	members      []*member // those it was built from, in order
	lists        [4][]byte // the result objects
	tools        map[string]route
	prompts      map[string]route
	uris         map[string]*member
	templates    []tmpl
	templateURIs map[string]*member
	clashes      map[string][]*member // URIs and templates two or more members list, refused
	caps         map[string]any
	instructions string
	down         []*member // members down or not loaded, in order
	downErr      []error
}

// build merges the lists of members: the catalog's, or for a member in
// over the lists a session's own child of it answered. Called with a.mu
// held when over is nil (the aggregate's view).
func (a *Aggregate) build(members []*member, over map[*member]*lists) *view {
	v := &view{members: members, tools: map[string]route{}, prompts: map[string]route{}, uris: map[string]*member{}, templateURIs: map[string]*member{}, caps: map[string]any{}}
	var items [4][]json.RawMessage
	var instr []string
	var uris, templates uriSet
	// Per kind, the merged freshness: "ttlMs is the least of the
	// members', cacheScope is private when any member's is", known only
	// when every member with the kind is up and said it (hinted).
	var ttl [4]int64
	var private, has [4]bool
	hinted := [4]bool{true, true, true, true}
	hint := func(m *member, l *lists, caps map[string]json.RawMessage) {
		for _, k := range kinds {
			if _, ok := caps[k.capability()]; !ok {
				continue
			}
			if l == nil || !l.modern || l.ttl[k] < 0 {
				hinted[k] = false
				continue
			}
			if !has[k] || l.ttl[k] < ttl[k] {
				ttl[k] = l.ttl[k]
			}
			has[k] = true
			private[k] = private[k] || l.private[k]
		}
	}
	subscribe, completions, logging := false, false, false
	mergeCaps := func(caps map[string]json.RawMessage) {
		for _, k := range kinds {
			if _, ok := caps[k.capability()]; ok {
				// "listChanged indicates whether the server will emit
				// notifications when the list of available items
				// changes" (server/tools): the aggregate does, for every
				// member with the kind, whether or not the member
				// declares listChanged itself: when the member comes or
				// goes (down, back, added or removed by Update, a pin
				// violation), and when a member that declares it sends
				// one (its catalog is listed again). So a
				// subscriptions/listen acknowledges the kinds of this
				// capability as honoured ("The notifications field in
				// the acknowledgment reflects the subset the server
				// agreed to honor. Notification types the server does
				// not support are omitted", basic/patterns/subscriptions,
				// 2026-07-28): the pool acknowledges from these
				// capabilities, and a kind no member has is left out.
				switch k {
				case kindResources:
					v.caps["resources"] = map[string]any{"listChanged": true}
				case kindTools, kindPrompts:
					v.caps[k.capability()] = map[string]any{"listChanged": true}
				}
			}
		}
		if r, ok := caps["resources"]; ok {
			var rc struct {
				Subscribe bool `json:"subscribe"`
			}
			_ = json.Unmarshal(r, &rc)
			subscribe = subscribe || rc.Subscribe
		}
		_, c := caps["completions"]
		completions = completions || c
		_, lg := caps["logging"]
		logging = logging || lg
	}
	for _, m := range members {
		l, err := m.snapshot()
		if l != nil && over[m] != nil {
			l = over[m]
		}
		if l == nil {
			v.down = append(v.down, m)
			v.downErr = append(v.downErr, err)
			// Its capabilities stay declared while it is down, so that
			// a client initialized meanwhile lists it once it is back.
			m.mu.Lock()
			last := m.lastCaps
			m.mu.Unlock()
			mergeCaps(last)
			hint(m, nil, last)
			continue
		}
		hint(m, l, l.caps)
		if l.instructions != "" {
			instr = append(instr, "## "+m.cfg.Name+"\n\n"+l.instructions)
		}
		mergeCaps(l.caps)
		for _, k := range []kind{kindTools, kindPrompts} {
			owner := v.tools
			if k == kindPrompts {
				owner = v.prompts
			}
			for _, it := range l.items[k] {
				var obj map[string]json.RawMessage
				var name string
				if json.Unmarshal(it, &obj) != nil || json.Unmarshal(obj["name"], &name) != nil || name == "" {
					continue
				}
				adv := advertise(m.prefix, a.opts.Separator, name)
				if prev, dup := owner[adv]; dup {
					if over != nil {
						continue // logged once, by the aggregate's view
					}
					a.logger.Error("aggregate member lists two items under one advertised name: the second is left out",
						"member", m.cfg.Name, "advertised", adv, "first", prev.name, "second", name)
					continue
				}
				owner[adv] = route{m, name}
				obj["name"] = jsonString(adv)
				out, _ := json.Marshal(obj)
				items[k] = append(items[k], out)
			}
		}
		for _, it := range l.items[kindResources] {
			var r struct {
				URI string `json:"uri"`
			}
			if json.Unmarshal(it, &r) == nil && r.URI != "" {
				uris.add(m, r.URI, it)
			}
		}
		for _, it := range l.items[kindTemplates] {
			var r struct {
				URITemplate string `json:"uriTemplate"`
			}
			if json.Unmarshal(it, &r) == nil && r.URITemplate != "" {
				templates.add(m, r.URITemplate, it)
			}
		}
	}
	// "Colliding URIs are refused the same way, or namespaced": a URI (or
	// template) two members list is refused, as two members advertising
	// one name are, but only once the members answer (URIs are not known
	// before): neither member's is listed, and a read, subscription or
	// completion of it gets an error naming both (view.clash), never the
	// resource of one member taken for the other's.
	v.clashes = map[string][]*member{}
	for _, c := range []struct {
		set  *uriSet
		kind kind
		what string
	}{{&uris, kindResources, "resource URI"}, {&templates, kindTemplates, "resource template"}} {
		for _, e := range c.set.entries {
			if owners := c.set.owners[e.uri]; len(owners) > 1 {
				v.clashes[e.uri] = owners
				if over == nil && e.m == owners[0] {
					a.logger.Error("aggregate members list one "+c.what+": it is refused, neither member's is listed or served; change one member's URIs, or leave one member out of the aggregate",
						"uri", e.uri, "members", memberNames(owners))
				}
				continue
			}
			if c.kind == kindResources {
				v.uris[e.uri] = e.m
			} else {
				v.templateURIs[e.uri] = e.m
				if re, err := templateRegexp(e.uri); err == nil {
					v.templates = append(v.templates, tmpl{e.m, re})
				}
			}
			items[c.kind] = append(items[c.kind], e.item)
		}
	}
	if subscribe {
		v.caps["resources"] = map[string]any{"listChanged": true, "subscribe": true}
	}
	if completions {
		v.caps["completions"] = map[string]any{}
	}
	if logging {
		v.caps["logging"] = map[string]any{}
	}
	v.instructions = strings.Join(instr, "\n\n")
	for _, k := range kinds {
		list := items[k]
		if list == nil {
			list = []json.RawMessage{}
		}
		res := map[string]any{k.field(): list}
		if hinted[k] && has[k] {
			// A virtual child is the pool's legacy child: the pool
			// keeps the ttlMs and cacheScope its answer has (and a
			// 2025 client ignores them).
			res["ttlMs"] = ttl[k]
			res["cacheScope"] = "public"
			if private[k] {
				res["cacheScope"] = "private"
			}
		}
		v.lists[k], _ = json.Marshal(res)
	}
	return v
}

// uriSet gathers the resource URIs (or templates) the members list, in
// order, with the members that list each.
type uriSet struct {
	entries []uriEntry
	owners  map[string][]*member
}

type uriEntry struct {
	m    *member
	uri  string
	item json.RawMessage
}

func (s *uriSet) add(m *member, uri string, item json.RawMessage) {
	if s.owners == nil {
		s.owners = map[string][]*member{}
	}
	owners := s.owners[uri]
	if slices.Contains(owners, m) {
		return // listed twice by one member: its first
	}
	s.owners[uri] = append(owners, m)
	s.entries = append(s.entries, uriEntry{m, uri, item})
}

func memberNames(ms []*member) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = strconv.Quote(m.cfg.Name)
	}
	return strings.Join(names, ", ")
}

// clash is the error for a request of a URI (or template) two or more
// members list, or nil.
func (v *view) clash(uri string) error {
	owners := v.clashes[uri]
	if len(owners) == 0 {
		return nil
	}
	return fmt.Errorf("aggregate members %s all list %q: the aggregate serves it from none of them; change one member's URIs, or leave one out of the aggregate", memberNames(owners), uri)
}

// resource finds the member that serves uri: the one listing it, else the
// first whose template matches it, else the only member with resources;
// none for a URI members clash on.
func (v *view) resource(a *Aggregate, uri string) *member {
	if v.clashes[uri] != nil {
		return nil // refused: see clash
	}
	if m := v.uris[uri]; m != nil {
		return m
	}
	for _, t := range v.templates {
		if t.re.MatchString(uri) {
			return t.m
		}
	}
	var only *member
	for _, m := range v.members {
		if l, _ := m.snapshot(); l != nil {
			if _, ok := l.caps["resources"]; ok {
				if only != nil {
					return nil
				}
				only = m
			}
		}
	}
	return only
}

// templateRegexp matches the URIs an RFC 6570 template expands to, loosely:
// a simple expression matches one path segment, a reserved one ({+x},
// {#x}) anything, a query one ({?x}, {&x}) an optional query.
func templateRegexp(t string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(t))
			break
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return nil, errors.New("an unclosed expression")
		}
		b.WriteString(regexp.QuoteMeta(t[:i]))
		expr := t[i+1 : i+j]
		switch {
		case strings.HasPrefix(expr, "+"), strings.HasPrefix(expr, "#"):
			b.WriteString(".*")
		case strings.HasPrefix(expr, "?"), strings.HasPrefix(expr, "&"):
			b.WriteString(`([?&].*)?`)
		default:
			b.WriteString(`[^/?#]*`)
		}
		t = t[i+j+1:]
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// listsOfLock returns the lists a lock pins, or nil if it holds some
// item's digest alone (or there is no lock).
func listsOfLock(lock *pin.Lock) *lists {
	if lock == nil {
		return nil
	}
	l := &lists{caps: map[string]json.RawMessage{}}
	byKind := map[string]struct {
		names map[string]string
		k     kind
	}{
		"tools": {lock.Tools, kindTools}, "prompts": {lock.Prompts, kindPrompts},
		"resources": {lock.Resources, kindResources}, "resourceTemplates": {lock.ResourceTemplates, kindTemplates},
	}
	for _, pk := range pin.Kinds {
		e, ok := byKind[pk.Array]
		if !ok {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(e.names)) {
			item := lock.Item(pk, name)
			if item == nil {
				return nil
			}
			l.items[e.k] = append(l.items[e.k], item)
		}
		if len(e.names) > 0 {
			l.caps[e.k.capability()] = json.RawMessage(`{}`)
		}
	}
	return l
}

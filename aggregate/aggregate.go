// Package aggregate serves several configured MCP servers (its members)
// as one: an Aggregate is an MCP server in process, which the bridge's
// existing stack runs as its child. Each Launch of its Launcher returns a
// virtual child, a sandbox.Process in memory that speaks stdio MCP (as a
// server of revision 2025-11-25) on its Stdin and Stdout, so that a
// session registry and a stateless pool (endpoint.Endpoint) serve an
// aggregate in every era, with resumption, limits and MRTR parking,
// exactly as they serve one stdio server: the pool takes it for a legacy
// child (pool.Options.Era = pool.EraLegacy).
//
// Names. A member's tools and prompts are advertised as PREFIX + sep +
// NAME (Options.Separator, "__" by default; the prefix is the member's
// Prefix, or its Name), shortened with a hash where that is longer than
// 64 characters or holds other characters than A-Z a-z 0-9 _ - . (see
// advertise): the advertised name depends only on the configuration and
// the (member, name) pair. New refuses two members whose prefixes could
// ever give one name (checkPrefixes), so no collision can arise later
// from what a member lists. Resource URIs and templates pass unchanged; a
// URI two members list goes to the first member in Options.Members, and
// the catalog logs the collision naming both.
//
// Lazy children. A virtual child answers initialize, ping and every list
// from the catalog, without starting any member child. It starts a
// member's child (through the member's Launcher, as a peer.Conn with the
// member's interceptor, so that guards see the member's own names) the
// first time its client calls, gets, reads, subscribes or completes
// something of that member, and stops it after Options.IdleTimeout
// without requests or subscriptions. Options.MaxChildren bounds the
// member children of one virtual child, Options.MaxChildrenTotal those of
// the whole aggregate.
//
// The catalog. Per member, the lists come from a catalog child the
// aggregate runs itself (one per member, whatever the number of
// sessions), fetched once and again on that child's list_changed (or a
// member child's). The catalog child is probed with server/discover: a
// member of revision 2026-07-28 (ModernVersion) is listed in that
// revision, listened to with subscriptions/listen for its list changes,
// and its lists' ttlMs and cacheScope merge into the aggregate's (the
// least ttlMs, "private" if any is) when every member with that list is
// such a member and up; otherwise it is initialized as 2025-11-25 and the
// lists say nothing of freshness (the pool's defaults). Member children
// serving sessions are initialized as 2025-11-25 whatever the member. A member whose catalog child cannot start or ends drops
// out of the lists (virtual children send list_changed), its calls get an
// error naming it, and it is started again with backoff (Options.RetryMin
// to RetryMax). Options.FailClosed refuses lists and calls instead while
// any member is down.
package aggregate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// Defaults of Options.
const (
	// DefaultMaxChildrenTotal bounds the member children of one aggregate.
	DefaultMaxChildrenTotal = 256
	// DefaultIdleTimeout stops a member child of a virtual child that has
	// had no request in flight and no subscription this long.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultRetryMin is the first wait before a failed member's catalog
	// child is started again; each failure in a row doubles it.
	DefaultRetryMin = time.Second
	// DefaultRetryMax bounds that wait.
	DefaultRetryMax = 5 * time.Minute
	// DefaultName is the aggregate's serverInfo.name.
	DefaultName = "mcp-bridge-aggregate"
	// ProtocolVersion is the revision a virtual child speaks, and the one
	// it offers its member children.
	ProtocolVersion = "2025-11-25"
)

// A Member is one server of an aggregate.
type Member struct {
	// Name names the member in logs, errors and instructions; required,
	// unique.
	Name string
	// Prefix begins the advertised names of its tools and prompts. Empty
	// means Name. A prefix that stays when the member is renamed keeps
	// clients' names.
	Prefix string
	// Launcher starts the member's children (its catalog child, and one
	// per virtual child that needs it); required.
	Launcher sandbox.Launcher
	// Intercept builds the interception point of each of the member's
	// children serving sessions (policy, pinning, audit, metrics, built
	// for this member), called once per child, which child names in logs
	// ("SESSION/MEMBER"): guards that keep state per connection (pinning,
	// audit) get a connection of their own. It sees the member's own
	// names. end is what a pin enforcer's --on-pin-violation
	// end-session calls (pin.Hooks.End; it does not block): it ends the
	// member for that virtual child, as an ended session on the member's
	// own path (see virtual.pinEnded). It also returns, if not nil,
	// what to tell once that child has ended, with why (nil: stopped by
	// the aggregate), its connection done: what its interception point
	// still holds of it (the requests it left unanswered, which the
	// audit writes then) is its to finish; the client's requests on it
	// are answered right after with an error naming the member. (Tied to
	// the child, not to its name: a session's next child of the member
	// may start under the same name before this one has ended.) Nil:
	// none.
	Intercept func(child string, end func(error)) (i peer.Interceptor, ended func(err error))
	// CatalogIntercept builds the interception point of each of the
	// member's catalog children, whose answers are the lists every
	// session sees: the pin enforcer belongs here (it filters the answers
	// to the bridge's own lists too), so that what the lock refuses
	// leaves the aggregate's lists, that member's items only. end, called
	// by the enforcer with --on-pin-violation end-session, takes the
	// whole member down with that reason, as a member that failed (see
	// member.fail). A per-caller policy does not belong here (the catalog
	// child has no caller): whoever serves the lists filters them per
	// caller with Owner. Nil: none.
	CatalogIntercept func(end func(error)) peer.Interceptor
	// Lock, when it holds every pinned item's members (a lock file of
	// version 3, as `bridge pin` writes), is the member's catalog: its
	// lists come from the lock, and no catalog child starts (nor can the
	// member then drop out of the lists: a session whose child of it
	// cannot start gets an error naming it). Nil, or a lock of digests
	// alone: a catalog child.
	Lock *pin.Lock
}

// Options configure an Aggregate. Every zero value means the documented
// default.
type Options struct {
	// Name is the aggregate's serverInfo.name. Empty means DefaultName.
	Name string
	// Members, in order: the order of lists, and the first of two members
	// listing one resource URI gets it. At least one.
	Members []Member
	// Separator joins a prefix and a name. Empty means DefaultSeparator.
	// It must be 1 to 4 characters of A-Z a-z 0-9 _ - .
	Separator string
	// MaxChildren bounds the member children one virtual child runs at
	// once. Zero means the number of members (no bound beyond it).
	MaxChildren int
	// MaxChildrenTotal bounds the member children of the aggregate (its
	// catalog children not counted). Zero means DefaultMaxChildrenTotal;
	// negative means none.
	MaxChildrenTotal int
	// IdleTimeout stops a member child unused this long. Zero means
	// DefaultIdleTimeout; negative means never.
	IdleTimeout time.Duration
	// InitializeTimeout bounds starting and initializing a member child.
	// Zero means peer.DefaultInitializeTimeout.
	InitializeTimeout time.Duration
	// RetryMin and RetryMax bound the backoff of a member that failed.
	// Zero means DefaultRetryMin, DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// FailClosed refuses lists and calls (-32603 naming the member) while
	// any member is down, rather than serving the others.
	FailClosed bool
	// Peer configures each member child's connection; its Intercept is
	// replaced by the member's.
	Peer peer.Options
	// Logger receives the aggregate's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// An Aggregate serves its members as one MCP server. Its methods are safe
// for concurrent use.
type Aggregate struct {
	opts    Options
	logger  *slog.Logger
	members []*member
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // catalog loads and refreshes

	children atomic.Int64 // member children of virtual children

	// life guards closed against wg.Add: what starts a goroutine of the
	// aggregate (track) does so before Close waits, or not at all.
	life   sync.Mutex
	closed bool

	mu       sync.Mutex
	view     *view
	virtuals map[*virtual]struct{}
	seq      int64
}

// New checks the configuration, starts each member's catalog child in the
// background and returns the aggregate. Lists wait for each member's
// first attempt.
func New(o *Options) (*Aggregate, error) {
	opts := *o
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Separator == "" {
		opts.Separator = DefaultSeparator
	}
	if len(opts.Separator) > 4 || !validName(opts.Separator) {
		return nil, fmt.Errorf("aggregate: separator %q must be 1 to 4 characters of A-Z a-z 0-9 _ - .", opts.Separator)
	}
	if len(opts.Members) == 0 {
		return nil, errors.New("aggregate: no members")
	}
	if opts.MaxChildren <= 0 {
		opts.MaxChildren = len(opts.Members)
	}
	if opts.MaxChildrenTotal == 0 {
		opts.MaxChildrenTotal = DefaultMaxChildrenTotal
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.InitializeTimeout <= 0 {
		opts.InitializeTimeout = peer.DefaultInitializeTimeout
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	names := make(map[string]bool)
	prefixes := make([]string, len(opts.Members))
	for i, m := range opts.Members {
		if m.Name == "" {
			return nil, fmt.Errorf("aggregate: member %d has no name", i+1)
		}
		if names[m.Name] {
			return nil, fmt.Errorf("aggregate: member %q is given twice", m.Name)
		}
		names[m.Name] = true
		if m.Launcher == nil {
			return nil, fmt.Errorf("aggregate member %q: no launcher", m.Name)
		}
		prefixes[i] = m.Prefix
		if prefixes[i] == "" {
			prefixes[i] = m.Name
		}
	}
	if err := checkPrefixes(opts.Members, prefixes, opts.Separator); err != nil {
		return nil, err
	}
	a := &Aggregate{opts: opts, logger: opts.Logger, virtuals: make(map[*virtual]struct{})}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	for i, m := range opts.Members {
		a.members = append(a.members, &member{agg: a, idx: i, cfg: m, prefix: prefixes[i], first: make(chan struct{})})
	}
	a.view = a.build(nil)
	for _, m := range a.members {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); m.load() }()
	}
	return a, nil
}

// Ready waits until every member's catalog child was tried once (loaded,
// or failed), or ctx ends.
func (a *Aggregate) Ready(ctx context.Context) error {
	for _, m := range a.members {
		select {
		case <-m.first:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Down names the members that are down now (their catalog child failed),
// with why.
func (a *Aggregate) Down() map[string]error {
	out := make(map[string]error)
	for _, m := range a.members {
		m.mu.Lock()
		if m.lists == nil && m.err != nil {
			out[m.cfg.Name] = m.err
		}
		m.mu.Unlock()
	}
	return out
}

// Children is the number of member children virtual children run now.
func (a *Aggregate) Children() int { return int(a.children.Load()) }

// Launcher returns the launcher of the aggregate's virtual children: what
// session.Options.Launcher and pool.Options.Launch start.
func (a *Aggregate) Launcher() sandbox.Launcher { return launcher{a} }

type launcher struct{ a *Aggregate }

func (l launcher) Launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	return l.a.launch(ctx, sessionID)
}

// Close stops the catalog children and the retries. The virtual children
// belong to their callers, which stop them (Process.Stop) before.
func (a *Aggregate) Close(ctx context.Context) error {
	a.life.Lock()
	a.closed = true
	a.life.Unlock()
	a.cancel()
	var err error
	for _, m := range a.members {
		err = errors.Join(err, m.close(ctx))
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// track counts one more goroutine of the aggregate in wg, unless it is
// closed.
func (a *Aggregate) track() bool {
	a.life.Lock()
	defer a.life.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	return true
}

// changed tells every initialized virtual child that the lists of kinds
// changed.
func (a *Aggregate) changed(old, cur *view) {
	var methods []string
	for _, k := range kinds {
		if string(old.lists[k]) != string(cur.lists[k]) {
			methods = append(methods, k.notification())
		}
	}
	if len(methods) == 0 {
		return
	}
	a.mu.Lock()
	vs := make([]*virtual, 0, len(a.virtuals))
	for v := range a.virtuals {
		vs = append(vs, v)
	}
	a.mu.Unlock()
	for _, v := range vs {
		v.listChanged(methods)
	}
}

// rebuild recomputes the view from the members' lists and notifies.
func (a *Aggregate) rebuild() {
	a.mu.Lock()
	old := a.view
	cur := a.build(nil)
	a.view = cur
	a.mu.Unlock()
	a.changed(old, cur)
}

func (a *Aggregate) currentView() *view {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.view
}

// takeChild counts one more member child against MaxChildrenTotal.
func (a *Aggregate) takeChild() bool {
	for {
		n := a.children.Load()
		if a.opts.MaxChildrenTotal > 0 && n >= int64(a.opts.MaxChildrenTotal) {
			return false
		}
		if a.children.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (a *Aggregate) releaseChild() { a.children.Add(-1) }

// memberOf finds the member whose prefix begins an advertised name, and
// the name after it (checkPrefixes makes it unique).
func (a *Aggregate) memberOf(adv string) (*member, string) {
	for _, m := range a.members {
		p := m.prefix + a.opts.Separator
		if len(adv) > len(p) && adv[:len(p)] == p {
			return m, adv[len(p):]
		}
	}
	return nil, ""
}

// Owner says which member an item of the aggregate's list answer to
// method (tools/list, prompts/list, resources/list,
// resources/templates/list) belongs to, and the item's name in the
// member's own terms: the tool's or prompt's own name, the resource's URI
// or the template's uriTemplate (key: the item's advertised name, URI or
// uriTemplate). It is what a per-caller filter of the shared lists asks,
// at answer time, to apply each member's policy on its own names. A name
// the current catalog does not hold (a list a session's own member child
// answered) goes by its prefix; ok is false when no member owns key.
func (a *Aggregate) Owner(method, key string) (name, own string, ok bool) {
	view := a.currentView()
	var m *member
	switch method {
	case "tools/list", "prompts/list":
		routes := view.tools
		if method == "prompts/list" {
			routes = view.prompts
		}
		if r, found := routes[key]; found {
			return r.m.cfg.Name, r.name, true
		}
		m, own = a.memberOf(key)
	case "resources/list":
		m, own = view.resource(a, key), key
	case "resources/templates/list":
		m, own = view.templateURIs[key], key
	}
	if m == nil {
		return "", "", false
	}
	return m.cfg.Name, own, true
}

// jsonString quotes s as a JSON string.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

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
// URI (or template) two members list is refused once they list it (URIs
// are not known before): neither member's is listed, a read,
// subscription or completion of it gets an error naming both, and the
// catalog logs the collision naming both.
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
// serving sessions are initialized as 2025-11-25 whatever the member:
// the virtual child is a 2025 server, so a member's elicitation and
// sampling reach it as requests, which the pool turns into multi
// round-trip rounds for a 2026-07-28 client (TestElicitationAndSampling);
// a member of 2026-07-28 only still answers so (TestModernOnlyMember).
// A subscriptions/listen of a 2026-07-28 client is the pool's, on the
// virtual child: it acknowledges the list changes the aggregate's
// capabilities declare (see build) and the resources the virtual child
// agreed to subscribe to, which are those of members that declare
// resources.subscribe (byURI). A member whose catalog child cannot start or ends drops
// out of the lists (virtual children send list_changed), its calls get an
// error naming it, and it is started again with backoff (Options.RetryMin
// to RetryMax). Options.FailClosed refuses lists and calls instead while
// any member is down.
//
// Members change in place. Update gives the aggregate new members while
// its virtual children go on (a reload of the configuration that changes
// members only): a member of the same Name and Key keeps its catalog and
// its children; a newcomer's catalog starts; a member removed (or whose
// Key changed: removed, then added under its name) ends: it is marked
// removed before its children are swept from every virtual child, so
// that none starts one again, the requests in flight on them are
// answered with an error naming it, and its Member.Close comes once every
// child it launched has exited (member.release). Views hold the members
// they were built from: a request routes with the view it took.
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
	// DefaultStopBudget bounds stopping the member children of a virtual
	// child at its end, or of a removed member.
	DefaultStopBudget = time.Minute
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
	// Key is what the member's configuration is: Update keeps a running
	// member of the same Name and Key (its catalog, its children serving
	// sessions, and the Launcher and hooks it was given: those of the
	// Member passed to Update are not used), and replaces one whose Key
	// differs. Empty: Update always replaces it.
	Key string
	// Close releases what the member's Launcher and interception points
	// hold, once the aggregate is done with the member: after Update
	// removed or replaced it and its children stopped, or at Close. The
	// aggregate calls it once. Nil: nothing to release.
	Close func() error
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
	// once. Zero means the number of members (no bound beyond it), as
	// Update changes it.
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
	// StopBudget bounds stopping member children the aggregate stops
	// itself (at a virtual child's end, or those of a member Update
	// removed). Zero means DefaultStopBudget.
	StopBudget time.Duration
	// Peer configures each member child's connection; its Intercept is
	// replaced by the member's.
	Peer peer.Options
	// Logger receives the aggregate's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// An Aggregate serves its members as one MCP server. Its methods are safe
// for concurrent use.
type Aggregate struct {
	opts   Options
	logger *slog.Logger
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // catalog loads and refreshes

	children atomic.Int64 // member children of virtual children

	// life guards closed against wg.Add: what starts a goroutine of the
	// aggregate (track) does so before Close waits, or not at all.
	life   sync.Mutex
	closed bool

	mu sync.Mutex
	// members are the members now, in order: replaced whole by Update,
	// never changed in place (a view holds those it was built from).
	members  []*member
	view     *view
	virtuals map[*virtual]struct{}
	seq      int64
	// shut is set by Close, under mu: Update then changes nothing (what
	// it starts, Close would not wait for).
	shut bool
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
	if opts.MaxChildren < 0 {
		opts.MaxChildren = 0
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
	if opts.StopBudget <= 0 {
		opts.StopBudget = DefaultStopBudget
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	prefixes, err := checkMembers(opts.Members, opts.Separator)
	if err != nil {
		return nil, err
	}
	a := &Aggregate{opts: opts, logger: opts.Logger, virtuals: make(map[*virtual]struct{})}
	a.opts.Members = nil // a.members are the members
	a.ctx, a.cancel = context.WithCancel(context.Background())
	for i, m := range opts.Members {
		a.members = append(a.members, a.newMember(m, prefixes[i]))
	}
	a.view = a.build(a.members, nil)
	for _, m := range a.members {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); m.load() }()
	}
	return a, nil
}

// CheckMembers reports what New and Update refuse of members (no member,
// a name missing or given twice, no launcher, a prefix that is not a
// valid name, two members that could advertise one name), with the
// separator sep (empty: DefaultSeparator), starting nothing.
func CheckMembers(members []Member, sep string) error {
	if sep == "" {
		sep = DefaultSeparator
	}
	_, err := checkMembers(members, sep)
	return err
}

// checkMembers checks members and returns their prefixes.
func checkMembers(members []Member, sep string) ([]string, error) {
	if len(sep) > 4 || !validName(sep) {
		return nil, fmt.Errorf("aggregate: separator %q must be 1 to 4 characters of A-Z a-z 0-9 _ - .", sep)
	}
	if len(members) == 0 {
		return nil, errors.New("aggregate: no members")
	}
	names := make(map[string]bool)
	prefixes := make([]string, len(members))
	for i, m := range members {
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
	if err := checkPrefixes(members, prefixes, sep); err != nil {
		return nil, err
	}
	return prefixes, nil
}

func (a *Aggregate) newMember(cfg Member, prefix string) *member {
	m := &member{agg: a, cfg: cfg, prefix: prefix, first: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(a.ctx)
	return m
}

// current returns the members now.
func (a *Aggregate) current() []*member {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.members
}

// Ready waits until every member's catalog child was tried once (loaded,
// or failed), or ctx ends.
func (a *Aggregate) Ready(ctx context.Context) error {
	for _, m := range a.current() {
		select {
		case <-m.first:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ready reports whether every member's catalog child was tried once, at
// once.
func (a *Aggregate) ready() bool {
	for _, m := range a.current() {
		select {
		case <-m.first:
		default:
			return false
		}
	}
	return true
}

// Down names the members that are down now (their catalog child failed),
// with why.
func (a *Aggregate) Down() map[string]error {
	out := make(map[string]error)
	for _, m := range a.current() {
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

// Close stops the catalog children and the retries, waits for the
// children of members Update removed, and releases every member
// (Member.Close) once the children it launched have exited. The virtual
// children belong to their callers, which stop them (Process.Stop)
// before.
func (a *Aggregate) Close(ctx context.Context) error {
	a.life.Lock()
	a.closed = true
	a.life.Unlock()
	a.mu.Lock()
	a.shut = true
	members := a.members
	a.mu.Unlock()
	a.cancel()
	var err error
	for _, m := range members {
		err = errors.Join(err, m.close(ctx))
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	for _, m := range members {
		err = errors.Join(err, m.release(ctx))
	}
	return err
}

// Update makes members the aggregate's members, in place: the virtual
// children (the sessions and pool children of the endpoint serving it)
// go on. A member of the same Name and Key as a running one keeps its
// catalog and its children; one added starts its catalog; one removed,
// or whose Key changed (removed, then added under the same name), ends:
// its children serving sessions stop, the requests they had in flight
// are answered with an error naming it, as later ones of its names are,
// and once its children have exited its Close is called (within
// Options.StopBudget). Every initialized virtual child whose lists
// change hears list_changed, now for what left, once the newcomers'
// catalogs are in for what came.
//
// members are checked first, as New checks them (CheckMembers): when
// they are refused, nothing changes. The separator and bounds stay those
// of Options (a MaxChildren of zero follows the number of members).
func (a *Aggregate) Update(members []Member) error {
	prefixes, err := checkMembers(members, a.opts.Separator)
	if err != nil {
		return err
	}
	a.mu.Lock()
	if a.shut {
		a.mu.Unlock()
		return fmt.Errorf("aggregate %q: updating its members: it is closed", a.opts.Name)
	}
	running := make(map[string]*member, len(a.members))
	for _, m := range a.members {
		running[m.cfg.Name] = m
	}
	next := make([]*member, len(members))
	var added []*member
	for i, cfg := range members {
		if m := running[cfg.Name]; m != nil && cfg.Key != "" && cfg.Key == m.cfg.Key && prefixes[i] == m.prefix {
			next[i] = m
			delete(running, cfg.Name)
			continue
		}
		next[i] = a.newMember(cfg, prefixes[i])
		added = append(added, next[i])
	}
	removed := make([]*member, 0, len(running))
	for _, m := range a.members { // in order, for the logs
		if running[m.cfg.Name] == m {
			m.removed.Store(true) // before any virtual child is swept
			removed = append(removed, m)
		}
	}
	old := a.view
	a.members = next
	cur := a.build(next, nil)
	a.view = cur
	// Counted under mu, before Close (which sets shut under mu) waits.
	a.wg.Add(len(added) + len(removed) + 1)
	a.mu.Unlock()

	for _, m := range removed {
		a.logger.Info("aggregate member removed or changed by a reload: its children stop, its calls get an error naming it",
			"member", m.cfg.Name)
		go a.remove(m)
	}
	for _, m := range added {
		a.logger.Info("aggregate member added by a reload: its catalog starts", "member", m.cfg.Name)
		go func() { defer a.wg.Done(); m.load() }()
	}
	// Not on the caller's goroutine: a virtual child's write waits for
	// its reader.
	go func() { defer a.wg.Done(); a.changed(old, cur) }()
	return nil
}

// removedMessage answers the requests of a member Update removed.
func removedMessage(m *member) string {
	return fmt.Sprintf("aggregate member %q was removed from the aggregate (or changed) by a reload of the configuration; the other members go on", m.cfg.Name)
}

// remove ends a member Update removed: its children serving virtual
// children (their requests answered with removedMessage), its catalog
// child and retries; then, once every child it launched has exited, its
// Close. Runs counted in wg.
func (a *Aggregate) remove(m *member) {
	defer a.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.StopBudget)
	defer cancel()
	a.mu.Lock()
	vs := make([]*virtual, 0, len(a.virtuals))
	for v := range a.virtuals {
		vs = append(vs, v)
	}
	a.mu.Unlock()
	var stopping sync.WaitGroup
	msg := removedMessage(m)
	for _, v := range vs {
		// send checks m.removed under v.mu: no slot of m is made once
		// this has run.
		v.mu.Lock()
		s := v.slots[m]
		delete(v.slots, m)
		delete(v.refused, m)
		v.mu.Unlock()
		if s != nil {
			stopping.Go(func() {
				s.gone(msg)
				s.close(ctx)
			})
		}
	}
	stopping.Go(func() {
		if err := m.close(ctx); err != nil {
			a.logger.Warn("aggregate member removed by a reload: its catalog child did not stop in time", "member", m.cfg.Name, "err", err)
		}
	})
	stopping.Wait()
	if err := m.release(ctx); err != nil {
		a.logger.Error("aggregate member removed by a reload: some of its children did not stop", "member", m.cfg.Name, "err", err)
	}
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
	cur := a.build(a.members, nil)
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

// memberOf finds the member of the view whose prefix begins an
// advertised name, and the name after it (checkPrefixes makes it unique).
func (v *view) memberOf(a *Aggregate, adv string) (*member, string) {
	for _, m := range v.members {
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
		m, own = view.memberOf(a, key)
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

package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/mcplist"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// GroupsPrefix starts the paths of the groups of a configuration:
// /groups/NAME/mcp.
const GroupsPrefix = "/groups/"

// GroupPath is the MCP endpoint of the group called name.
func GroupPath(name string) string { return GroupsPrefix + name + bridge.DefaultPath }

// An AggregateMember is one server of an aggregate endpoint.
type AggregateMember struct {
	// Server are the member's options, as it would be served alone: its
	// Name (required), its launcher (Sandbox, Local, Docker, or Remote;
	// never warm spares: a member child starts when a session first needs
	// that member), and its guards (Policy, Lock, OnPinViolation,
	// Inspection, AuditLog), which key on the member and its own names.
	// Its limits, pool and handler options are not used: the aggregate's
	// are.
	Server *ServerOptions
	// Prefix begins its advertised names; empty means Server.Name.
	Prefix string
	// Key is what the member's configuration is (its options, the
	// contents of its guard files): an update in place (Aggregates.Apply)
	// keeps a running member of the same name and Key, its catalog and
	// its sessions' children, and replaces one whose Key differs. Empty:
	// always replaced.
	Key string
}

// AggregateOptions configure an aggregate endpoint.
type AggregateOptions struct {
	// Front are the options of the aggregate's own endpoint: its Name
	// labels its metrics and logs (the path: "/mcp", "/groups/NAME/mcp"),
	// its session limits, pool bounds and handler options are the
	// endpoint's. Its launcher and guards are not used: the members'
	// are, and policy is on each member's chain (a policy of the
	// aggregate would see advertised names) and on the merged lists,
	// each item under its member's own name (listFilter).
	Front *ServerOptions
	// Members, in order.
	Members []AggregateMember
	// Separator joins a prefix and a name; empty: aggregate.DefaultSeparator.
	Separator string
	// Bounds are its bounds on member children and its failure mode; the
	// zero value is the aggregate package's defaults.
	Bounds AggregateBounds
}

// An Aggregate is an aggregate endpoint: the aggregate and the endpoint
// serving it in both eras.
type Aggregate struct {
	*Endpoint
	Agg *aggregate.Aggregate
	// forget drops the gauges of its path (Shared.Forget), once it left
	// the configuration and drained.
	forget func()

	// What an update in place (prepare) builds new members with, and
	// compares: it changes only the members.
	sh        *Shared
	logger    *slog.Logger
	separator string
	bounds    AggregateBounds
	policies  *atomic.Pointer[map[string]*policy.Policy] // listFilter's
	// members are those the aggregate was given last, in order; written
	// by an update's commit, which the lifecycle serializes.
	members []aggregate.Member
}

// CheckAggregate checks what aggregate.New would refuse of the members'
// names and prefixes (collisions), without starting anything.
func CheckAggregate(o *AggregateOptions) error {
	members := make([]aggregate.Member, len(o.Members))
	for i, m := range o.Members {
		members[i] = aggregate.Member{Name: m.Server.Name, Prefix: m.Prefix, Launcher: noLauncher{}}
	}
	return aggregate.CheckMembers(members, o.Separator)
}

type noLauncher struct{}

func (noLauncher) Launch(context.Context, string) (sandbox.Process, error) {
	return nil, errors.New("not started: a check")
}

// BuildAggregate assembles an aggregate endpoint serving at path: per
// member, its plain launcher (NewLauncher, counted), its guards as
// aggregate.Member.Intercept (tracing, metrics, message log, audit,
// policy, pinning: the chain a server alone has, on (member, its own
// name)), its pin enforcer as CatalogIntercept (what the lock refuses
// leaves every session's lists, that member's items only) and its lock
// as its catalog when the lock holds the items (version 3); then the
// aggregate, and the endpoint that runs the aggregate's virtual children
// as its children in both eras (the pool takes them for legacy children),
// with tracing and metrics under the Front's name. The endpoint's Close
// releases all of it.
func BuildAggregate(ctx context.Context, sh *Shared, o *AggregateOptions, path string) (*Aggregate, error) {
	front := o.Front
	logger := sh.logger().With("aggregate", path)
	members := make([]aggregate.Member, 0, len(o.Members))
	closeMembers := func(ms []aggregate.Member) error {
		var err error
		for i := len(ms) - 1; i >= 0; i-- {
			err = errors.Join(err, ms[i].Close())
		}
		return err
	}
	for _, am := range o.Members {
		m, err := buildMember(ctx, sh, am, o.Separator, logger)
		if err != nil {
			return nil, errors.Join(err, closeMembers(members))
		}
		members = append(members, m)
	}
	agg, err := aggregate.New(&aggregate.Options{
		Members:          members,
		Separator:        o.Separator,
		MaxChildren:      o.Bounds.MaxChildrenPerSession,
		MaxChildrenTotal: o.Bounds.MaxChildren,
		IdleTimeout:      o.Bounds.IdleTimeout,
		FailClosed:       o.Bounds.FailClosed,
		StopBudget:       sandbox.StopBudget(front.StopGrace),
		Peer:             peer.Options{MaxMessageBytes: front.MaxMessageBytes},
		Logger:           logger,
	})
	if err != nil {
		return nil, errors.Join(err, closeMembers(members))
	}
	// The aggregate releases its members (Member.Close), those an update
	// removed once their children exited, the others at its Close.
	release := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.StopBudget(front.StopGrace))
		defer cancel()
		return agg.Close(ctx)
	}

	tel := newTelemetry(sh, front.Name, logger)
	// The aggregate's own chain: its span and counters, and each
	// member's policy on the member's items of the merged lists, per
	// caller. Policy on calls, pinning and audit are each member's
	// (below), on the member's own names.
	own := &guards{tel: tel, logger: logger, logMessages: front.LogMessages}
	policies := new(atomic.Pointer[map[string]*policy.Policy])
	policies.Store(policiesOf(o.Members))
	// Always there: an update may add a member with a policy.
	own.lists = listFilter{agg: agg, policies: policies}.interceptor
	// A virtual child speaks revision 2025-11-25, like a stdio server.
	e, err := serve(sh, front, path, agg.Launcher(), pool.EraLegacy, own, tel, logger, release)
	if err != nil {
		return nil, err
	}
	if tel.server != nil {
		if err := tel.server.WatchAggregate(agg); err != nil {
			logger.Error("cannot export the aggregate's metrics", "err", err)
		}
	}
	return &Aggregate{Endpoint: e, Agg: agg, forget: func() { sh.Forget(path) },
		sh: sh, logger: logger, separator: o.Separator, bounds: o.Bounds, policies: policies, members: members}, nil
}

// policiesOf are the members' policies by member name: those with one.
func policiesOf(members []AggregateMember) *map[string]*policy.Policy {
	out := map[string]*policy.Policy{}
	for _, am := range members {
		if am.Server.Policy != nil {
			out[am.Server.Name] = am.Server.Policy
		}
	}
	return &out
}

// buildMember builds one member of an aggregate: its plain launcher
// (NewLauncher, counted), its guards as aggregate.Member.Intercept
// (tracing, metrics, message log, audit, policy, pinning: the chain a
// server alone has, on (member, its own name)), its pin enforcer as
// CatalogIntercept (what the lock refuses leaves every session's lists,
// that member's items only), its lock as its catalog when the lock holds
// the items (version 3), and Close, which releases the launcher and the
// guards (the aggregate calls it once the member's children exited).
func buildMember(ctx context.Context, sh *Shared, am AggregateMember, sep string, logger *slog.Logger) (aggregate.Member, error) {
	mo := am.Server
	mlog := logger.With("server_name", mo.Name)
	tel := newTelemetry(sh, mo.Name, mlog)
	g, err := newGuards(mo, sh, tel, mlog)
	if err != nil {
		return aggregate.Member{}, fmt.Errorf("member %q: %w", mo.Name, err)
	}
	if g.audit != nil {
		// Its lines name the tool as the member knows it and as the
		// aggregate's clients do.
		member, prefix := mo.Name, am.Prefix
		g.audit = g.audit.Advertising(func(name string) string {
			return aggregate.Advertise(member, prefix, sep, name)
		})
	}
	l, closeL, err := NewLauncher(ctx, mo, mlog)
	if err != nil {
		return aggregate.Member{}, errors.Join(fmt.Errorf("member %q: %w", mo.Name, err), g.close())
	}
	kind := mo.sandbox()
	if mo.Remote != nil {
		kind = "remote"
	}
	m := aggregate.Member{
		Name:     mo.Name,
		Prefix:   am.Prefix,
		Key:      am.Key,
		Launcher: tel.launcher(l, kind),
		// listsOfLock takes a lock that holds its items' members
		// (version 3) for the catalog, and leaves others to a catalog
		// child.
		Lock: mo.Lock,
		Intercept: func(child string, end func(error)) (peer.Interceptor, func(error)) {
			// A member child serves one client of the aggregate; an
			// --on-pin-violation end-session ends that member for that
			// client (end), not the client's whole session: see
			// aggregate.Member.Intercept. Once the child has ended, the
			// requests it left unanswered are audited, once, as a
			// session's are when its server stops.
			i, ended := g.chain(child, nil, mlog.With("child", child), end, nil)
			return i, func(err error) {
				reason := ""
				if err != nil {
					reason = err.Error()
				}
				ended(reason)
			}
		},
		Close: func() error { closeL(); return g.close() },
	}
	if g.pins != nil {
		// With --on-pin-violation end-session the member is down while
		// its catalog child offers what the lock refuses.
		m.CatalogIntercept = func(end func(error)) peer.Interceptor {
			return g.pins.Interceptor(&pin.Hooks{Logger: mlog, Alert: g.alert(mo.Name + "/catalog"), End: end})
		}
	}
	return m, nil
}

// memberUpdate is an update in place of an aggregate's members, prepared
// (the members added or changed built, the whole checked) and not yet
// made.
type memberUpdate struct {
	a        *Aggregate
	members  []aggregate.Member
	built    []aggregate.Member // to release if it is dropped
	policies *map[string]*policy.Policy
}

// prepare builds what an update in place of a's members to o needs, and
// checks it as the aggregate will: nil when o changes more than members
// (the separator, the bounds), so that the aggregate is rebuilt. A member
// of the same name and Key as a running one is kept as it runs.
func (a *Aggregate) prepare(ctx context.Context, o *AggregateOptions) (*memberUpdate, error) {
	if o.Separator != a.separator || o.Bounds != a.bounds {
		return nil, nil
	}
	running := make(map[string]aggregate.Member, len(a.members))
	for _, m := range a.members {
		running[m.Name] = m
	}
	u := &memberUpdate{a: a, members: make([]aggregate.Member, len(o.Members)), policies: policiesOf(o.Members)}
	for i, am := range o.Members {
		if m, ok := running[am.Server.Name]; ok && am.Key != "" && m.Key == am.Key && m.Prefix == am.Prefix {
			u.members[i] = m
			continue
		}
		m, err := buildMember(ctx, a.sh, am, o.Separator, a.logger)
		if err != nil {
			return nil, errors.Join(err, u.drop())
		}
		u.members[i], u.built = m, append(u.built, m)
	}
	if err := aggregate.CheckMembers(u.members, o.Separator); err != nil {
		return nil, errors.Join(err, u.drop())
	}
	return u, nil
}

// commit makes the update: the aggregate's members change in place.
func (u *memberUpdate) commit() {
	if err := u.a.Agg.Update(u.members); err != nil {
		// prepare checked what Update checks; only a closed aggregate
		// refuses, and the lifecycle does not update one.
		u.a.logger.Error("the aggregate's members could not be updated; the old ones serve", "err", err)
		_ = u.drop()
		return
	}
	u.a.policies.Store(u.policies)
	u.a.members = u.members
}

// drop releases what prepare built, when the update is not made.
func (u *memberUpdate) drop() error {
	var err error
	for _, m := range u.built {
		err = errors.Join(err, m.Close())
	}
	u.built = nil
	return err
}

// listFilter applies the members' policies to an aggregate's merged
// lists, per caller, at answer time. The lists come from one catalog
// shared by every session and every caller (a member's catalog child has
// no caller), so no member's chain sees them: each item is given to its
// member's policy here, under the member's own name, for the caller of
// the list request, as the member's own path filters its lists ("what a
// caller may not use is taken out of tools/list ..."). A member without a
// policy shows everything.
type listFilter struct {
	agg *aggregate.Aggregate
	// policies are the members' by member name, those with a policy; an
	// update in place replaces them.
	policies *atomic.Pointer[map[string]*policy.Policy]
}

func (f listFilter) interceptor(revision string, logger *slog.Logger) peer.Interceptor {
	// Revisions are dates: their order is that of their strings.
	modern := revision >= policy.ModernRevision
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if !m.Own && m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindResponse && !m.Env.IsError {
				if array, key, kind, ok := aggregateList(m.Method); ok {
					policies := *f.policies.Load()
					if len(policies) == 0 {
						return next(m) // no member has a policy
					}
					if err := f.filter(m, policies, array, key, kind, modern, logger); err != nil {
						return err
					}
				}
			}
			return next(m)
		}
	}
}

// aggregateList says which member of a list answer is its array, which
// member of an item names it, and which kind of the policy it is.
func aggregateList(method string) (array, key, kind string, ok bool) {
	switch method {
	case "tools/list":
		return "tools", "name", "tools", true
	case "prompts/list":
		return "prompts", "name", "prompts", true
	case "resources/list":
		return "resources", "uri", "resources", true
	case "resources/templates/list":
		return "resourceTemplates", "uriTemplate", "resources", true
	}
	return "", "", "", false
}

func (f listFilter) filter(m *peer.Message, policies map[string]*policy.Policy, array, key, kind string, modern bool, logger *slog.Logger) error {
	c := m.Caller() // a list answer goes to the client that asked
	out, hidden, err := mcplist.Filter(m.Data, array, key, func(name string, _ []byte) bool {
		member, own, ok := f.agg.Owner(m.Method, name)
		if !ok {
			// No member owns it now (the catalog changed meanwhile): it
			// cannot be given to a policy, so it is not shown.
			return false
		}
		p := policies[member]
		return p == nil || p.Listed(kind, own, c) == nil
	})
	if err != nil {
		// The virtual child wrote the list: this is the bridge's bug.
		logger.Error("the aggregate cannot apply its members' policies to its list: the client gets an error", "method", m.Method, "err", err)
		return m.Replace((&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the bridge could not apply its policy to the aggregate's " + m.Method + " answer: " + err.Error()}).Response(m.Env.IDAt.In(m.Data)))
	}
	if len(hidden) == 0 {
		return nil
	}
	logger.Debug("the members' policies hid items of the aggregate's list", "method", m.Method, "hidden", hidden)
	if modern {
		// `"private": The response MAY be cached and reused only within
		// the same authorization context. Caches MUST NOT be shared
		// across authorization contexts` (2026-07-28, schema,
		// CacheableResult.cacheScope): this list is filtered for its
		// caller. The pool keeps a cacheScope the child's answer has
		// (the virtual child's own, merged from its members', is
		// replaced).
		var resp, res map[string]json.RawMessage
		if json.Unmarshal(out, &resp) == nil && json.Unmarshal(resp["result"], &res) == nil {
			res["cacheScope"] = json.RawMessage(`"private"`)
			resp["result"], _ = json.Marshal(res)
			out, _ = json.Marshal(resp)
		}
	}
	return m.Replace(out)
}

// An AggregateSpec is one aggregate endpoint of a configuration, as
// Aggregates.Apply takes it.
type AggregateSpec struct {
	// Path is where it serves: /mcp, or GroupPath(NAME). Its legacy
	// HTTP+SSE endpoints are beside it (/sse, /message).
	Path string
	// Key is what its configuration is (its members' keys, prefixes,
	// the separator, its bounds): one whose Key changed is updated in
	// place when Options allow it, else rebuilt (the old one drains).
	Key   string
	Build func(ctx context.Context) (*Aggregate, error)
	// Options, if not nil, are those Build builds it with: a running
	// aggregate whose separator and bounds are the same has its members
	// updated in place (AggregateMember.Key says which changed; its
	// sessions go on), rather than being rebuilt. Their Front is not
	// compared: it is the process's.
	Options *AggregateOptions
}

// Aggregates serves the aggregate endpoints of a configuration (/mcp and
// each group's), and applies a new configuration as Set does for servers:
// one added starts, one removed or rebuilt drains (requests in flight
// finish within the grace; a draining endpoint still serves its own
// sessions), then closes; one whose members alone changed is updated in
// place (AggregateSpec.Options): its sessions go on. WaitIdle, Len and
// Close span every aggregate.
type Aggregates struct {
	lifecycle[*Aggregate]

	rmu    sync.RWMutex
	routes map[string]*aggRoute // by directory: "" for /mcp, "/groups/NAME"
}

type aggRoute struct {
	cur *Aggregate
	old []*Aggregate
}

// NewAggregates returns an empty set of aggregate endpoints; o's Grace,
// StopBudget and Logger are used.
func NewAggregates(o *SetOptions) *Aggregates {
	s := &Aggregates{routes: map[string]*aggRoute{}}
	s.lifecycle = newLifecycle(o, placement[*Aggregate]{
		kind: "aggregate", attr: "path",
		install: func(path string, a *Aggregate) {
			s.route(path, func(r *aggRoute) {
				if r.cur != nil {
					r.old = append(r.old, r.cur)
				}
				r.cur = a
			})
		},
		retiring: func(path string, a *Aggregate) {
			s.route(path, func(r *aggRoute) {
				if r.cur == a {
					r.cur = nil
					r.old = append(r.old, a)
				}
			})
		},
		drained: func(path string, a *Aggregate, gone bool) {
			s.route(path, func(r *aggRoute) {
				for i, o := range r.old {
					if o == a {
						r.old = append(r.old[:i], r.old[i+1:]...)
						break
					}
				}
			})
			if gone && a.forget != nil {
				// Removed, not rebuilt, and not added again since: its
				// gauges (sessions, members down, member children) would
				// go on showing an endpoint that is gone, read from an
				// aggregate that is closed. A rebuilt one's replaced them.
				a.forget()
			}
		},
		buildError: func(path string, err error) error {
			return fmt.Errorf("aggregate %s: %w", path, err)
		},
	})
	return s
}

// Apply makes specs the aggregates served. It builds those added or
// rebuilt, and prepares those updated in place, first: if one fails,
// what was built is released and nothing changes. Those updated in place
// are in Changes.Changed and Changes.InPlace.
func (s *Aggregates) Apply(ctx context.Context, specs []AggregateSpec) (Changes, error) {
	entries := make([]entry[*Aggregate], len(specs))
	for i, sp := range specs {
		entries[i] = entry[*Aggregate]{name: sp.Path, key: sp.Key, build: sp.Build}
		if o := sp.Options; o != nil {
			entries[i].prepare = func(ctx context.Context, a *Aggregate) (change, error) {
				u, err := a.prepare(ctx, o)
				if u == nil {
					return nil, err
				}
				return u, nil
			}
		}
	}
	return s.apply(ctx, entries)
}

func (s *Aggregates) route(path string, f func(*aggRoute)) {
	dir := strings.TrimSuffix(path, bridge.DefaultPath)
	s.rmu.Lock()
	defer s.rmu.Unlock()
	r := s.routes[dir]
	if r == nil {
		r = new(aggRoute)
		s.routes[dir] = r
	}
	f(r)
	if r.cur == nil && len(r.old) == 0 {
		delete(s.routes, dir)
	}
}

// Serves reports whether path is an aggregate's (/mcp, /sse, /message,
// /groups/NAME/...), served or not.
func Serves(path string) bool {
	return path == bridge.DefaultPath || path == bridge.DefaultLegacySSEPath || path == bridge.DefaultLegacyMessagePath ||
		strings.HasPrefix(path, GroupsPrefix)
}

// Handler returns the handler of a request to an aggregate's paths: the
// draining aggregate whose session it names, else the current one; nil
// when none serves it.
func (s *Aggregates) Handler(r *http.Request) http.Handler {
	p := r.URL.Path
	dir := ""
	if strings.HasPrefix(p, GroupsPrefix) {
		name, _, _ := strings.Cut(strings.TrimPrefix(p, GroupsPrefix), "/")
		dir = GroupsPrefix + name
	}
	s.rmu.RLock()
	defer s.rmu.RUnlock()
	rt := s.routes[dir]
	if rt == nil {
		return nil
	}
	if len(rt.old) > 0 {
		id := r.Header.Get("Mcp-Session-Id")
		if id == "" {
			id = r.URL.Query().Get("sessionId") // the legacy transport's
		}
		if id != "" && (rt.cur == nil || !holds(rt.cur, id)) {
			for _, o := range rt.old {
				if holds(o, id) {
					return o.Handler()
				}
			}
		}
	}
	if rt.cur == nil {
		return nil
	}
	return rt.cur.Handler()
}

func holds(a *Aggregate, id string) bool {
	_, err := a.Registry().Get(id)
	return err == nil
}

// Drain refuses new sessions, at shutdown.
func (s *Aggregates) Drain() { s.drainAll() }

// Package pool serves MCP revision 2026-07-28 (stateless) requests on
// pools of already-initialized children, whatever the children's own era.
//
// A child's era is found once, on a throwaway process, with
// server/discover and a timeout (the stdio binding's own probe), unless
// Options.Era fixes it. Never is server/discover sent to a child that will
// serve requests: some legacy servers exit on any request before
// initialize.
//
//   - A modern child serves requests as they come: they pass through a
//     pool of children shared by every client, with ids rewritten by peer
//     where they collide; its own InputRequiredResults pass through untouched.
//   - A legacy child is initialized by the bridge, with the capabilities
//     the client declared (those of 2025-11-25 a server acts on: see
//     churn.go), in a pool keyed by (principal, capabilities),
//     never shared across principals. Its results are decorated as the
//     revision wants them (resultType, serverInfo, ttlMs and cacheScope),
//     retired error codes rewritten. When it asks the client something in
//     the middle of a call (elicitation/create, sampling/createMessage,
//     roots/list), the call is parked on its child and the client gets an
//     InputRequiredResult whose requestState is a signed handle to it
//     (multi round-trip requests, MRTR); the retry's inputResponses become
//     the child's answers.
//
// Attribution of a child's request to a client's call must be exact, and a
// legacy child with several calls in flight cannot say which one asked. So
// a call that may ask (tools/call, prompts/get, resources/read) holds its
// child exclusively, from the moment it is sent until its final answer,
// through every round it is parked; other requests (lists, completion)
// share children freely. A pool grows to Options.Max children, so calls
// that ask run side by side on children of their own rather than in a queue.
// A holding call that is cancelled or expires costs its child, which is
// stopped: its server may still be working on the call and ask again, and
// nothing could tell that request from the next call's. What no stdio
// request can say is whether a call caused it at all: a server that asks
// on its own (from a timer after initialized) while a call holds its child
// charges that call. A fresh child settles (Options.Settle) before it
// serves, and what a child asks with no call to charge is answered by the
// bridge (a declined elicitation, an error for the others), which narrows
// that window without closing it.
//
// Log messages are attributed the same way, and more strictly: a
// notifications/message names no request either, and any call may cause
// one. So a request that sets a log level (io.modelcontextprotocol/logLevel
// in _meta), on a child of either era, has its child to itself for its
// duration: no other request runs there meanwhile, and every log message
// the child sends during it is the request's. Requests without a log level
// never get a log message.
//
// How many children a group (the modern children, or one legacy key's)
// runs follows what its children do. While they are busy it grows to one
// per CPU (Options.Cores): more children of a fast server only compete for
// the same CPUs, and each answer costs more (more process wake-ups, fewer
// messages per read). Beyond that it grows, up to Options.Max across the
// pool, only when every child a request could use is stalled: it has
// requests in flight and has answered none of them for StallAfter, as a
// server that handles one request at a time does during a slow call (one
// that interleaves quick calls with a slow one keeps answering, and takes
// more). The request then waits for the new child, or for an answer,
// rather than queue behind the slow call. Calls that need a child of their
// own (those that may ask the client, those that set a log level) start
// one whenever none is free, up to Max. Children idle for
// Options.IdleTimeout stop (the modern pool keeps Options.Min).
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Version is the revision this package serves.
const Version = "2026-07-28"

// Error codes of revision 2026-07-28 (basic/index, "Error Codes").
const (
	CodeHeaderMismatch                  = -32020
	CodeMissingRequiredClientCapability = -32021
	CodeUnsupportedProtocolVersion      = -32022
)

// Defaults of Options.
const (
	DefaultMin          = 1
	DefaultMax          = 8
	DefaultProbeTimeout = 5 * time.Second
	DefaultStateTTL     = 5 * time.Minute
	// DefaultDiscoverTTL is the ttlMs of the bridge's server/discover answer.
	DefaultDiscoverTTL = 10 * time.Minute
	// DefaultIdleTimeout is how long a child beyond Min may stay unused.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultSettle is how long a fresh legacy child that may ask the
	// client something settles before it serves: what it asks meanwhile
	// has no call behind it (npm server-everything sends roots/list from a
	// timer 350 ms after initialized), and the bridge answers it itself.
	DefaultSettle = 500 * time.Millisecond
	// DefaultKeepAlive is how often a quiet subscriptions/listen stream
	// gets an SSE comment, so that proxies and clients do not close it.
	DefaultKeepAlive = 25 * time.Second
)

// StallAfter is how long a child with requests in flight must have
// answered nothing to count as stalled: a reason to start another child
// once its group has one per core (see acquire). A fast tool answers in
// microseconds; a runnable child on a loaded machine can wait a few
// scheduler slices (milliseconds) for a CPU, and is not stalled for it: a
// child started then would compete for the same CPUs, and each child more
// costs CPU per call (more wake-ups, fewer messages per read). A server
// that handles one request at a time and is in a slow call is stalled
// after this long, and 10 ms is little beside a slow call, or beside the
// child that starts for the requests behind it.
const StallAfter = 10 * time.Millisecond

// startProcs is GOMAXPROCS as Go set it at start: cmd/bridge lowers it to
// one while it serves one request at a time (internal/procs), which says
// nothing of the CPUs the children can use.
var startProcs = runtime.GOMAXPROCS(0)

// Era is the era of the children's protocol.
type Era uint8

const (
	// EraAuto probes the command once, on a throwaway process.
	EraAuto Era = iota
	// EraLegacy: the children need initialize (revisions up to 2025-11-25).
	EraLegacy
	// EraModern: the children speak revision 2026-07-28.
	EraModern
)

func (e Era) String() string {
	switch e {
	case EraLegacy:
		return "legacy"
	case EraModern:
		return "modern"
	}
	return "auto"
}

// ErrEra is what Era.UnmarshalText returns for text that is not an era.
var ErrEra = errors.New("want auto, legacy or modern")

// ParseEra parses the name of an era: auto (or empty), legacy or modern.
func ParseEra(s string) (Era, error) {
	var e Era
	if err := e.UnmarshalText([]byte(s)); err != nil {
		return EraAuto, fmt.Errorf("unknown child era %q: %w", s, err)
	}
	return e, nil
}

// MarshalText writes the era as String does.
func (e Era) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText reads auto (or nothing), legacy or modern; other text is
// refused with ErrEra (the caller names the option and the text).
func (e *Era) UnmarshalText(text []byte) error {
	switch string(text) {
	case "", "auto":
		*e = EraAuto
	case "legacy":
		*e = EraLegacy
	case "modern":
		*e = EraModern
	default:
		return ErrEra
	}
	return nil
}

// Options configure a Pool. Every zero value means the documented default.
type Options struct {
	// Launch starts a child; name says what for (logs, container names).
	// Required.
	Launch func(ctx context.Context, name string) (peer.Process, error)
	// Era of the children. EraAuto (zero) probes the command.
	Era Era
	// Min children kept running for modern children (legacy pools are per
	// principal and start empty). Zero means DefaultMin; negative means none.
	Min int
	// Max children in all, across every principal. Zero means DefaultMax.
	Max int
	// MaxPerPrincipal is the most children one principal may have (its
	// legacy children, and the modern children its requests with a log
	// level hold alone); beyond it a request that needs one more is
	// refused with ErrPrincipalShare (see share.go). Zero means half of Max
	// (at least one) when clients authenticate (PrivateCache), else Max:
	// without authentication every client is the same principal. Negative
	// means Max.
	MaxPerPrincipal int
	// Cores is how many children a group (the modern children, or a
	// legacy key's) grows to because they are busy: one per CPU. Beyond
	// it, a group grows only when its children are stalled (StallAfter).
	// Zero means GOMAXPROCS (as Go set it at start, or now if higher).
	Cores int
	// ProbeTimeout bounds the era probe. Zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// StateTTL is how long a parked call waits for the client's retry.
	// Zero means DefaultStateTTL.
	StateTTL time.Duration
	// IdleTimeout stops children unused this long (beyond Min). Zero means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// EvictIdle is how long a legacy child must have been idle before it
	// is stopped to make room (at Max) for a request of another principal:
	// meanwhile that request waits, so that principals taking turns do not
	// start a process per turn (see churn.go). Zero means DefaultEvictIdle;
	// negative means none.
	EvictIdle time.Duration
	// KeepAlive is how often a quiet subscription stream gets a comment.
	// Zero means DefaultKeepAlive; negative means none (the bridge's front
	// end keeps every stream of its own alive, --sse-keepalive).
	KeepAlive time.Duration
	// Settle is how long a fresh legacy child whose clients declared
	// elicitation, sampling or roots waits after its initialization before
	// it serves: a request it sends meanwhile is answered by the bridge
	// (see child.Route), never charged to a call. Zero means
	// DefaultSettle; negative means none.
	Settle time.Duration
	// Secret keys the requestState HMAC: instances sharing it accept each
	// other's states (and forward them to their owner). Nil means a random
	// key, good for this process only.
	Secret []byte
	// Instance names this instance in requestStates: another instance
	// forwards a retry to it (see ForwardError). Empty means "local".
	Instance string
	// OtherVersions are the revisions server/discover lists after Version:
	// the ones the bridge serves with sessions on the same endpoint.
	OtherVersions []string
	// PrivateCache says results may differ per principal: cacheScope
	// "private". The bridge sets it when clients authenticate.
	PrivateCache bool
	// Peer configures each child's connection.
	Peer peer.Options
	// ChildIntercept, if set, gives each child (not the era probe) an
	// interceptor of its own after Peer.Intercept: what keeps state per
	// connection, such as tool pinning and the audit log. name names the
	// child in logs; end stops it (it must not block); call sends a request
	// of the bridge's own to it (peer.Conn.Call). It returns the
	// interceptor and what to call once the child has stopped (nil:
	// nothing), with why it stopped: called once, after the last message
	// from the child has passed the interceptor and before the calls in
	// flight on it are answered, so that what keeps per-request state (the
	// audit log) accounts for the requests left unanswered first. Nil:
	// none.
	ChildIntercept func(name string, end func(error), call func(ctx context.Context, method string, params any) (json.RawMessage, error)) (intercept peer.Interceptor, ended func(error))
	// Readable, if set, says whether the caller of a subscription may hear
	// of the resource uri: caller is its call's (nil: none), as the
	// interception point sees it for the messages the call sends. The updates of a resource it may
	// not read do not reach the subscription, from a child of either era
	// (a child's notifications go to several callers, so the interception
	// point cannot decide for each); a legacy child is not subscribed to
	// that resource for it, and the acknowledgment leaves it out. (A
	// modern child gets the client's subscriptions/listen request through
	// the interception point, which may take resources out of it.) Nil:
	// every resource.
	Readable func(caller *auth.Principal, uri string) bool
	// Limits are the limits every request honours (see limits.go); its
	// zero values mean peer's defaults. Its MaxQueuedBytes applies to
	// Peer unless Peer sets its own.
	Limits peer.Limits
	// Logger receives the pool's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Errors callers branch on.
var (
	// ErrClosed: the pool is shutting down.
	ErrClosed = errors.New("the bridge is shutting down")
	// ErrLaunch wraps a failure to start or initialize a child.
	ErrLaunch = errors.New("could not start the MCP server")
)

// ForwardError says that a retry's requestState names another instance,
// which holds the parked call: the front end forwards the request there.
// It is returned only for a state whose signature verified.
type ForwardError struct{ Instance string }

func (e *ForwardError) Error() string {
	return "the parked request is held by bridge instance " + strconv.Quote(e.Instance)
}

// A Pool serves stateless requests on children. Its methods are safe for
// concurrent use.
type Pool struct {
	opts   Options
	logger *slog.Logger
	signer *signer
	ctx    context.Context // ends at Close: background spawns
	cancel context.CancelFunc
	wg     sync.WaitGroup
	names  atomic.Int64
	// inflight counts the requests in flight (admit, in limits.go).
	inflight atomic.Int64
	// timeouts holds the request timeout of every call (nil: none).
	timeouts *peer.Timeouts

	probeMu sync.Mutex // one probe at a time

	// eraKnown is era once known: read without mu by Era, which every
	// request asks (twice: IsKnown, then Serve).
	eraKnown atomic.Uint32

	mu       sync.Mutex
	era      Era
	discover json.RawMessage // a modern child's own server/discover result
	init     json.RawMessage // a legacy child's initialize result
	groups   map[string]*group
	total    int           // children running or starting
	changed  chan struct{} // closed and replaced when a child frees or ends, if watched
	watched  bool          // changed was handed to a waiter (see changedLocked)
	waiting  int           // requests waiting for a child
	noted    chan struct{} // closed and replaced when waiting changes (Await), if handed out
	notedOut bool          // noted was handed to a waiter (see await)
	parked   map[string]*call
	closed   bool
	retired  bool // Retire: no new call
	// acquiring counts calls in acquire: they hold no child yet (one may
	// be starting for them), but WaitIdle waits for them.
	acquiring int
	subs      *subscriptions
	tools     toolCache // the tools' x-mcp-header annotations
	lastRead  time.Time // the latest reading of the clock (clockLocked)

	cores int              // Options.Cores
	now   func() time.Time // the clock; tests set their own

	churn churn // children started and stopped for other keys (churn.go)
}

// New returns a pool. Children start on demand (the modern pool's Min once
// the era is known).
func New(opts *Options) (*Pool, error) {
	o := *opts
	if o.Launch == nil {
		return nil, errors.New("pool: Options.Launch is required")
	}
	if o.Min == 0 {
		o.Min = DefaultMin
	}
	if o.Min < 0 {
		o.Min = 0
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.Min > o.Max {
		o.Min = o.Max
	}
	if o.Cores <= 0 {
		o.Cores = max(startProcs, runtime.GOMAXPROCS(0))
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.StateTTL <= 0 {
		o.StateTTL = DefaultStateTTL
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = o.Limits.KeepAlive
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Instance == "" {
		o.Instance = "local"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	limitsDefaults(&o)
	if o.Peer.Logger == nil {
		o.Peer.Logger = o.Logger
	}
	s, err := newSigner(o.Secret)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	p := &Pool{
		opts:    o,
		logger:  o.Logger,
		signer:  s,
		era:     o.Era,
		groups:  make(map[string]*group),
		changed: make(chan struct{}),
		noted:   make(chan struct{}),
		parked:  make(map[string]*call),
		cores:   o.Cores,
		now:     time.Now,
	}
	p.eraKnown.Store(uint32(o.Era))
	p.timeouts = newTimeouts(o.Limits)
	p.subs = newSubscriptions(p)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.janitor()
	return p, nil
}

// Era returns the children's era, probing the command if it is not known
// yet.
func (p *Pool) Era(ctx context.Context) (Era, error) {
	if era := Era(p.eraKnown.Load()); era != EraAuto {
		return era, nil
	}
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	p.mu.Lock()
	era := p.era
	p.mu.Unlock()
	if era != EraAuto {
		return era, nil
	}
	era, discover, err := p.probe(ctx)
	if err != nil {
		return EraAuto, err
	}
	p.mu.Lock()
	p.era, p.discover = era, discover
	p.eraKnown.Store(uint32(era))
	p.mu.Unlock()
	p.logger.Info("the MCP server's era is known", "era", era.String())
	if era == EraModern {
		p.fill()
	}
	return era, nil
}

// probe finds the command's era on a throwaway process: "A client that
// supports both modern (per-request-metadata) MCP versions and a legacy
// version that requires an initialize handshake SHOULD probe with
// server/discover ... The server returns any other error, or does not
// respond within a reasonable timeout: the server is legacy"
// (basic/transports/stdio, Backward Compatibility).
func (p *Pool) probe(ctx context.Context) (Era, json.RawMessage, error) {
	proc, err := p.opts.Launch(ctx, "era-probe")
	if err != nil {
		return EraAuto, nil, fmt.Errorf("%w for the era probe: %w", ErrLaunch, err)
	}
	conn := peer.New(proc, discard{}, &p.opts.Peer)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	pctx, cancel := context.WithTimeout(ctx, p.opts.ProbeTimeout)
	defer cancel()
	res, err := conn.Call(pctx, "server/discover", map[string]any{"_meta": map[string]any{
		MetaProtocolVersion:    Version,
		MetaClientCapabilities: map[string]any{},
		MetaClientInfo:         bridgeInfo,
	}})
	if err != nil {
		if ctx.Err() != nil {
			return EraAuto, nil, ctx.Err()
		}
		p.logger.Info("the MCP server is legacy: it did not answer server/discover", "err", err)
		return EraLegacy, nil, nil
	}
	var d struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if json.Unmarshal(res, &d) != nil || !slices.Contains(d.SupportedVersions, Version) {
		p.logger.Info("the MCP server is legacy: its server/discover does not list "+Version, "versions", d.SupportedVersions)
		return EraLegacy, nil, nil
	}
	return EraModern, res, nil
}

// discard is the Router of the probe's connection.
type discard struct{}

func (discard) Route(*peer.Message) {}
func (discard) Ended(error)         {}

var bridgeInfo = map[string]string{"name": "mcp-bridge", "version": "1"}

// Close stops every child and ends parked calls.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var all []*child
	for _, g := range p.groups {
		all = append(all, g.children...)
	}
	for _, c := range p.parked {
		c.stopTimer() // the children stop below: nothing to expire
	}
	p.parked = map[string]*call{}
	p.mu.Unlock()
	if p.timeouts != nil {
		p.timeouts.Close()
	}
	p.cancel()
	p.subs.closeAll()
	var errs []error
	for _, ch := range all {
		if err := ch.conn.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// group is the children of one pool key: every modern child, or the
// legacy children of one (principal, capabilities).
type group struct {
	key       string
	principal auth.Tag // sharedOwner for the modern group
	caps      json.RawMessage
	children  []*child
	starting  int
}

// sharedOwner is the owner of the modern group, whose children serve every
// principal: the owner of no request ("" is the unauthenticated one, and
// every tag of a principal names its kind before a colon), so that a
// child of the modern group counts as another principal's for every
// legacy group (evictLocked), the unauthenticated one's too.
const sharedOwner auth.Tag = "\x00shared"

func (p *Pool) groupLocked(key string, principal auth.Tag, caps json.RawMessage) *group {
	g := p.groups[key]
	if g == nil {
		g = &group{key: key, principal: principal, caps: caps}
		p.groups[key] = g
	}
	return g
}

// dropEmptyLocked forgets a legacy group without children, so that keys
// (principal, capabilities) that never got a child cost nothing.
func (p *Pool) dropEmptyLocked(g *group) {
	if len(g.children) == 0 && g.starting == 0 && g.key != modernKey && p.groups[g.key] == g {
		delete(p.groups, g.key)
	}
}

// signalLocked wakes the requests waiting for a child. A channel no one
// took is not replaced: a request freeing its child on every answer would
// allocate one per call, with nobody to wake.
func (p *Pool) signalLocked() {
	if !p.watched {
		return
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.watched = false
}

// changedLocked returns the channel signalLocked closes next, for a waiter.
func (p *Pool) changedLocked() chan struct{} {
	p.watched = true
	return p.changed
}

// canonCaps caches pool keys by principal and capabilities as written:
// clients send the same bytes on every request. Bounded: beyond
// maxCanonCaps entries it starts over.
var canonCaps struct {
	sync.Mutex
	m map[capsKey]canonical
}

type capsKey struct {
	principal auth.Tag
	caps      string
}

type canonical struct {
	key  string
	caps json.RawMessage
}

const maxCanonCaps = 1024

// lastCaps is the entry of canonCaps added last.
var lastCaps atomic.Pointer[lastCanonical]

type lastCanonical struct {
	capsKey
	c canonical
}

// legacyKey is the pool key of a legacy request: its principal and its
// capabilities, canonicalized.
func legacyKey(principal auth.Tag, caps json.RawMessage) (string, json.RawMessage, error) {
	// A caller usually repeats its principal and capabilities: a
	// comparison with the entry added last spares hashing an interface and
	// a string under the lock. (Only an addition replaces it: replacing it
	// on every other hit would allocate per request where callers take
	// turns.)
	if l := lastCaps.Load(); l != nil && l.principal == principal && l.caps == string(caps) {
		return l.c.key, l.c.caps, nil
	}
	canonCaps.Lock()
	c, ok := canonCaps.m[capsKey{principal, string(caps)}]
	canonCaps.Unlock()
	if ok {
		return c.key, c.caps, nil
	}
	canon, err := canonicalCaps(caps)
	if err != nil {
		return "", nil, err
	}
	c = canonical{key: "L\x00" + principalDigest(principal) + "\x00" + string(canon), caps: canon}
	canonCaps.Lock()
	if canonCaps.m == nil || len(canonCaps.m) >= maxCanonCaps {
		canonCaps.m = make(map[capsKey]canonical)
	}
	canonCaps.m[capsKey{principal, string(caps)}] = c
	canonCaps.Unlock()
	lastCaps.Store(&lastCanonical{capsKey{principal, string(caps)}, c})
	return c.key, c.caps, nil
}

func canonicalCaps(caps json.RawMessage) (json.RawMessage, error) {
	var v any
	if len(caps) > 0 {
		if err := json.Unmarshal(caps, &v); err != nil {
			return nil, err
		}
	}
	m, _ := v.(map[string]any)
	canon, _ := json.Marshal(legacyCapabilities(m))
	return canon, nil
}

const modernKey = "M"

// acquire finds a child for a request: for one that may ask the client
// (exclusive), a child no other such call holds; for one that set a log
// level (c.solo), a child with nothing in flight, which it then holds
// alone; for the others (shared), an idle child, else the least loaded
// child that is answering (not stalled, see StallAfter). It starts a
// child when none fits and Max allows, stopping an idle child of another
// key if it must, and otherwise waits.
//
// A busy child is reason enough to start another while the group has
// fewer children than cores (Options.Cores): the request runs on the
// least loaded child meanwhile. Beyond that a shared request starts a
// child only when every child it could use is stalled, and then waits
// for it (or for a child to answer) rather than queue behind a call that
// may take minutes; at Max it takes the least loaded child, as before.
// Exclusive and solo calls need a free child: they start one whenever
// none is free, up to Max.
func (p *Pool) acquire(ctx context.Context, key string, principal auth.Tag, caps json.RawMessage, legacy, exclusive bool, c *call) (*child, error) {
	shared := !exclusive && !c.solo
	spawnFailed := false // a child started for stalled ones failed: queue instead
	// Waiting for room at Max (churn.go): ageIn is how long until a child
	// of another principal may be stopped for this request, roomBy when
	// the request gives up, ager the timer of the sooner.
	var ageIn time.Duration
	var roomBy time.Time
	var ager *time.Timer
	p.mu.Lock()
	if p.retired && !p.closed {
		p.mu.Unlock()
		return nil, ErrRetired
	}
	p.acquiring++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.acquiring--
		p.leaveRoomTurnLocked(c)
		p.noteWaitingLocked(0) // wakes WaitIdle
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		g := p.groupLocked(key, principal, caps)
		var best *child
		usable := g.starting // children the call could use, those starting included
		for _, ch := range g.children {
			if ch.dead || (exclusive && ch.holder != nil) || !fits(ch, c) {
				continue
			}
			usable++
			if best == nil || ch.inflight < best.inflight {
				best = ch
			}
		}
		atShare := (legacy || c.solo) && p.atShareLocked(g, legacy, c)
		if atShare && !legacy {
			// A log-level call takes a modern child for itself.
			p.mu.Unlock()
			return nil, p.shareError()
		}
		if best != nil && (best.inflight == 0 || exclusive) {
			p.takeLocked(best, exclusive, c)
			p.mu.Unlock()
			return best, nil
		}
		room := p.total < p.opts.Max && !atShare
		grow := false // start a child for this request and take it
		switch {
		case shared && (best != nil || usable >= p.cores):
			if ch := p.answeringLocked(g, c); ch != nil {
				p.takeLocked(ch, false, c)
				if usable < p.cores && g.starting == 0 && room {
					// Below one child per core, busy is reason enough:
					// another child for the next requests.
					p.spawnLocked(g, legacy)
				}
				p.mu.Unlock()
				return ch, nil
			}
			// Every child the call could use is stalled, or starting.
			var own *child
			if !legacy && best != nil {
				own = p.ownStalledLocked(g, c)
			}
			switch {
			case g.starting > 0:
				// One is starting: wait for it, or for an answer.
			case own != nil:
				// Its principal's slow calls hold its share of the
				// children already: it queues behind them (share.go).
				p.takeLocked(own, false, c)
				p.mu.Unlock()
				return own, nil
			case !spawnFailed && (room || p.madeRoomLocked(g, atShare)):
				grow = true
			default:
				// At Max (or no child could start): queue on the least
				// loaded, as a busy pool does.
				p.takeLocked(best, false, c)
				p.mu.Unlock()
				return best, nil
			}
		case best != nil:
			// A solo call (an exclusive one took best above): best runs
			// subscriptions only, which do not count against it.
			p.takeLocked(best, exclusive, c)
			if g.starting == 0 && room {
				p.spawnLocked(g, legacy)
			}
			p.mu.Unlock()
			return best, nil
		default:
			if !room && legacy {
				if ch := p.reusableLocked(g, c); ch != nil {
					p.takeLocked(ch, exclusive, c)
					p.mu.Unlock()
					return ch, nil
				}
			}
			switch {
			case room:
				grow = true
			case legacy && !atShare && !p.roomTurnLocked(c):
				// Requests waiting for another principal's child to
				// be stopped take it in turn (churn.go).
			default:
				grow, ageIn = p.makeRoomLocked(g, atShare)
			}
			if !grow && atShare && g.starting == 0 {
				p.dropEmptyLocked(g)
				p.mu.Unlock()
				return nil, p.shareError()
			}
			if !grow && legacy && g.starting == 0 && roomBy.IsZero() {
				// No room for this principal's first child: it waits for
				// one to free or to have been idle EvictIdle, within its
				// request timeout (churn.go).
				if d := p.opts.Limits.RequestTimeout; d > 0 {
					roomBy = p.clockLocked().Add(d)
				}
			}
		}
		if grow {
			p.total++
			g.starting++
			p.mu.Unlock()
			ch, err := p.spawn(ctx, g, legacy)
			if err != nil {
				if shared && best != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) {
					// The stalled children may still answer: better a
					// queue on one of them than an error.
					p.logger.Warn("could not start another MCP server for the pool: the request waits for a busy one", "err", err)
					spawnFailed = true
					continue
				}
				return nil, err
			}
			p.mu.Lock()
			if ch.dead || (exclusive && ch.holder != nil) || !fits(ch, c) {
				p.mu.Unlock()
				continue
			}
			p.takeLocked(ch, exclusive, c)
			p.mu.Unlock()
			return ch, nil
		}
		var aged <-chan time.Time // a child will have been idle EvictIdle, or roomBy passed
		if !roomBy.IsZero() {
			left := roomBy.Sub(p.clockLocked())
			if left <= 0 {
				p.dropEmptyLocked(g)
				p.mu.Unlock()
				return nil, p.noRoomError()
			}
			if ageIn <= 0 || left < ageIn {
				ageIn = left
			}
		}
		if ageIn > 0 {
			if ager == nil {
				ager = time.NewTimer(ageIn)
				defer ager.Stop()
			} else {
				ager.Reset(ageIn)
			}
			aged = ager.C
		}
		wait := p.changedLocked()
		p.noteWaitingLocked(+1)
		p.mu.Unlock()
		select {
		case <-wait:
			p.mu.Lock()
			p.noteWaitingLocked(-1)
			p.mu.Unlock()
		case <-aged:
			p.mu.Lock()
			p.noteWaitingLocked(-1)
			p.mu.Unlock()
		case <-ctx.Done():
			p.mu.Lock()
			p.noteWaitingLocked(-1)
			p.dropEmptyLocked(g)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
		ageIn = 0
	}
}

// noteWaitingLocked counts requests waiting for a child, for Stats. It
// wakes Await, not the waiting requests (they wait on p.changed). As
// with p.changed, the channel is replaced only if a waiter has it: every
// acquire notes its end, and a channel made and closed per request was
// an allocation on the stateless path with nobody waiting.
func (p *Pool) noteWaitingLocked(d int) {
	p.waiting += d
	if !p.notedOut {
		return
	}
	close(p.noted)
	p.noted = make(chan struct{})
	p.notedOut = false
}

// fits reports whether c may run on ch besides what runs there already:
// a child held by a solo call takes nothing else, and a solo call takes
// only a child with nothing in flight. Subscriptions do not count: their
// streams get no log messages ("MUST NOT deliver it on a
// subscriptions/listen stream", server/utilities/logging), and a solo call
// must not wait for one to end.
func fits(ch *child, c *call) bool {
	return c.listen || (ch.alone == nil && (!c.solo || ch.inflight == ch.listens))
}

func (p *Pool) takeLocked(ch *child, exclusive bool, c *call) {
	if !c.listen && ch.inflight == ch.listens {
		// It becomes busy: its quiet time starts now.
		ch.quiet = p.clockLocked()
	}
	ch.inflight++
	c.on, c.prevOn, c.nextOn = ch, nil, ch.calls
	if ch.calls != nil {
		ch.calls.prevOn = c
	}
	ch.calls = c
	if exclusive {
		ch.holder = c
	}
	if c.solo {
		ch.alone = c
	}
	if c.listen {
		ch.listens++
	}
}

// release gives a child back after a call ended; answered says the child
// answered it (not so for a cancelled call, or one never sent).
func (p *Pool) release(ch *child, c *call, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.on != ch {
		return
	}
	if c.prevOn != nil {
		c.prevOn.nextOn = c.nextOn
	} else {
		ch.calls = c.nextOn
	}
	if c.nextOn != nil {
		c.nextOn.prevOn = c.prevOn
	}
	c.on, c.prevOn, c.nextOn = nil, nil, nil
	ch.inflight--
	if ch.holder == c {
		ch.holder = nil
	}
	if ch.alone == c {
		ch.alone = nil
	}
	if c.listen {
		ch.listens--
	}
	if ch.inflight == 0 {
		ch.lastUsed = p.clockLocked()
	}
	if answered && !c.listen && p.lastRead.After(ch.quiet) {
		// The time of the answer, without reading the clock on every
		// answer: the pool's latest reading, taken no later than the
		// answer (when a child became busy or idle, or a request found
		// every child busy). Under load readings are microseconds apart;
		// when the pool was quiet, the child looks quiet since earlier
		// than it is, so it may be found stalled early, never late: an
		// error toward starting a child, as the pool did on busy alone.
		ch.quiet = p.lastRead
	}
	p.signalLocked()
}

// clockLocked reads the clock, and keeps the reading for release.
func (p *Pool) clockLocked() time.Time {
	p.lastRead = p.now()
	return p.lastRead
}

// spawnLocked starts a child for g in the background: for the next
// requests, or to fill the modern pool to Min.
func (p *Pool) spawnLocked(g *group, legacy bool) {
	p.total++
	g.starting++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if _, err := p.spawn(p.ctx, g, legacy); err != nil && !errors.Is(err, ErrClosed) {
			p.logger.Warn("could not start an MCP server for the pool", "err", err)
		}
	}()
}

// answeringLocked returns the least loaded child of g that c could run on
// and that is not stalled, or nil.
func (p *Pool) answeringLocked(g *group, c *call) *child {
	now := p.clockLocked()
	var best *child
	for _, ch := range g.children {
		if ch.dead || !fits(ch, c) || ch.stalled(now) {
			continue
		}
		if best == nil || ch.inflight < best.inflight {
			best = ch
		}
	}
	return best
}

// evictLocked makes room for g by stopping the longest idle child of
// another key (of a group that also passes from, if not nil). A child of
// another principal must have been idle Options.EvictIdle (see churn.go).
// It reports whether it did; if not, how long until a child of another
// principal will have been idle long enough (0: none is idle).
func (p *Pool) evictLocked(g *group, from func(*group) bool) (bool, time.Duration) {
	hold := p.evictIdle()
	var now time.Time
	if hold > 0 {
		now = p.clockLocked()
	}
	var victim *child
	var ageIn time.Duration
	for _, og := range p.groups {
		if og == g || from != nil && !from(og) {
			continue
		}
		for _, ch := range og.children {
			if ch.dead || ch.inflight != 0 || p.subs.usesLocked(ch) {
				continue
			}
			if hold > 0 && og.principal != g.principal {
				if left := hold - now.Sub(ch.lastUsed); left > 0 {
					if ageIn == 0 || left < ageIn {
						ageIn = left
					}
					continue
				}
			}
			if victim == nil || ch.lastUsed.Before(victim.lastUsed) {
				victim = ch
			}
		}
	}
	if victim == nil {
		return false, ageIn
	}
	p.retireLocked(victim)
	p.churn.evicted.Add(1)
	return true, 0
}

// retireLocked removes a child from its group and stops it in the background.
func (p *Pool) retireLocked(ch *child) {
	if ch.dead {
		return
	}
	ch.dead = true
	g := ch.group
	g.children = slices.DeleteFunc(g.children, func(o *child) bool { return o == ch })
	p.dropEmptyLocked(g)
	p.total--
	p.signalLocked()
	if p.closed {
		return // Close stops every child it found, this one included
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = ch.conn.Close(ctx)
	}()
}

// spawn starts a child for g (whose starting count the caller raised),
// initializes it if it is legacy, and adds it to g.
func (p *Pool) spawn(ctx context.Context, g *group, legacy bool) (*child, error) {
	fail := func(err error) (*child, error) {
		p.mu.Lock()
		p.total--
		g.starting--
		p.dropEmptyLocked(g)
		p.signalLocked()
		p.mu.Unlock()
		return nil, err
	}
	name := fmt.Sprintf("pool-%d", p.names.Add(1))
	proc, err := p.opts.Launch(ctx, name)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrLaunch, err))
	}
	ch := &child{pool: p, group: g, ready: make(chan struct{})}
	popts := p.opts.Peer
	if p.opts.ChildIntercept != nil {
		end := func(error) {
			// Owned by the child's connection: Close is bounded by the
			// stop budget of its process.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = ch.conn.Close(ctx)
			}()
		}
		call := func(ctx context.Context, method string, params any) (json.RawMessage, error) {
			<-ch.ready
			return ch.conn.Call(ctx, method, params)
		}
		intercept, ended := p.opts.ChildIntercept(name, end, call)
		popts.Intercept = peer.Chain(popts.Intercept, intercept)
		ch.ended = ended
	}
	ch.conn = peer.New(proc, ch, &popts)
	close(ch.ready)
	if legacy {
		ictx, cancel := p.initContext(ctx)
		res, err := ch.conn.Initialize(ictx, map[string]any{
			"protocolVersion": "2025-11-25",
			"capabilities":    json.RawMessage(g.caps),
			"clientInfo":      bridgeInfo,
		})
		err = initFailed(ictx, err)
		cancel()
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = ch.conn.Close(cctx)
			cancel()
			return fail(fmt.Errorf("%w: %w", ErrLaunch, err))
		}
		ch.init = res
		var r struct {
			ServerInfo json.RawMessage `json:"serverInfo"`
		}
		_ = json.Unmarshal(res, &r)
		ch.serverInfo = r.ServerInfo
		if p.opts.Settle > 0 && declaresInputs(g.caps) {
			// Servers ask right after initialized (roots/list, from a
			// timer or on the notification) with no call behind them;
			// such a request reaches no call while the child is not in
			// its group.
			t := time.NewTimer(p.opts.Settle)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
	p.mu.Lock()
	g.starting--
	if legacy && p.init == nil {
		p.init = ch.init
	}
	if p.closed || ch.dead {
		p.total--
		ch.dead = true
		closed := p.closed
		p.signalLocked()
		p.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = ch.conn.Close(cctx)
		cancel()
		if closed {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: it exited right after starting", ErrLaunch)
	}
	ch.lastUsed = p.clockLocked()
	g.children = append(g.children, ch)
	p.churn.started.Add(1)
	p.signalLocked()
	p.mu.Unlock()
	p.subs.grew(ch)
	return ch, nil
}

// fill starts the modern pool's Min children in the background.
func (p *Pool) fill() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	g := p.groupLocked(modernKey, sharedOwner, nil)
	n := p.opts.Min - len(g.children) - g.starting
	if room := p.opts.Max - p.total; n > room {
		n = room
	}
	for range max(n, 0) {
		p.spawnLocked(g, false)
	}
	p.mu.Unlock()
}

// janitor stops children unused for IdleTimeout, keeping Min modern ones.
func (p *Pool) janitor() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.IdleTimeout / 4)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			for _, g := range p.groups {
				keep := 0
				if g.key == modernKey {
					keep = p.opts.Min
				}
				for _, ch := range slices.Clone(g.children) {
					if len(g.children) > keep && !ch.dead && ch.inflight == 0 && !p.subs.usesLocked(ch) && now.Sub(ch.lastUsed) > p.opts.IdleTimeout {
						p.retireLocked(ch)
					}
				}
			}
			p.mu.Unlock()
		}
	}
}

// Stats is a snapshot of the pool, for tests and logs. Waiting counts the
// requests waiting for a child.
type Stats struct {
	Children, Parked, Groups, InFlight, Waiting int
	// Starting counts the children being started.
	Starting int
	// Started counts the children started so far (initialized, for a
	// legacy child); Evicted those stopped, idle, to make room for a
	// request of another key.
	Started, Evicted int64
}

// WaitIdle waits until no call is in flight on any child (parked calls
// count as in flight), or ctx ends.
// Calls still taking a child count too, and requests admitted until they
// leave (the bound on requests in flight): a Close after WaitIdle cuts
// none of them, and a request after it is not refused for one of them.
func (p *Pool) WaitIdle(ctx context.Context) error {
	return p.await(ctx, func(s Stats, acquiring int) bool {
		return s.InFlight == 0 && acquiring == 0 && p.inflight.Load() == 0
	})
}

// Await waits until cond holds for the pool's Stats, or ctx ends: it
// checks again whenever a child frees or ends, or a request starts or
// stops waiting for one.
func (p *Pool) Await(ctx context.Context, cond func(Stats) bool) error {
	return p.await(ctx, func(s Stats, _ int) bool { return cond(s) })
}

// await is Await whose cond also gets the calls taking a child.
func (p *Pool) await(ctx context.Context, cond func(s Stats, acquiring int) bool) error {
	for {
		p.mu.Lock()
		s := p.statsLocked()
		acquiring := p.acquiring
		changed, noted := p.changedLocked(), p.noted
		p.notedOut = true
		p.mu.Unlock()
		if cond(s, acquiring) {
			return nil
		}
		select {
		case <-changed:
		case <-noted:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stats returns a snapshot of the pool.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statsLocked()
}

func (p *Pool) statsLocked() Stats {
	s := Stats{Parked: len(p.parked), Groups: len(p.groups), Waiting: p.waiting,
		Started: p.churn.started.Load(), Evicted: p.churn.evicted.Load()}
	for _, g := range p.groups {
		s.Children += len(g.children)
		s.Starting += g.starting
		for _, ch := range g.children {
			s.InFlight += ch.inflight
		}
	}
	return s
}

// child is one child of the pool, and the Router of its connection.
type child struct {
	pool       *Pool
	group      *group
	conn       *peer.Conn
	ready      chan struct{} // closed once conn is set
	init       json.RawMessage
	serverInfo json.RawMessage
	logMu      sync.Mutex
	logLevel   string      // set with logging/setLevel (legacy)
	ended      func(error) // from Options.ChildIntercept, or nil

	// Under pool.mu:
	inflight int
	// calls are the inflight calls, linked through call.nextOn: a list,
	// not a map, so that a call costs no map insertion and deletion.
	calls    *call
	holder   *call     // the call that may ask the client, if any
	alone    *call     // the call that set a log level: nothing else runs here
	listens  int       // subscriptions among the calls in flight
	lastUsed time.Time // when it last became idle
	quiet    time.Time // while busy: when it last answered, or became busy
	dead     bool
}

// stalled reports whether the child has requests in flight (subscriptions
// aside: they are answered only at their end) and has answered none of
// them for StallAfter: a server that interleaves a slow call with quick
// ones keeps answering and is not stalled; one that handles a request at
// a time and is in a slow call is.
func (ch *child) stalled(now time.Time) bool {
	return ch.inflight > ch.listens && now.Sub(ch.quiet) >= StallAfter
}

// Route gets the child's messages: the answers and progress of calls go to
// their call; its requests go to the call holding it; list changes and
// resource updates go to the subscriptions.
func (ch *child) Route(m *peer.Message) {
	<-ch.ready
	p := ch.pool
	if c, ok := m.Origin.(*call); ok {
		if m.Env.Kind == jsonrpc.KindResponse {
			c.push(item{kind: itemFinal, msg: m.Message})
		} else {
			c.push(item{kind: itemNotify, msg: m.Message})
		}
		return
	}
	switch {
	case m.Env.Kind == jsonrpc.KindRequest:
		switch m.Method {
		case "elicitation/create", "sampling/createMessage", "roots/list":
			p.mu.Lock()
			holder := ch.holder
			if holder == nil {
				// No call holds the child (its clients declared nothing it
				// could ask for): exact only if one call that may ask is in
				// flight; it then gets -32021.
				n := 0
				for c := ch.calls; c != nil; c = c.nextOn {
					if c.mayAsk {
						holder = c
						n++
					}
				}
				if n != 1 {
					holder = nil
				}
			}
			p.mu.Unlock()
			if holder != nil {
				holder.push(item{kind: itemInput, msg: m.Message})
				return
			}
			// No call can have caused it (the child is settling, or
			// between calls): the bridge answers for no client, as
			// harmlessly as the method allows. An elicitation is
			// declined. roots/list gets an error, not an empty list:
			// servers keep the answer (npm server-everything caches it
			// and asks no more), and no client's roots are empty; after
			// an error such a server asks again during a call, which
			// then answers it.
			switch m.Method {
			case "elicitation/create":
				ch.answer(m.Message, []byte(`{"action":"decline"}`))
			default:
				ch.answerError(m.Message, jsonrpc.CodeInternalError, "no client request can answer this: "+m.Method+
					" is only answered during a tools/call, prompts/get or resources/read")
			}
		case "ping":
			ch.answer(m.Message, []byte(`{}`))
		default:
			ch.answerError(m.Message, jsonrpc.CodeMethodNotFound, "the bridge does not serve "+m.Method)
		}
	case m.Env.Kind == jsonrpc.KindNotification:
		switch m.Method {
		case "notifications/message":
			// "The server MUST NOT emit notifications/message for a
			// request that does not include this field ... the server MUST
			// NOT deliver it on ... any stream other than the one carrying
			// the response to the request that set the log level"
			// (server/utilities/logging). A request that set one holds its
			// child alone (see acquire), so the message is its own; any
			// other message has no request to go to and is dropped.
			p.mu.Lock()
			alone := ch.alone
			p.mu.Unlock()
			if alone != nil && alone.req.LogLevel != "" {
				alone.push(item{kind: itemNotify, msg: m.Message})
			}
		default:
			// List changes, resource updates, and a modern child's
			// subscription notifications.
			if m.Method == "notifications/tools/list_changed" {
				p.tools.invalidate()
			}
			p.subs.route(ch, m)
		}
	}
}

// Ended: the child exited. Calls in flight on it are answered with an
// error; it leaves its group.
func (ch *child) Ended(err error) {
	<-ch.ready
	p := ch.pool
	p.mu.Lock()
	calls := make([]*call, 0, ch.inflight)
	for c := ch.calls; c != nil; c = c.nextOn {
		calls = append(calls, c)
	}
	if !ch.dead {
		ch.dead = true
		g := ch.group
		g.children = slices.DeleteFunc(g.children, func(o *child) bool { return o == ch })
		if len(g.children) == 0 && g.starting == 0 && g.key != modernKey {
			delete(p.groups, g.key)
		}
		p.total--
		p.signalLocked()
		if !p.closed {
			p.logger.Warn("an MCP server of the pool ended", "child", ch.conn.ID(), "err", err)
		}
	}
	p.mu.Unlock()
	if ch.ended != nil {
		// Before the calls are answered: their audit lines are written
		// by the time their clients learn that the child ended.
		ch.ended(err)
	}
	for _, c := range calls {
		c.push(item{kind: itemEnded, err: err})
	}
	p.subs.ended(ch)
	if !p.closed {
		p.mu.Lock()
		era := p.era
		p.mu.Unlock()
		if era == EraModern {
			p.fill()
		}
	}
}

// setLogLevel sets a legacy child's log level for a call that asked for
// logs (io.modelcontextprotocol/logLevel), if the child has the logging
// capability: legacy servers log only after logging/setLevel. The level
// stays set; messages reach only a call that asked (see Route).
func (ch *child) setLogLevel(ctx context.Context, level string) {
	var init struct {
		Capabilities struct {
			Logging json.RawMessage `json:"logging"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(ch.init, &init) != nil || init.Capabilities.Logging == nil {
		return
	}
	ch.logMu.Lock()
	defer ch.logMu.Unlock()
	if ch.logLevel == level {
		return
	}
	if _, err := ch.conn.Call(ctx, "logging/setLevel", map[string]string{"level": level}); err != nil {
		ch.pool.logger.Debug("the MCP server refused logging/setLevel", "level", level, "err", err)
		return
	}
	ch.logLevel = level
}

// answer sends the child the result of one of its requests.
func (ch *child) answer(m jsonrpc.Message, result []byte) {
	b := append([]byte(`{"jsonrpc":"2.0","id":`), m.Env.IDAt.In(m.Data)...)
	b = append(append(append(b, `,"result":`...), result...), '}')
	ch.send(b)
}

func (ch *child) answerError(m jsonrpc.Message, code int, msg string) {
	ch.send(jsonrpc.ErrorResponse(m.Env.IDAt.In(m.Data), code, msg, nil))
}

func (ch *child) send(data []byte) {
	env, err := jsonrpc.Parse(data)
	if err != nil {
		ch.pool.logger.Error("the bridge built an invalid message for the MCP server", "err", err)
		return
	}
	if err := ch.conn.Send(nil, jsonrpc.Message{Data: data, Env: env}); err != nil {
		ch.pool.logger.Debug("could not answer the MCP server", "child", ch.conn.ID(), "err", err)
	}
}

// item is what a call gets from its child.
type item struct {
	kind itemKind
	msg  jsonrpc.Message
	err  error
}

type itemKind uint8

const (
	itemNotify    itemKind = iota + 1 // progress, log: goes on the response stream
	itemInput                         // the child asks the client (legacy)
	itemFinal                         // the answer
	itemEnded                         // the child exited
	itemClosing                       // the pool closes: a subscription ends gracefully
	itemKeepAlive                     // a subscription's stream has been quiet
)

// Bytes of a JSON-RPC envelope, for messages the bridge builds.
func response(rawID, result []byte) []byte {
	b := make([]byte, 0, len(result)+len(rawID)+32)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, rawID...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// errorResponse renders an error answer to rawID.
func errorResponse(rawID []byte, code int, msg string, data any) []byte {
	return jsonrpc.ErrorResponse(rawID, code, msg, data)
}

// Retire makes the pool refuse new calls (ErrRetired, which is ErrClosed
// to callers that branch on it: the front end answers 503 with
// Retry-After) while the calls it took finish: those taking a child,
// those running, and parked calls, whose retries still resume them. A
// configuration reload retires the pool of a server it removes or
// replaces, then waits for WaitIdle before Close, so that no call it took
// is cut by the Close.
func (p *Pool) Retire() {
	p.mu.Lock()
	p.retired = true
	p.mu.Unlock()
}

// ErrRetired: the pool's server was removed or replaced by a
// configuration reload; errors.Is(ErrRetired, ErrClosed).
var ErrRetired error = retiredError{}

type retiredError struct{}

func (retiredError) Error() string {
	return "this MCP server was removed or replaced by a configuration reload"
}

func (retiredError) Is(target error) bool { return target == ErrClosed }

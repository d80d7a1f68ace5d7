// Package session keeps the bridge's sessions: one stdio MCP server per
// session, the routing of JSON-RPC messages between the client's HTTP
// streams and the server's stdin and stdout, and the event log that makes
// those streams resumable.
//
// It speaks JSON-RPC envelopes and never HTTP: the bridge package maps its
// streams to SSE (and their positions to event IDs) and its sentinel errors
// to status codes, so that another front end can reuse it unchanged. The
// connection to each child (framing, the stdout loop, the table of requests
// in flight, the interception point) is a peer.Conn: a Session is its
// Router.
//
// Routing (DESIGN.md): a response goes to the stream of its request, which
// then ends; notifications/progress follows its progressToken;
// notifications/cancelled follows the request it names; anything else from
// the server goes to the single in-flight request's stream if exactly one is
// in flight, else to the standalone (GET) stream, where it waits in the log
// until a client reads it. A message goes to exactly one stream.
package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Defaults of Options.
const (
	// DefaultIdleTimeout: the TypeScript SDK's clients and the MCP
	// inspector never send DELETE, so each of their sessions holds its
	// server this long after they quit. It was 30 minutes;
	// 10 bounds those leftovers to a third, while a client that keeps
	// working sends a message at least that often, and one that does not
	// gets 404 and, as the spec says, initializes again.
	DefaultIdleTimeout = 10 * time.Minute
	DefaultMaxSessions = 1000
	// DefaultInitializeTimeout matches the request timeout of the usual
	// clients: one that waited longer for initialize would be rare.
	DefaultInitializeTimeout = peer.DefaultInitializeTimeout
	// DefaultRequestTimeout is generous: a tool call may run for minutes
	// (and progress notifications extend it).
	DefaultRequestTimeout = peer.DefaultRequestTimeout
	// DefaultMaxRequests bounds a session's requests in flight: clients
	// run a few at once; 40,000 unanswered ones cost 43 MB.
	DefaultMaxRequests = peer.DefaultMaxRequests
	// DefaultMaxQueuedBytes bounds the bytes of a session waiting to be
	// written to its server's stdin (peer.Options.MaxQueuedBytes).
	DefaultMaxQueuedBytes = peer.DefaultMaxQueuedBytes
)

// MaxChosenIDBytes bounds a session ID that a caller chooses (CreateWithID):
// platforms mint UUIDs (36 bytes) or similar; the bound keeps a client from
// making the registry hold large keys.
const MaxChosenIDBytes = 128

// A Launcher starts the child of a new session. It must be safe for
// concurrent use; the caller owns the Process and stops it.
//
// A sandbox.Launcher is one through LauncherOf: package session does not
// import sandbox, which would link the Docker client and net/http into it.
type Launcher interface {
	Launch(ctx context.Context, sessionID string) (peer.Process, error)
}

// LauncherOf adapts a launcher whose processes have a type of their own,
// such as a sandbox.Launcher (sandbox.Process is a peer.Process):
// session.LauncherOf(sandbox.NewLocal(opts)).
func LauncherOf[P peer.Process](l interface {
	Launch(ctx context.Context, sessionID string) (P, error)
}) Launcher {
	return launcherOf[P]{l}
}

type launcherOf[P peer.Process] struct {
	l interface {
		Launch(ctx context.Context, sessionID string) (P, error)
	}
}

func (a launcherOf[P]) Launch(ctx context.Context, sessionID string) (peer.Process, error) {
	p, err := a.l.Launch(ctx, sessionID)
	if err != nil {
		return nil, err // never a typed nil inside the interface
	}
	return p, nil
}

// Options configure a Registry. Every zero value means the documented default.
type Options struct {
	// Launcher starts each session's server. Required.
	Launcher Launcher
	// NewID makes session IDs. Nil means 32 lowercase hex characters from
	// crypto/rand (128 bits). IDs must be visible ASCII (0x21 to 0x7E).
	NewID func() (string, error)
	// IdleTimeout ends a session that received no client message for this
	// long, whatever streams are open. Zero means DefaultIdleTimeout; a
	// negative value disables it.
	IdleTimeout time.Duration
	// MaxSessions bounds the sessions alive at once (starting ones count).
	// Zero means DefaultMaxSessions.
	MaxSessions int
	// MaxMessageBytes bounds one message, either way: a longer line from
	// the server ends the session, and the front end refuses a longer
	// client message (bridge: 413) with the value that MaxMessageBytes
	// reports. Zero means peer.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// LogMaxEvents and LogMaxBytes bound each session's event log. Zero
	// means DefaultLogMaxEvents and DefaultLogMaxBytes.
	LogMaxEvents int
	LogMaxBytes  int64
	// LogMaxTotalBytes bounds the event data of all sessions' logs together
	// (see LogBudget: only events already handed to a connection are evicted
	// for it). Zero means DefaultLogMaxTotalBytes; negative, no such bound.
	LogMaxTotalBytes int64
	// LogBudget, if set, is the budget the sessions' logs share instead of
	// one of LogMaxTotalBytes: several registries of one process (a bridge
	// serving several servers) then share one bound. Nil means a budget of
	// the registry's own.
	LogBudget *LogBudget
	// InitializeTimeout ends a session whose server has not answered its
	// initialize request after this long (a command that is not an MCP
	// server, like cat, never does): the server is stopped and the request
	// answered with an error naming it and its last stderr lines. Zero
	// means DefaultInitializeTimeout; a negative value disables it.
	InitializeTimeout time.Duration
	// InitializeHint is added to the error that ends a session whose server
	// did not answer initialize in time: what the caller knows of the
	// command (cmd/bridge: how to pass environment variables, and to run a
	// Python server unbuffered). Empty adds nothing.
	InitializeHint string
	// RequestTimeout answers a request the server has not answered after
	// this long with a JSON-RPC error (CodeRequestTimeout), and sends the
	// server notifications/cancelled for it. A progress notification for
	// the request restarts it. A client disconnecting is no cancellation,
	// so this is what ends the calls nobody waits for. Zero means
	// DefaultRequestTimeout; a negative value disables it.
	RequestTimeout time.Duration
	// MaxRequests bounds the requests in flight in one session; a POST
	// beyond it fails with ErrTooManyRequests. Zero means
	// DefaultMaxRequests.
	MaxRequests int
	// MaxQueuedBytes bounds the bytes of client messages waiting to be
	// written to one session's server (a server that stops reading its
	// stdin blocks them); a POST beyond it fails with ErrStdinFull rather
	// than waiting with its body. A single message is always accepted when
	// nothing waits. Zero means DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// Logger receives the sessions' logs. Nil means slog.Default().
	Logger *slog.Logger
	// Intercept sees every message to and from each session's server
	// (peer.Options.Intercept). Nil means none.
	Intercept peer.Interceptor
	// InterceptSession, if set, gives each session an interceptor of its
	// own, after Intercept in the chain: for what keeps state per session
	// (pinning, the audit log). It is called once per session, before its
	// server's connection is made; the session's Call works from then on.
	InterceptSession func(s *Session) peer.Interceptor
	// Inflight, if set, is told the number of client requests in flight
	// across sessions each time it rises or falls, on the request's path:
	// it must be quick. Calls may arrive out of order when requests start
	// and end at the same moment.
	Inflight func(n int)
	// Observer, if set, is told of each session's start and end, of the
	// events its log evicts and of resumes (package metrics implements
	// it). Nil means none.
	Observer Observer
}

// An Observer is told what happens to sessions, for metrics. Its methods
// are called on the paths they observe (some under a session's lock): they
// must be quick, must not call back into the session, and must be safe for
// concurrent use.
type Observer interface {
	// SessionStarted: a session's server started and the session is
	// registered (called under the registry's lock, always before
	// SessionEnded).
	SessionStarted(s *Session)
	// SessionEnded: the session ended, with the reason Err returns (it
	// wraps one of the ErrDeleted... reasons, or the server's exit). s is
	// also the Origin of the session's messages at the interception point
	// (peer.Message.Origin): its requests still in flight will get no
	// answer from the server.
	SessionEnded(s *Session, reason error)
	// EventEvicted: the session's event log evicted an event of this many
	// bytes to stay within its bounds.
	EventEvicted(bytes int)
	// Resumed: a client asked to resume a stream (GET with Last-Event-ID);
	// err is nil, or wraps ErrEventsPurged (the bridge answers 410) or
	// ErrUnknownEvent.
	Resumed(err error)
}

// Errors callers branch on.
var (
	// ErrNotFound: no session has this ID, or it has ended.
	ErrNotFound = errors.New("session not found or ended")
	// ErrTooManySessions: MaxSessions are alive.
	ErrTooManySessions = errors.New("too many sessions")
	// ErrShuttingDown: the registry no longer creates sessions.
	ErrShuttingDown = errors.New("the bridge is shutting down")
	// ErrDuplicateID: a request reuses the ID of a request still in flight.
	ErrDuplicateID = errors.New("a request with this id is already in flight in this session")
	// ErrTooManyRequests: MaxRequests are in flight in the session.
	ErrTooManyRequests = fmt.Errorf("%w in this session", peer.ErrTooManyRequests)
	// ErrStdinFull: MaxQueuedBytes already wait for the server's stdin.
	ErrStdinFull = peer.ErrBusy
	// ErrLaunch: the session's server could not be started (Create). It
	// wraps the launcher's error, whose text it keeps.
	ErrLaunch = errors.New("cannot start the MCP server")
	// ErrRetired: the registry was retired (Retire): its server was
	// removed from the bridge's configuration and takes no new session or
	// request.
	ErrRetired = errors.New("this MCP server was removed from the bridge's configuration")
	// ErrBadChosenID: CreateWithID was given an ID that is empty, longer
	// than MaxChosenIDBytes, or holds other than visible ASCII.
	ErrBadChosenID = errors.New("a session ID must be 1 to 128 visible ASCII characters (0x21 to 0x7E)")
	// ErrIDInUse: CreateWithID was given the ID of a live or starting
	// session.
	ErrIDInUse = errors.New("a live session already has this ID")
)

// Reasons a session ends; Session.Err wraps one of them.
var (
	ErrDeleted          = errors.New("the client ended the session (HTTP DELETE)")
	ErrIdle             = errors.New("the session was idle for longer than the idle timeout")
	ErrServerExited     = peer.ErrExited
	ErrStdoutClosed     = peer.ErrStdoutClosed
	ErrInitTimeout      = errors.New("the MCP server did not answer initialize in time")
	ErrOversizedMessage = peer.ErrOversizedMessage
	ErrShutdown         = errors.New("the bridge is shutting down")
	// ErrLogBudget: the events no client read, of all sessions together,
	// exceeded the process-wide budget of event data
	// (Options.LogMaxTotalBytes), and this session held the most.
	ErrLogBudget = errors.New("the session held the most events its client never read when those of all sessions exceeded the bridge's event budget (a client that sends requests must read their answers)")
)

// A Registry holds the live sessions. Its methods are safe for concurrent use.
type Registry struct {
	opts      Options
	logger    *slog.Logger
	debug     bool       // logs show session IDs whole (see logID)
	logBudget *LogBudget // shared by the sessions' logs

	mu       sync.Mutex
	sessions map[string]*Session
	starting int
	chosen   map[string]bool // IDs of CreateWithID's sessions still starting
	closed   bool
	retired  atomic.Bool // see Retire

	// wg counts the live sessions until their servers are stopped, and the
	// goroutines they start; Shutdown waits for them.
	wg sync.WaitGroup

	// inflight counts client requests in flight across sessions (an
	// atomic: every request changes it twice, and the registry's lock is
	// every session's); idle, under mu, is closed (and replaced) whenever
	// it drops to zero.
	inflight atomic.Int64
	idle     chan struct{}
}

// NewRegistry returns an empty registry. opts must name a Launcher.
func NewRegistry(opts *Options) *Registry {
	r := &Registry{sessions: make(map[string]*Session), chosen: make(map[string]bool)}
	if opts != nil {
		r.opts = *opts
	}
	o := &r.opts
	if o.NewID == nil {
		o.NewID = randomID
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = peer.DefaultMaxMessageBytes
	}
	if o.InitializeTimeout == 0 {
		o.InitializeTimeout = DefaultInitializeTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = DefaultMaxRequests
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r.logger = o.Logger
	r.logBudget = o.LogBudget
	if r.logBudget == nil {
		r.logBudget = NewLogBudget(o.LogMaxTotalBytes)
	}
	r.debug = o.Logger.Enabled(context.Background(), slog.LevelDebug)
	return r
}

// logID is the form of a session ID that this registry's logs show (see
// LogForm), decided once: the logger's level does not change.
func (r *Registry) logID(id string) string {
	if r.debug {
		return id
	}
	return shortID(id)
}

// LogForm is the form of a session ID that logs show: without tokens the
// ID is the only credential of a session, and logs are read by more people
// than the clients. It is the first 8 hex digits of the
// ID's SHA-256, enough to follow one session through the logs and useless
// to reach it; when logger has debug enabled it is the ID itself.
// Everything that logs a session ID uses it (or Session.LogID).
func LogForm(logger *slog.Logger, id string) string {
	if logger.Enabled(context.Background(), slog.LevelDebug) {
		return id
	}
	return shortID(id)
}

func shortID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:4])
}

// launchError is a launcher's error, marked as ErrLaunch without adding
// to its text (which already says what could not start, and why).
type launchError struct{ err error }

func (e launchError) Error() string   { return e.err.Error() }
func (e launchError) Unwrap() []error { return []error{ErrLaunch, e.err} }

func randomID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// CreateOptions say what kind of session CreateWith starts. The zero value
// is a session of the 2025 revisions (Create).
type CreateOptions struct {
	// SingleStream makes a session with one stream, the standalone one,
	// for the legacy HTTP+SSE transport (revision 2024-11-05): every
	// message from the server goes there, in the order the server wrote
	// them, and Post never opens a stream of its own. The front end reads
	// it with Listen, once, for the session's life.
	SingleStream bool
}

// Create starts a session: it launches the session's server and returns the
// session, ready for its initialize request. owner is the tag of the
// principal the front end binds the session to ("" without
// authentication; the session only keeps it): see Owner.
func (r *Registry) Create(ctx context.Context, owner auth.Tag) (*Session, error) {
	return r.CreateWith(ctx, owner, nil)
}

// Retire makes the registry refuse new sessions and new requests with
// ErrRetired, while responses and notifications from clients still pass,
// so that the requests in flight can finish (a server's request during a
// call needs the client's answer). The command retires the registry of a
// server removed from its configuration, waits for WaitIdle (bounded),
// then calls Shutdown.
func (r *Registry) Retire() { r.retired.Store(true) }

// CreateWith is Create for a kind of session that opts describe; nil
// opts is Create.
func (r *Registry) CreateWith(ctx context.Context, owner auth.Tag, opts *CreateOptions) (*Session, error) {
	var co CreateOptions
	if opts != nil {
		co = *opts
	}
	return r.create(ctx, owner, "", co)
}

// CreateWithID is Create under an ID the caller chose instead of a new
// random one: a hosting platform that mints session IDs itself (Bedrock
// AgentCore Runtime sends its own Mcp-Session-Id with initialize). The ID
// must be 1 to MaxChosenIDBytes visible ASCII characters (ErrBadChosenID,
// the spec's rule for session IDs) and name no live or starting session
// (ErrIDInUse): a new session never takes over another's ID. Such an ID is
// only as secret as the caller keeps it.
func (r *Registry) CreateWithID(ctx context.Context, owner auth.Tag, id string) (*Session, error) {
	if !validChosenID(id) {
		return nil, ErrBadChosenID
	}
	return r.create(ctx, owner, id, CreateOptions{})
}

func validChosenID(id string) bool {
	if id == "" || len(id) > MaxChosenIDBytes {
		return false
	}
	for i := range len(id) {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// create is Create with a chosen ID, or a new one if chosen is empty.
func (r *Registry) create(ctx context.Context, owner auth.Tag, chosen string, co CreateOptions) (*Session, error) {
	r.mu.Lock()
	switch {
	case r.retired.Load():
		r.mu.Unlock()
		return nil, ErrRetired
	case r.closed:
		r.mu.Unlock()
		return nil, ErrShuttingDown
	case chosen != "" && (r.sessions[chosen] != nil || r.chosen[chosen]):
		r.mu.Unlock()
		return nil, ErrIDInUse
	case len(r.sessions)+r.starting >= r.opts.MaxSessions:
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: the limit is %d; end idle sessions with DELETE or raise --max-sessions", ErrTooManySessions, r.opts.MaxSessions)
	}
	r.starting++
	if chosen != "" {
		// Reserved while the server starts: a second initialize with the
		// same ID meanwhile is refused, not raced.
		r.chosen[chosen] = true
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.starting--
		delete(r.chosen, chosen)
		r.mu.Unlock()
	}()

	id := chosen
	if id == "" {
		var err error
		if id, err = r.opts.NewID(); err != nil {
			return nil, fmt.Errorf("making a session ID: %w", err)
		}
	}
	logID := r.logID(id)
	logger := r.logger.With("session", logID)
	// The launcher names the session in its logs and container labels:
	// it gets the log form too, never the credential.
	proc, err := r.opts.Launcher.Launch(ctx, logID)
	if err != nil {
		logger.Error("cannot start the MCP server for a new session", "err", err)
		// A launcher's error names the session (sandbox.Launcher); it is
		// marked ErrLaunch, which the front end maps, as it is.
		return nil, launchError{err}
	}
	s := &Session{
		id:        id,
		logID:     logID,
		owner:     owner,
		reg:       r,
		logger:    logger,
		log:       r.logBudget.NewEventLog(r.opts.LogMaxEvents, r.opts.LogMaxBytes),
		inflight:  make(map[jsonrpc.ID]*call),
		progress:  make(map[jsonrpc.ID]*call),
		childReqs: make(map[jsonrpc.ID]int64),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		ready:     make(chan struct{}),
	}
	if co.SingleStream {
		s.single = &post{stream: s.log.NewStream(), shared: true}
		s.standalone = s.single.stream
	}
	if o := r.opts.Observer; o != nil {
		s.log.onEvict = o.EventEvicted
	}
	s.log.onOverBudget = func(held int64) {
		// Under the log's lock, maybe under another session's: Close
		// takes s.mu, so it runs on its own.
		go s.Close(fmt.Errorf("%w: it held %d bytes", ErrLogBudget, held))
	}
	s.touch()

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = proc.Stop(context.Background())
		return nil, ErrShuttingDown
	}
	if r.sessions[id] != nil {
		// A new random ID that a chosen one took first: never replace a
		// live session.
		r.mu.Unlock()
		_ = proc.Stop(context.Background())
		return nil, ErrIDInUse
	}
	r.sessions[id] = s
	if r.opts.Observer != nil {
		// Under mu, before the session can end (its server's exit, or
		// Shutdown, which lists the sessions under mu): Ended never comes
		// before Started.
		r.opts.Observer.SessionStarted(s)
	}
	// Each session counts in wg from here until its server is stopped (the
	// end of Close's goroutine): Shutdown waits for them, and goroutines a
	// live session starts may Add to wg while it waits.
	r.wg.Add(1)
	r.mu.Unlock()

	// The connection may end (and call Ended) before New returns: Close
	// waits for s.conn through ready.
	intercept := r.opts.Intercept
	if r.opts.InterceptSession != nil {
		intercept = peer.Chain(intercept, r.opts.InterceptSession(s))
	}
	s.conn = peer.New(proc, s, &peer.Options{
		MaxMessageBytes: r.opts.MaxMessageBytes,
		MaxQueuedBytes:  int(r.opts.MaxQueuedBytes),
		Intercept:       intercept,
		Logger:          logger,
	})
	close(s.ready)
	if r.opts.IdleTimeout > 0 {
		// The timer reaches the session through ref, which Close clears: a
		// stopped timer may stay in the runtime's timer heap for a while,
		// and must not keep an ended session and its log reachable.
		ref := new(atomic.Pointer[Session])
		ref.Store(s)
		s.mu.Lock() // the callback may run before AfterFunc returns
		s.idleRef = ref
		s.idle = time.AfterFunc(r.opts.IdleTimeout, func() {
			if s := ref.Load(); s != nil {
				s.checkIdle()
			}
		})
		s.mu.Unlock()
	}
	logger.Info("session started", "server", proc.ID())
	return s, nil
}

// Get returns the live session with this ID, or ErrNotFound.
func (r *Registry) Get(id string) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.sessions[id]; s != nil {
		return s, nil
	}
	return nil, ErrNotFound
}

// LogStats is what the event logs of the live sessions hold together:
// events and bytes of event data. It locks each log in turn: for metrics
// at scrape time, not for a hot path.
func (r *Registry) LogStats() (events int, bytes int64) {
	for _, s := range r.list() {
		e, b, _ := s.log.Stats()
		events += e
		bytes += b
	}
	return events, bytes
}

// MaxMessageBytes is the bound of one message in effect
// (Options.MaxMessageBytes, defaulted): the front end bounds what clients
// send with it, so that one value bounds a message either way.
func (r *Registry) MaxMessageBytes() int { return r.opts.MaxMessageBytes }

// Len is the number of live sessions.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

func (r *Registry) list() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	return out
}

// Shutdown refuses new sessions, ends every session (their requests in
// flight get an error) and waits until every server is stopped or ctx is
// done.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	reason := ErrShutdown
	if r.retired.Load() {
		reason = ErrRetired // the server was removed, not the bridge stopped
	}
	for _, s := range r.list() {
		s.Close(reason)
	}
	done := make(chan struct{})
	// Owned by the stops it waits for: if ctx ends first, it lingers until
	// the last server is gone (each Stop is bounded by its grace periods).
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("servers still stopping at shutdown: %w", ctx.Err())
	}
}

// WaitIdle waits until no client request is in flight in any session, or
// ctx is done. The bridge drains with it at shutdown.
func (r *Registry) WaitIdle(ctx context.Context) error {
	for {
		r.mu.Lock()
		if r.inflight.Load() == 0 {
			r.mu.Unlock()
			return nil
		}
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle := r.idle
		r.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("requests still in flight: %w", ctx.Err())
		}
	}
}

// addInflight adjusts the count of requests in flight.
// Only a count that reaches zero takes the registry's lock, to wake
// WaitIdle: a WaitIdle that saw more under the lock made its channel
// before this one looks for it, and one that comes after sees zero (or a
// later request, whose end wakes it).
func (r *Registry) addInflight(n int) {
	now := r.inflight.Add(int64(n))
	if now == 0 {
		r.mu.Lock()
		if r.inflight.Load() == 0 && r.idle != nil {
			close(r.idle)
			r.idle = nil
		}
		r.mu.Unlock()
	}
	if r.opts.Inflight != nil {
		r.opts.Inflight(int(now))
	}
}

func (r *Registry) remove(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.id] == s {
		delete(r.sessions, s.id)
	}
}

// A Session is one client's session with its own MCP server.
type Session struct {
	id     string
	logID  string // what logs show of id
	owner  auth.Tag
	reg    *Registry
	logger *slog.Logger
	log    *EventLog
	conn   *peer.Conn    // set before ready is closed
	ready  chan struct{} // closed once conn is set

	// principal is the latest PostOptions.Principal.
	principal atomic.Pointer[auth.Principal]

	// initTimedOut is set when initialize was not answered in time, before
	// the server is stopped; Ended then says so as the reason.
	initTimedOut atomic.Bool

	lastActivity atomic.Int64 // time since epoch of the last client message
	idle         *time.Timer  // nil when there is no idle timeout; set under mu
	idleRef      *atomic.Pointer[Session]

	mu sync.Mutex
	// inflight maps the client's requests still waiting for an answer.
	inflight map[jsonrpc.ID]*call
	// progress maps progress tokens of requests in flight.
	progress map[jsonrpc.ID]*call
	// childReqs maps the server's requests to the stream they went on,
	// until the client answers (for notifications/cancelled).
	childReqs map[jsonrpc.ID]int64
	// cancelledAhead holds the ids of the latest cancellations that named
	// no request in flight, oldest overwritten first (cancelledNext).
	// Each POST is a request of its own: a client that cancels at once
	// can have its notifications/cancelled handled before the POST of the
	// request it names, which is then dropped here rather than run for
	// nobody. Ids are unique within a session ("MUST NOT have been
	// previously used by the requestor within the same session",
	// basic/index), so a late cancellation kept here names no later
	// request.
	cancelledAhead [4]jsonrpc.ID
	cancelledNext  int
	// deadlines fires at the earliest deadline of the requests in flight
	// (or later: a call answered early leaves it as it is, and a firing
	// finds the next one). One timer per session rather than per request:
	// arming and stopping one per request cost more than a scan of the
	// calls, at most MaxRequests, when it fires. Nil until first armed.
	deadlines *time.Timer
	armedAt   time.Time // zero when deadlines is not armed
	// standalone is the current standalone stream (0: none yet).
	standalone int64
	// single is the post of every request of a SingleStream session, on
	// its standalone stream; nil in other sessions.
	single *post
	closed bool
	reason error

	done    chan struct{} // closed by Close
	stopped chan struct{} // closed once the server is stopped
}

// call is a client request in flight.
type call struct {
	// msg is a copy of the request, or for a large one its raw id only
	// (idOnly). The id is needed only for the error answer when the
	// session ends first: parsing it for every request would be
	// per-message work that is rarely needed.
	msg    []byte
	idOnly bool
	method string
	token  jsonrpc.ID
	post   *post
	// deadline is when the request times out (zero: never).
	deadline time.Time
}

// lazyIDBytes is the largest request a call keeps whole instead of
// parsing its id at once.
const lazyIDBytes = 1024

func (c *call) init(m *jsonrpc.Message, p *post) {
	c.method, c.post = m.Env.Method, p
	if len(m.Data) <= lazyIDBytes {
		c.msg = m.Data // Post owns the message (no copy)
	} else {
		c.msg, c.idOnly = bytes.Clone(m.Env.IDAt.In(m.Data)), true
	}
}

// rawID is the request's id as the client wrote it.
func (c *call) rawID() []byte {
	if c.idOnly {
		return c.msg
	}
	return jsonrpc.WrittenID(c.msg)
}

// echoID is the id for the bridge's own answer to the request: rawID if
// it is one to echo, else nil (null).
func (c *call) echoID() []byte {
	if id := c.rawID(); jsonrpc.Echoable(id) {
		return id
	}
	return nil
}

// post is the stream of one POST carrying requests.
type post struct {
	stream    int64
	waiting   int  // requests of the POST not answered yet
	transient bool // not resumable: no other message may go on it
	shared    bool // a SingleStream session's only stream: never finished by an answer
}

// postOne is a POST's first request with its post and the reader of its
// stream.
type postOne struct {
	post   post
	call   call
	reader Reader
}

// ID is the session's ID.
func (s *Session) ID() string { return s.id }

// LogID is the session's ID as logs show it: a short hash that cannot be
// used to reach the session, or the ID itself when debug logging is on.
// Everything that logs a session uses it.
func (s *Session) LogID() string { return s.logID }

// SingleStream reports whether the session was created with
// CreateOptions.SingleStream (a legacy HTTP+SSE session).
func (s *Session) SingleStream() bool { return s.single != nil }

// Answer puts a message of the front end's own on the stream where the
// server's messages that answer nothing go (a SingleStream session's only
// stream): the answer to a request the front end does not forward. It
// fails with ErrNotFound once the session has ended.
func (s *Session) Answer(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.log.Append(s.generalStreamLocked(), data) {
		return ErrNotFound
	}
	return nil
}

// Call sends a request of the bridge's own to the session's server and
// returns its result (peer.Conn.Call): its answer reaches no client.
func (s *Session) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.conn.Call(ctx, method, params)
}

// Owner is the tag the session was bound to at creation ("" without
// authentication).
func (s *Session) Owner() auth.Tag { return s.owner }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Stopped is closed once the session's server is stopped, after Done.
func (s *Session) Stopped() <-chan struct{} { return s.stopped }

// Err says why the session ended, or nil while it lives.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// ProtocolVersion is the version the server chose in its initialize
// result, or "" before that. The connection learns it (peer.Conn).
func (s *Session) ProtocolVersion() string {
	<-s.ready
	return s.conn.ProtocolVersion()
}

// Log is the session's event log.
func (s *Session) Log() *EventLog { return s.log }

// Message is one JSON-RPC message from the client with its envelope.
type Message = jsonrpc.Message

// PostOptions say what the stream of a Post's answers is.
type PostOptions struct {
	// Resumable keeps the stream's events in the log, so that a client
	// whose connection broke can resume the stream (Resume), and lets the
	// routing rules put the server's other messages on it (progress, its
	// requests during a call). A stream that is not resumable is handed
	// the answers to the POST's requests and nothing else, and keeps none of
	// them: a message on it could not be sent again.
	Resumable bool
	// Principal is who sent the POST, as the front end established it.
	// The session keeps the latest one for Caller: the
	// interception point reads per-caller scopes there, and a refreshed or
	// stepped-up token of the session's owner brings new ones. Nil keeps
	// the one before.
	Principal *auth.Principal
}

// Caller is the principal of the session's latest POST that named one
// (PostOptions.Principal), or nil: the session is the Origin of its
// messages at the interception point (peer.Origin), and this whom they act
// for. A session is bound to one owner, and a refreshed or stepped-up
// token of that owner brings its new scopes.
func (s *Session) Caller() *auth.Principal {
	return s.principal.Load()
}

// Post sends the messages of one client POST to the server, in order. If
// they include requests, it opens a stream for their answers and returns a
// reader on it (registered before anything is written, so no answer can
// arrive first); otherwise it returns nil. Post keeps the messages' data
// while their requests are in flight: the caller must not modify it. It
// fails with ErrNotFound once the session has ended, ErrDuplicateID, and
// ErrBusy when the server does not read its input.
func (s *Session) Post(msgs []Message, opts PostOptions) (*Reader, error) {
	s.touch()
	if opts.Principal != nil {
		s.principal.Store(opts.Principal)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrNotFound
	}
	// (The loops over msgs index it: a range value would copy each
	// Message, a few hundred bytes, per message and per loop.)
	requests := 0
	for i := range msgs {
		if msgs[i].Env.Kind == jsonrpc.KindRequest {
			requests++
		}
	}
	if requests > 0 && s.reg.retired.Load() {
		s.mu.Unlock()
		return nil, ErrRetired
	}
	if requests > 0 && len(s.inflight)+requests > s.reg.opts.MaxRequests {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the limit is %d (--max-requests-per-session); wait for answers, or cancel requests with notifications/cancelled", ErrTooManyRequests, s.reg.opts.MaxRequests)
	}
	var now, deadline time.Time // deadline: the earliest of this POST's requests
	var p *post
	var one *postOne
	var ahead []int // indexes in msgs of requests cancelled before they came
	for i := range msgs {
		env := &msgs[i].Env
		if env.Kind != jsonrpc.KindRequest {
			continue
		}
		if _, dup := s.inflight[env.ID]; dup {
			s.unregisterLocked(msgs[:i])
			if one != nil {
				// Its stream, finished by unregisterLocked, is freed
				// once no reader holds it.
				one.reader.Detach()
			}
			s.mu.Unlock()
			return nil, ErrDuplicateID
		}
		var c *call
		if s.single != nil {
			// Every answer goes to the one stream, which the front end
			// reads already; no reader for the POST.
			p, c = s.single, new(call)
		} else if p == nil {
			// The POST's first request: its post, call and reader in one
			// allocation (they live as long as the request).
			// Answers that go out as one JSON body carry no event ID, so
			// no client could resume their stream: it keeps nothing. The
			// reader is attached as the stream opens, so that nothing can
			// be appended to it first.
			one = &postOne{post: post{transient: !opts.Resumable}}
			one.post.stream = s.log.open(&one.reader, !opts.Resumable)
			p = &one.post
			c = &one.call
		} else {
			c = new(call)
		}
		c.init(&msgs[i], p)
		if timeout := s.timeoutFor(env.Method); timeout > 0 {
			if now.IsZero() {
				now = time.Now()
			}
			c.deadline = now.Add(timeout)
			s.armLocked(c.deadline)
			if deadline.IsZero() || c.deadline.Before(deadline) {
				deadline = c.deadline
			}
		}
		if env.ProgressToken != "" && opts.Resumable {
			c.token = env.ProgressToken
			s.progress[c.token] = c
		}
		s.inflight[env.ID] = c
		p.waiting++
		s.reg.addInflight(1)
		if s.cancelledAheadLocked(env.ID) {
			ahead = append(ahead, i)
		}
	}
	for i := range msgs {
		env := &msgs[i].Env
		switch env.Kind {
		case jsonrpc.KindResponse:
			delete(s.childReqs, env.ID)
		case jsonrpc.KindNotification:
			if env.Method == "notifications/cancelled" && env.RequestID != "" {
				// The client gave up on its request: it will ignore a late
				// answer, so stop waiting for one (the spec lets the server
				// not answer a cancelled request at all).
				if c := s.inflight[env.RequestID]; c != nil {
					s.answeredLocked(env.RequestID, c)
				} else {
					s.cancelledAhead[s.cancelledNext] = env.RequestID
					s.cancelledNext = (s.cancelledNext + 1) % len(s.cancelledAhead)
				}
			}
		}
	}
	if ahead != nil {
		msgs, requests = s.dropCancelledLocked(msgs, ahead), requests-len(ahead)
	}
	var r *Reader
	if one != nil {
		r = &one.reader
	}
	s.mu.Unlock()

	<-s.ready
	if len(msgs) == 0 {
		return r, nil // requests the client cancelled before they came
	}
	if requests == 0 && s.reg.opts.RequestTimeout > 0 {
		// Notifications and answers wait for a server that stopped
		// reading no longer than a request would.
		deadline = time.Now().Add(s.reg.opts.RequestTimeout)
	}
	// Bytes waiting for the server's stdin are bounded (the connection's
	// MaxQueuedBytes): a server that stopped reading would otherwise hold
	// every POST's body. And the wait is bounded by the
	// request timeout: a stopped server held every POST until the session
	// ended.
	switch err := s.conn.SendBy(s, deadline, msgs...); {
	case errors.Is(err, peer.ErrWriting):
		// The rest is written when the server reads again; the requests
		// time out meanwhile (expire).
		s.logger.Warn("the MCP server has not read its stdin for the request timeout; answering the requests waiting for it with an error",
			"server", s.conn.ID(), "hint", "the server is stopped or hung; raise --request-timeout if it legitimately reads that slowly")
	case errors.Is(err, peer.ErrStalled) && requests > 0:
		// Nothing was written: expire answers the requests, whose
		// deadline this was, with a timeout error; notifications and
		// answers in the same POST are dropped with them.
		s.logger.Warn("the MCP server has not read its stdin for the request timeout; requests waiting behind earlier ones are answered with an error and not sent",
			"server", s.conn.ID(), "hint", "the server is stopped or hung")
	case errors.Is(err, peer.ErrBusy):
		s.mu.Lock()
		s.unregisterLocked(msgs)
		s.mu.Unlock()
		if r != nil {
			r.Detach()
		}
		return nil, fmt.Errorf("%w (the limit is %d, --max-queued-bytes); retry later", err, s.reg.opts.MaxQueuedBytes)
	case err != nil:
		// The server is gone; ending the session answers the requests
		// registered above with an error on their stream.
		s.Close(fmt.Errorf("%w: %v", ErrServerExited, err))
	}
	return r, nil
}

// cancelledAheadLocked reports whether the client cancelled the request
// id before it came (cancelledAhead), and forgets the cancellation.
func (s *Session) cancelledAheadLocked(id jsonrpc.ID) bool {
	for i, c := range s.cancelledAhead {
		if c == id {
			s.cancelledAhead[i] = ""
			return true
		}
	}
	return false
}

// dropCancelledLocked answers the requests at the indexes ahead in msgs
// (registered, and cancelled by the client before they came) with
// nothing, and returns msgs without them, in a new slice: the server is
// never sent them. "Receivers of cancellation notifications SHOULD: Stop
// processing the cancelled request [...] Not send a response for the
// cancelled request" (basic/utilities/cancellation).
func (s *Session) dropCancelledLocked(msgs []Message, ahead []int) []Message {
	rest := make([]Message, 0, len(msgs)-len(ahead))
	for i := range msgs {
		if slices.Contains(ahead, i) {
			id := msgs[i].Env.ID
			s.logger.Debug("not sending the server a request its client cancelled before it came", "id", string(id))
			s.answeredLocked(id, s.inflight[id])
			continue
		}
		rest = append(rest, msgs[i])
	}
	return rest
}

func (s *Session) unregisterLocked(msgs []Message) {
	for _, m := range msgs {
		if m.Env.Kind == jsonrpc.KindRequest {
			if c := s.inflight[m.Env.ID]; c != nil {
				s.answeredLocked(m.Env.ID, c)
			}
		}
	}
}

// answeredLocked forgets a request in flight and finishes its stream when
// it was the last one of its POST.
func (s *Session) answeredLocked(id jsonrpc.ID, c *call) {
	if s.forgetLocked(id, c) {
		s.log.Finish(c.post.stream)
	}
}

// forgetLocked forgets a request in flight and reports whether it was the
// last one of its POST, whose stream is then to be finished.
func (s *Session) forgetLocked(id jsonrpc.ID, c *call) (last bool) {
	delete(s.inflight, id)
	s.reg.addInflight(-1)
	if c.token != "" {
		delete(s.progress, c.token)
	}
	c.post.waiting--
	return c.post.waiting == 0 && !c.post.shared
}

// Listen opens the standalone stream for a GET without Last-Event-ID.
// Messages that waited for it are delivered first. A standalone stream that
// was read before is finished (its connection, if any, ends) and what it
// never handed out moves to the new one: a client opening a fresh GET has
// given up on the old connection, which may be half-open and unnoticed.
// Refusing it (409) would leave such a client without its messages.
func (s *Session) Listen() (*Reader, error) {
	s.touch()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrNotFound
	}
	if s.single != nil {
		return s.log.Attach(s.single.stream, 0)
	}
	switch st := s.log.State(s.standalone); {
	case st.Exists && st.EverAttached:
		s.standalone = s.log.Adopt(s.standalone)
	case !st.Open:
		s.standalone = s.log.NewStream()
	}
	return s.log.Attach(s.standalone, 0)
}

// Resume reattaches to a stream after the event at position after (0:
// from its start), for a GET with Last-Event-ID. It fails with
// ErrUnknownEvent or ErrEventsPurged, and with ErrStreamFinished when the
// stream is finished and nothing follows that position.
func (s *Session) Resume(stream int64, after uint64) (*Reader, error) {
	s.touch()
	r, err := s.log.Attach(stream, after)
	if err == nil && r.AtEnd() {
		// Nothing to replay and nothing to come.
		r.Detach()
		r, err = nil, ErrStreamFinished
	}
	if o := s.reg.opts.Observer; o != nil {
		o.Resumed(err)
	}
	return r, err
}

// Close ends the session for the given reason: requests in flight get a
// JSON-RPC error on their stream, every stream ends after its held events,
// later lookups of its ID fail, and the server is stopped in the background
// (Stopped is closed when it is gone). Closing twice is harmless.
func (s *Session) Close(reason error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.reason = reason
	msg := "session ended: " + reason.Error()
	for id, c := range s.inflight {
		s.log.Append(c.post.stream, jsonrpc.ErrorResponse(c.echoID(), jsonrpc.CodeServerError, msg, nil))
		s.answeredLocked(id, c)
	}
	s.log.FinishAll()
	if s.deadlines != nil {
		s.deadlines.Stop()
	}
	s.mu.Unlock()

	close(s.done)
	s.reg.remove(s)
	s.mu.Lock()
	if s.idle != nil {
		s.idle.Stop()
		s.idleRef.Store(nil)
	}
	s.mu.Unlock()
	level := slog.LevelInfo
	if !errors.Is(reason, ErrDeleted) && !errors.Is(reason, ErrShutdown) && !errors.Is(reason, ErrIdle) && !errors.Is(reason, ErrRetired) {
		level = slog.LevelWarn
	}
	s.logger.Log(context.Background(), level, "session ended", "reason", reason.Error())
	if o := s.reg.opts.Observer; o != nil {
		o.SessionEnded(s, reason)
	}

	go func() {
		defer s.reg.wg.Done() // the session's count, from Create
		defer close(s.stopped)
		<-s.ready
		// Close waits for the connection's stdout reader too, so that
		// Shutdown waits for every goroutine of the session.
		if err := s.conn.Close(context.Background()); err != nil {
			s.logger.Error("stopping the MCP server failed", "server", s.conn.ID(), "err", err)
		}
	}()
}

// epoch anchors lastActivity on the monotonic clock: wall-clock jumps
// must not end sessions early or keep them alive.
var epoch = time.Now()

func (s *Session) touch() { s.lastActivity.Store(int64(time.Since(epoch))) }

func (s *Session) checkIdle() {
	// A session whose request is still running is not idle, however long
	// the call takes (a 9 s call with a 5 s idle timeout
	// failed); the request timeout bounds such calls instead.
	s.mu.Lock()
	busy := len(s.inflight) > 0
	s.mu.Unlock()
	if busy {
		s.touch()
	}
	idle := time.Since(epoch) - time.Duration(s.lastActivity.Load())
	if left := s.reg.opts.IdleTimeout - idle; left > 0 {
		s.mu.Lock()
		if !s.closed {
			s.idle.Reset(left)
		}
		s.mu.Unlock()
		return
	}
	s.Close(fmt.Errorf("%w (%s without a client message)", ErrIdle, s.reg.opts.IdleTimeout))
}

// Route is the Session as its connection's peer.Router: it delivers a
// message from the server to its stream.
func (s *Session) Route(m *peer.Message) { s.route(m.Data, &m.Env) }

// Ended is the Session as its connection's peer.Router: the server's
// stdout ended, and with it the session.
func (s *Session) Ended(err error) {
	var exit *peer.ExitError
	if s.initTimedOut.Load() && errors.As(err, &exit) {
		err = s.initTimeoutError(exit.Status)
	}
	s.Close(err)
}

// initTimeoutError is the reason a session ends when its server did not
// answer initialize: it names the server and says how it ended, with its
// last stderr lines (in status, a *sandbox.ExitError).
func (s *Session) initTimeoutError(status error) error {
	hint := ""
	if h := s.reg.opts.InitializeHint; h != "" {
		hint = "; " + h
	}
	return fmt.Errorf("%w: the server (%s) gave no answer within %s and was stopped: %w; check that the command is an MCP server speaking stdio%s; or raise --initialize-timeout if it starts slowly",
		ErrInitTimeout, s.conn.ID(), s.reg.opts.InitializeTimeout, status, hint)
}

// route delivers one message from the server to its stream.
func (s *Session) route(data []byte, env *jsonrpc.Envelope) {
	if s.initTimedOut.Load() {
		// The session ends with initTimeoutError. What the server writes
		// as it is stopped (a Python server whose block-buffered stdout
		// is flushed at the end of its stdin) must not answer
		// initialize after its client was told it timed out.
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch env.Kind {
	case jsonrpc.KindResponse:
		c := s.inflight[env.ID]
		if c == nil {
			s.logger.Warn("dropping a response from the MCP server to no request in flight (unknown or cancelled id)",
				"id", string(env.ID))
			return
		}
		// The answer and, after the POST's last one, the end of its
		// stream, in one step of the log.
		s.log.appendFinish(c.post.stream, data, s.forgetLocked(env.ID, c))
		return
	case jsonrpc.KindNotification:
		if env.ProgressToken != "" && env.Method == "notifications/progress" {
			if c := s.progress[env.ProgressToken]; c != nil {
				// "Receiving a progress notification MAY reset the timeout":
				// the request is alive. The timer is not touched: when it
				// fires it finds the later deadline.
				if !c.deadline.IsZero() {
					c.deadline = time.Now().Add(s.timeoutFor(c.method))
				}
				s.log.Append(c.post.stream, data)
				return
			}
		}
		if env.RequestID != "" {
			if stream, ok := s.childReqs[env.RequestID]; ok {
				delete(s.childReqs, env.RequestID)
				if s.log.Append(stream, data) {
					return
				}
			}
		}
	}
	stream := s.generalStreamLocked()
	if env.Kind == jsonrpc.KindRequest {
		s.childReqs[env.ID] = stream
	}
	if !s.log.Append(stream, data) {
		s.logger.Warn("dropping a message from the MCP server: the session is ending", "method", env.Method)
	}
}

// generalStreamLocked picks the stream for a server message that answers
// nothing: the single request in flight's, else the standalone stream.
func (s *Session) generalStreamLocked() int64 {
	if s.single != nil {
		return s.single.stream
	}
	if len(s.inflight) == 1 {
		for _, c := range s.inflight {
			if !c.post.transient {
				return c.post.stream
			}
		}
	}
	if !s.log.State(s.standalone).Open {
		s.standalone = s.log.NewStream()
	}
	return s.standalone
}

// Limits returns the options' limits as the one type both eras honour
// (peer.Limits), with inflight as its hook: what a stateless pool serving
// the same server gets, so that its calls are bound as sessions are.
func (o *Options) Limits(inflight func(int)) peer.Limits {
	return peer.Limits{
		RequestTimeout:    o.RequestTimeout,
		InitializeTimeout: o.InitializeTimeout,
		InitializeHint:    o.InitializeHint,
		MaxRequests:       o.MaxRequests,
		MaxQueuedBytes:    o.MaxQueuedBytes,
		Inflight:          inflight,
	}
}

// CodeRequestTimeout answers a request the server did not answer within
// the request timeout (the code the MCP TypeScript SDK uses for its own
// request timeouts).
const CodeRequestTimeout = peer.CodeRequestTimeout

// timeoutFor is the timeout of a request of this method, or 0 for none.
func (s *Session) timeoutFor(method string) time.Duration {
	d := s.reg.opts.RequestTimeout
	if method == "initialize" {
		d = s.reg.opts.InitializeTimeout
	}
	return max(d, 0)
}

// armLocked makes the deadlines timer fire no later than at.
func (s *Session) armLocked(at time.Time) {
	switch {
	case s.deadlines == nil:
		s.deadlines = time.AfterFunc(time.Until(at), s.expire)
	case s.armedAt.IsZero() || at.Before(s.armedAt):
		s.deadlines.Reset(time.Until(at))
	default:
		return
	}
	s.armedAt = at
}

// expire answers the requests whose deadline has passed and arms the
// timer for the next one. A request times out with an error answer and a
// notifications/cancelled to the server ("the receiver SHOULD issue a
// cancellation notification for that request and stop waiting for a
// response"); an initialize that times out ends the session instead, since
// a server that cannot initialize can do nothing else.
func (s *Session) expire() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.armedAt = time.Time{}
	now := time.Now()
	var next time.Time
	var cancels []Message
	initExpired := false
	for id, c := range s.inflight {
		switch {
		case c.deadline.IsZero():
		case c.deadline.After(now):
			if next.IsZero() || c.deadline.Before(next) {
				next = c.deadline
			}
		case c.method == "initialize":
			initExpired = true
		default:
			timeout := s.timeoutFor(c.method)
			s.logger.Warn("a request timed out; answering it with an error and cancelling it at the MCP server",
				"method", c.method, "timeout", timeout, "hint", "raise --request-timeout if calls legitimately run longer")
			s.log.Append(c.post.stream, jsonrpc.ErrorResponse(c.echoID(), CodeRequestTimeout,
				fmt.Sprintf("request timed out: the MCP server gave no answer within %s (--request-timeout)", timeout), nil))
			cancels = append(cancels, cancelMessage(c.rawID(), timeout))
			s.answeredLocked(id, c)
		}
	}
	if !next.IsZero() {
		s.armLocked(next)
	}
	s.mu.Unlock()
	if initExpired && !s.initTimedOut.Swap(true) {
		// Stopping the server ends its stdout; readServer then ends the
		// session with the reason and the server's last stderr lines.
		s.logger.Warn("the MCP server did not answer initialize in time; stopping it",
			"server", s.conn.ID(), "timeout", s.reg.opts.InitializeTimeout)
		s.reg.wg.Add(1)
		go func() {
			defer s.reg.wg.Done()
			_ = s.conn.Close(context.Background())
		}()
	}
	if len(cancels) > 0 {
		// The timer's goroutine writes, bounded as requests are (SendBy):
		// a server that stopped reading does not get them, and must not
		// hold this goroutine until the session ends. The connection
		// passes each cancellation on under the id the server knows the
		// request by.
		var by time.Time
		if d := s.reg.opts.RequestTimeout; d > 0 {
			by = time.Now().Add(d)
		}
		if err := s.conn.SendBy(s, by, cancels...); err != nil && !errors.Is(err, peer.ErrBusy) && !errors.Is(err, peer.ErrWriting) {
			s.Close(fmt.Errorf("%w: writing to its stdin failed: %v", ErrServerExited, err))
		}
	}
}

// cancelMessage is the notifications/cancelled for the request rawID.
func cancelMessage(rawID []byte, timeout time.Duration) Message {
	return peer.CancelledNotification(rawID, "the request timed out after "+timeout.String())
}

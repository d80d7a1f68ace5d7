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
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Defaults of Options.
const (
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultMaxSessions     = 1000
	DefaultMaxMessageBytes = peer.DefaultMaxMessageBytes
)

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
	// MaxMessageBytes bounds one message from the server (one stdout line).
	// A longer line ends the session. Zero means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// LogMaxEvents and LogMaxBytes bound each session's event log. Zero
	// means DefaultLogMaxEvents and DefaultLogMaxBytes.
	LogMaxEvents int
	LogMaxBytes  int64
	// Logger receives the sessions' logs. Nil means slog.Default().
	Logger *slog.Logger
	// Intercept sees every message to and from each session's server
	// (peer.Options.Intercept). Nil means none.
	Intercept peer.Interceptor
	// Inflight, if set, is told the number of client requests in flight
	// across sessions each time it rises or falls, on the request's path:
	// it must be quick. Calls may arrive out of order when requests start
	// and end at the same moment.
	Inflight func(n int)
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
	// ErrLaunch: the session's server could not be started (Create). It
	// wraps the launcher's error, whose text it keeps.
	ErrLaunch = errors.New("cannot start the MCP server")
	// ErrBusy: the server is not reading its input and too much is
	// waiting for it (Post); nothing of the POST was sent.
	ErrBusy = peer.ErrBusy
)

// Reasons a session ends; Session.Err wraps one of them.
var (
	ErrDeleted          = errors.New("the client ended the session (HTTP DELETE)")
	ErrIdle             = errors.New("the session was idle for longer than the idle timeout")
	ErrServerExited     = peer.ErrExited
	ErrOversizedMessage = peer.ErrOversizedMessage
	ErrShutdown         = errors.New("the bridge is shutting down")
)

// A Registry holds the live sessions. Its methods are safe for concurrent use.
type Registry struct {
	opts   Options
	logger *slog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	starting int
	closed   bool

	// wg counts the goroutines the sessions started (child stops, each
	// waiting for its connection's stdout reader); Shutdown waits for them.
	wg sync.WaitGroup

	// inflight counts client requests in flight across sessions; idle is
	// closed (and replaced) whenever it drops to zero. Both under mu.
	inflight int
	idle     chan struct{}
}

// NewRegistry returns an empty registry. opts must name a Launcher.
func NewRegistry(opts *Options) *Registry {
	r := &Registry{sessions: make(map[string]*Session)}
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
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r.logger = o.Logger
	return r
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

// Create starts a session: it launches the session's server and returns the
// session, ready for its initialize request. owner is an opaque tag the
// front end binds the session to (compared with ==; the session only keeps
// it): see Owner.
func (r *Registry) Create(ctx context.Context, owner any) (*Session, error) {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return nil, ErrShuttingDown
	case len(r.sessions)+r.starting >= r.opts.MaxSessions:
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: the limit is %d; end idle sessions with DELETE or raise --max-sessions", ErrTooManySessions, r.opts.MaxSessions)
	}
	r.starting++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.starting--
		r.mu.Unlock()
	}()

	id, err := r.opts.NewID()
	if err != nil {
		return nil, fmt.Errorf("making a session ID: %w", err)
	}
	logger := r.logger.With("session", id)
	proc, err := r.opts.Launcher.Launch(ctx, id)
	if err != nil {
		logger.Error("cannot start the MCP server for a new session", "err", err)
		return nil, fmt.Errorf("session %s: %w", id, launchError{err})
	}
	s := &Session{
		id:        id,
		owner:     owner,
		reg:       r,
		logger:    logger,
		log:       NewEventLog(r.opts.LogMaxEvents, r.opts.LogMaxBytes),
		inflight:  make(map[jsonrpc.ID]*call),
		progress:  make(map[jsonrpc.ID]*call),
		childReqs: make(map[jsonrpc.ID]int64),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		ready:     make(chan struct{}),
	}
	s.touch()

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = proc.Stop(context.Background())
		return nil, ErrShuttingDown
	}
	r.sessions[id] = s
	r.mu.Unlock()

	// The connection may end (and call Ended) before New returns: Close
	// waits for s.conn through ready.
	s.conn = peer.New(proc, s, &peer.Options{
		MaxMessageBytes: r.opts.MaxMessageBytes,
		Intercept:       r.opts.Intercept,
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
	for _, s := range r.list() {
		s.Close(ErrShutdown)
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
		if r.inflight == 0 {
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
func (r *Registry) addInflight(n int) {
	r.mu.Lock()
	r.inflight += n
	now := r.inflight
	if r.inflight == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
	r.mu.Unlock()
	if r.opts.Inflight != nil {
		r.opts.Inflight(now)
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
	owner  any
	reg    *Registry
	logger *slog.Logger
	log    *EventLog
	conn   *peer.Conn    // set before ready is closed
	ready  chan struct{} // closed once conn is set

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
	// standalone is the current standalone stream (0: none yet).
	standalone int64
	closed     bool
	reason     error

	done    chan struct{} // closed by Close
	stopped chan struct{} // closed once the server is stopped
}

// call is a client request in flight.
type call struct {
	// msg is a copy of the request, or for a large one its raw id only
	// (idOnly). The id is needed only for the error answer when the
	// session ends first: parsing it for every request would be
	// per-message work that is rarely needed (issue 6).
	msg    []byte
	idOnly bool
	token  jsonrpc.ID
	post   *post
}

// lazyIDBytes is the largest request a call keeps whole instead of
// parsing its id at once.
const lazyIDBytes = 1024

func (c *call) init(m *jsonrpc.Message, p *post) {
	c.post = p
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
	return jsonrpc.RawID(c.msg)
}

// post is the stream of one POST carrying requests.
type post struct {
	stream    int64
	waiting   int  // requests of the POST not answered yet
	transient bool // not resumable: no other message may go on it
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

// Owner is the tag the session was bound to at creation.
func (s *Session) Owner() any { return s.owner }

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
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrNotFound
	}
	var p *post
	var one *postOne
	for i := range msgs {
		env := &msgs[i].Env
		if env.Kind != jsonrpc.KindRequest {
			continue
		}
		if _, dup := s.inflight[env.ID]; dup {
			s.unregisterLocked(msgs[:i])
			s.mu.Unlock()
			return nil, ErrDuplicateID
		}
		var c *call
		if p == nil {
			// The POST's first request: its post, call and reader in one
			// allocation (they live as long as the request; issue 6).
			// Answers that go out as one JSON body carry no event ID, so
			// no client could resume their stream: it keeps nothing.
			var stream int64
			if opts.Resumable {
				stream = s.log.NewStream()
			} else {
				stream = s.log.NewTransientStream()
			}
			one = &postOne{post: post{stream: stream, transient: !opts.Resumable}}
			p = &one.post
			c = &one.call
		} else {
			c = new(call)
		}
		c.init(&msgs[i], p)
		if env.ProgressToken != "" && opts.Resumable {
			c.token = env.ProgressToken
			s.progress[c.token] = c
		}
		s.inflight[env.ID] = c
		p.waiting++
		s.reg.addInflight(1)
	}
	for _, m := range msgs {
		switch m.Env.Kind {
		case jsonrpc.KindResponse:
			delete(s.childReqs, m.Env.ID)
		case jsonrpc.KindNotification:
			if m.Env.Method == "notifications/cancelled" && m.Env.RequestID != "" {
				// The client gave up on its request: it will ignore a late
				// answer, so stop waiting for one (the spec lets the server
				// not answer a cancelled request at all).
				if c := s.inflight[m.Env.RequestID]; c != nil {
					s.answeredLocked(m.Env.RequestID, c)
				}
			}
		}
	}
	var r *Reader
	if p != nil {
		r = &one.reader
		if err := s.log.attach(r, p.stream, 0, true); err != nil {
			panic("session: attaching a new stream: " + err.Error())
		}
	}
	s.mu.Unlock()

	<-s.ready
	switch err := s.conn.Send(s, msgs...); {
	case errors.Is(err, peer.ErrBusy):
		s.mu.Lock()
		s.unregisterLocked(msgs)
		s.mu.Unlock()
		if r != nil {
			r.Detach()
		}
		return nil, fmt.Errorf("session %s: %w", s.id, err)
	case err != nil:
		// The server is gone; ending the session answers the requests
		// registered above with an error on their stream.
		s.Close(fmt.Errorf("%w: %v", ErrServerExited, err))
	}
	return r, nil
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
	delete(s.inflight, id)
	s.reg.addInflight(-1)
	if c.token != "" {
		delete(s.progress, c.token)
	}
	c.post.waiting--
	if c.post.waiting == 0 {
		s.log.Finish(c.post.stream)
	}
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
// ErrUnknownEvent or ErrEventsPurged.
func (s *Session) Resume(stream int64, after uint64) (*Reader, error) {
	s.touch()
	return s.log.Attach(stream, after)
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
		s.log.Append(c.post.stream, jsonrpc.ErrorResponse(c.rawID(), jsonrpc.CodeServerError, msg, nil))
		s.answeredLocked(id, c)
	}
	s.log.FinishAll()
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
	if !errors.Is(reason, ErrDeleted) && !errors.Is(reason, ErrShutdown) && !errors.Is(reason, ErrIdle) {
		level = slog.LevelWarn
	}
	s.logger.Log(context.Background(), level, "session ended", "reason", reason.Error())

	s.reg.wg.Add(1)
	go func() {
		defer s.reg.wg.Done()
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
func (s *Session) Route(m *peer.Message) { s.route(m.Data, m.Env) }

// Ended is the Session as its connection's peer.Router: the server's
// stdout ended, and with it the session.
func (s *Session) Ended(err error) { s.Close(err) }

// route delivers one message from the server to its stream.
func (s *Session) route(data []byte, env jsonrpc.Envelope) {
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
		s.log.Append(c.post.stream, data)
		s.answeredLocked(env.ID, c)
		return
	case jsonrpc.KindNotification:
		if env.ProgressToken != "" && env.Method == "notifications/progress" {
			if c := s.progress[env.ProgressToken]; c != nil {
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

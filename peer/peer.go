// Package peer is one connection to one child: a stdio MCP server running
// as a sandbox.Process. It owns the child's stdin framing, the only
// goroutine that reads its stdout, and the table of requests in flight.
//
// Several clients may share a child (the stateless front end's pools), and
// the bridge sends requests of its own (the initialize handshake for a child
// no client initializes, ping to find a hung child). So the Conn keeps the
// ID spaces apart: a request whose id is already in flight on the child, from
// any client or from the bridge, is given a fresh id on the way in and its
// own back on the way out; so are progress tokens, and the requestId of a
// client's notifications/cancelled follows its request. The answers to the
// bridge's own requests never reach a client.
//
// Rewriting only on collision (rather than always) is deliberate: a child
// owned by one 2025 session almost never sees a collision, and rewriting
// costs a copy of every answer, which for a 10 MiB tool result is the
// largest cost of a hop (see BenchmarkAnswer). The table lookup that finds
// a collision is the one that routes the answer anyway.
//
// Every message in both directions passes one interception point, a chain
// of Interceptors (like HTTP middleware), where policy, pinning, audit and
// metrics sit; every message from the child that is not the answer to one
// of the bridge's own requests then goes to a Router.
package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// Process is a running child, as package sandbox starts it: a
// sandbox.Process is a Process. The interface is repeated here rather than
// imported so that nothing above sandbox/ links the Docker client (and
// net/http) through it: session/ must not.
//
// Stdin and Stdout are used by one goroutine each; the others are safe for
// concurrent use. Wait returns once the child exited and its output was
// drained (nil for exit status 0); Stop ends it in bounded, escalating
// steps and is idempotent.
type Process interface {
	ID() string
	Stdin() io.WriteCloser
	Stdout() io.Reader
	Wait() error
	Stop(ctx context.Context) error
}

// Defaults of Options.
const (
	// DefaultMaxMessageBytes bounds one message from the child. Real
	// servers send results of several MiB (file contents, images and
	// resources in base64), and bridges without a limit pass them
	// (supergateway relays 10 MiB with no option): 16 MiB passes those
	// with room, while a runaway line still costs at most about that much
	// memory. It was 4 MiB.
	DefaultMaxMessageBytes = 16 << 20
	// DefaultMaxQueuedBytes bounds the bytes waiting to be written to the
	// child's stdin while it is not reading: one message of the largest
	// size (a single message larger than what is queued always passes).
	DefaultMaxQueuedBytes = 16 << 20
	// maxTombstones bounds the cancelled requests whose late answers are
	// still recognized (and dropped) rather than mistaken for another's.
	maxTombstones = 1024
)

// Options configure a Conn. Every zero value means the documented default.
type Options struct {
	// MaxMessageBytes bounds one message from the child (one stdout line).
	// A longer line is skipped; if it answered a request in flight, that
	// request gets a JSON-RPC error naming the limit instead, and the
	// connection goes on. Zero means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxQueuedBytes bounds the bytes of messages waiting for the child's
	// stdin: a Send that would exceed it while others are waiting fails with
	// ErrBusy instead of waiting. Zero means DefaultMaxQueuedBytes.
	MaxQueuedBytes int
	// Intercept sees every message to and from the child (see Interceptor
	// and Chain). Nil means none.
	Intercept Interceptor
	// Logger receives the connection's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Errors callers branch on.
var (
	// ErrExited: the child exited; Ended's error is an *ExitError, which
	// wraps it and the child's exit status.
	ErrExited = errors.New("the MCP server exited")
	// ErrStdoutClosed: the child closed its stdout but did not exit (within
	// exitStatusWait): it can answer nothing more, and the Router should
	// stop it.
	ErrStdoutClosed = errors.New("the MCP server closed its stdout")
	// ErrOversizedMessage: the child wrote a message larger than
	// MaxMessageBytes. (No longer ends a connection: the message is
	// skipped, and its request answered with an error; kept for callers
	// that name it.)
	ErrOversizedMessage = errors.New("the MCP server wrote a message larger than the limit")
	// ErrClosed: the connection has ended.
	ErrClosed = errors.New("the connection to the MCP server has ended")
	// ErrBusy: the child is not reading its stdin and MaxQueuedBytes are
	// already waiting for it.
	ErrBusy = errors.New("the MCP server is not reading its input fast enough")
)

// ExitError is Ended's error when the child exited: its exit status (what
// Process.Wait returned, or "exit status 0"), as ErrExited.
type ExitError struct{ Status error }

func (e *ExitError) Error() string   { return ErrExited.Error() + ": " + e.Status.Error() }
func (e *ExitError) Unwrap() []error { return []error{ErrExited, e.Status} }

// exitStatusWait is how long the reader waits, once the child's stdout has
// ended, for its exit status. A child that exits closes stdout at the same
// moment; the wait only covers reaping it on a loaded machine. A child
// still running then closed its stdout only.
const exitStatusWait = time.Second

// Direction says which way a message goes.
type Direction uint8

const (
	ToChild Direction = iota + 1
	FromChild
)

func (d Direction) String() string {
	if d == ToChild {
		return "to child"
	}
	return "from child"
}

// Message is a message at the interception point, and as the Router gets it.
type Message struct {
	jsonrpc.Message
	Dir Direction
	// Origin is the client the message comes from (ToChild) or goes to
	// (FromChild): the value passed to Send, compared with ==. From the
	// child, it is set for a response to a client's request and for the
	// notifications/progress of a client's request; other messages from the
	// child (its requests, its other notifications) are not addressed to a
	// client, and the Router chooses one. Nil for the bridge's own requests
	// and their answers (Own). Caller says whom it acts for.
	Origin Origin
	// Own marks the bridge's own requests and their answers, which never
	// reach a Router.
	Own bool
	// Method is the method of the message, or for a response the method of
	// the request it answers ("" for a response to no request in flight).
	Method string
	// Abandoned marks the explicit end of a client's request the child
	// will never answer, its connection having ended: an error response
	// to it (with Origin and Method set) that passes the FromChild chain
	// once, before the Router hears of the end, so that what keeps state
	// per request (metrics, tracing) closes it as every era does. It
	// reaches no Router: the Router answers the request itself (Ended).
	Abandoned bool

	reply  chan []byte // the answer to the bridge's own request goes there
	passed bool        // the ToChild chain passed the message on
}

// Caller is who the message's client acts for (Origin.Caller): the
// principal the HTTP edge established, typed, for the guards (policy,
// audit) to read. Nil for a message without an Origin (the bridge's own,
// and what the child sends to no client in particular) and without
// authentication.
func (m *Message) Caller() *auth.Principal {
	if m.Origin == nil {
		return nil
	}
	return m.Origin.Caller()
}

// An Origin is a client of a connection, as Send gets it and
// Message.Origin carries it.
//
// It stays an identity the Conn compares with == (an answer, a
// notifications/cancelled and a progress token belong to the request of
// that client only), not a value the Conn copies: the same client sends
// many requests over time, and whom it acts for may change between them
// (a 2025 session's refreshed or stepped-up token; a stateless call that a
// retry resumes), so the caller is asked when a guard needs it, of the
// client itself, rather than fixed per request at Send. Implementations
// are pointers, or other comparable values, owned by what calls Send: a
// session (*session.Session), a stateless call or subscription of the
// pool, a virtual child of an aggregate.
type Origin interface {
	// Caller is whom the client acts for now, or nil without
	// authentication. It is safe for concurrent use, allocates nothing
	// and does not block: the interception point asks it per message.
	Caller() *auth.Principal
}

// Replace sets the message's data, parsing it for its envelope: what an
// Interceptor that rewrites a message calls before passing it on.
func (m *Message) Replace(data []byte) error {
	env, err := jsonrpc.Parse(data)
	if err != nil {
		return err
	}
	m.Data, m.Env = data, env
	if env.Kind != jsonrpc.KindResponse {
		m.Method = env.Method
	}
	return nil
}

// A Handler takes a message one step further: the next Interceptor, or at
// the end the child's stdin or the Router.
type Handler func(m *Message) error

// An Interceptor wraps the next Handler, as HTTP middleware does, and sees
// every message in both directions, client messages as their client wrote
// them (before their ids are rewritten) and child messages as their client
// will get them. It may
//   - pass the message on: return next(m);
//   - replace it: m.Replace(data), then next(m);
//   - refuse a client's request: return a *jsonrpc.Error without calling
//     next; the client gets it as the answer to its request;
//   - drop a message: return nil without calling next. A dropped request
//     from a client is answered with an internal error, so that no client
//     waits forever; a dropped response leaves its request unanswered.
//
// Interceptors run on the sender's goroutine (ToChild) or the connection's
// reader (FromChild), for every message: they must be quick and safe for
// concurrent use. Any other error from a ToChild chain fails the Send. m
// itself is valid only during the call, in both directions: the Conn
// reuses it.
type Interceptor func(next Handler) Handler

// Chain composes interceptors: the first sees messages first, in both
// directions.
func Chain(is ...Interceptor) Interceptor {
	return func(next Handler) Handler {
		for i := len(is) - 1; i >= 0; i-- {
			if is[i] != nil {
				next = is[i](next)
			}
		}
		return next
	}
}

// A Router gets every message from the child that is not the answer to one
// of the bridge's own requests: responses to clients' requests (with the
// client's own id and progress token restored), notifications/progress
// with Origin set, and the child's other requests and notifications with
// Origin nil.
//
// Route is called from the connection's reader goroutine, in the child's
// order, and, for answers that the interception point makes for refused
// requests, from the goroutine calling Send. It must not block for long:
// the child's output waits meanwhile. It may call Send. m itself is valid
// only during the call (the reader reuses it, which spares an allocation
// per message); m.Data is the message's own memory, which the Router may
// keep.
//
// Ended is called once, after the last Route from the reader, when the
// child's stdout ended: err is an *ExitError (ErrExited with the child's
// exit status), or wraps ErrStdoutClosed (the child closed its stdout and
// kept running) or ErrOversizedMessage, or is the read error. Client
// requests still in flight will get no answer from the child: the Router
// answers them.
type Router interface {
	Route(m *Message)
	Ended(err error)
}

// A Conn is one connection to one child. Its methods are safe for
// concurrent use.
type Conn struct {
	proc      Process
	router    Router
	logger    *slog.Logger
	maxLine   int
	maxQueued int64
	intercept Handler // the chain ending in deliver; nil without interceptors
	toChild   Handler // the chain ending in enqueue; nil without interceptors

	// wlock serializes writes to the child's stdin, one line per
	// message; SendBy can stop waiting for it.
	wlock  writeLock
	stdin  io.Writer
	queued atomic.Int64 // bytes of Sends waiting for wlock or writing
	// dl is stdin if it takes write deadlines, else nil; dlSet is the
	// deadline set last (writeBy). Both used with wlock held.
	dl    writeDeadliner
	dlSet time.Time
	// bg counts the goroutines finishing a SendBy's writes (finish).
	bg sync.WaitGroup

	mu sync.Mutex
	// inflight maps the ids of requests in flight, as the child knows
	// them, to their entries: clients', the bridge's own, and cancelled
	// ones (tombstones) until the child answers them.
	inflight map[jsonrpc.ID]*entry
	// renamedLive counts the requests in inflight whose id was rewritten
	// and that are not cancelled: the ones a client's notifications/cancelled
	// is looked for among (renamedLocked).
	renamedLive int
	// tokens maps progress tokens, as the child knows them, to the entry of
	// their request.
	tokens     map[jsonrpc.ID]*entry
	tombstones []jsonrpc.ID // oldest first, at most maxTombstones
	next       int64        // the last fresh id handed out
	version    string       // the protocol version of the initialize answer
	ended      bool

	in     Message       // the reader's message, reused (see Router)
	done   chan struct{} // closed when the reader has returned
	waited chan struct{} // closed when the child's Wait has returned
}

// entry is a request in flight on the child.
type entry struct {
	origin    Origin
	method    string
	clientID  jsonrpc.ID // the id as its client knows it (== child's unless renamed)
	rawID     []byte     // the client's id as written, when renamed
	token     jsonrpc.ID // the progress token as the child knows it, if any
	rawToken  []byte     // the client's token as written, when renamed
	renamed   bool
	cancelled bool
	own       chan []byte // the bridge's own request: gets the answer
}

// New connects to a running child and starts reading its stdout. The Conn
// owns proc: Close stops it.
func New(proc Process, router Router, opts *Options) *Conn {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Conn{
		proc:      proc,
		router:    router,
		logger:    o.Logger,
		maxLine:   o.MaxMessageBytes,
		maxQueued: int64(o.MaxQueuedBytes),
		stdin:     proc.Stdin(),
		inflight:  make(map[jsonrpc.ID]*entry),
		tokens:    make(map[jsonrpc.ID]*entry),
		done:      make(chan struct{}),
		waited:    make(chan struct{}),
	}
	c.dl, _ = c.stdin.(writeDeadliner)
	if o.Intercept != nil {
		c.intercept = o.Intercept(c.deliver)
		c.toChild = o.Intercept(forward)
	}
	go c.read()
	return c
}

// ID names the child in logs.
func (c *Conn) ID() string { return c.proc.ID() }

// Done is closed once the child's stdout has ended and Ended has returned.
func (c *Conn) Done() <-chan struct{} { return c.done }

// ProtocolVersion is the protocolVersion of the child's answer to
// initialize, from a client or from Initialize, or "" before one.
func (c *Conn) ProtocolVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Close stops the child (Process.Stop) and waits until its stdout has
// been read to the end and its exit reaped, or ctx is done. Closing twice
// is harmless.
func (c *Conn) Close(ctx context.Context) error {
	err := c.proc.Stop(ctx)
	// The writes finish (a stopped child's stdin is closed) once it is
	// stopped.
	bg := make(chan struct{})
	go func() { c.bg.Wait(); close(bg) }()
	for _, ch := range []chan struct{}{c.done, c.waited, bg} {
		select {
		case <-ch:
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
	}
	return err
}

// forward is the end of the ToChild chain: it marks the message as passed
// on; Send writes it.
func forward(m *Message) error {
	m.passed = true
	return nil
}

// Send writes client messages to the child, in order, one line each. origin
// is the client (compared with ==, see Origin): the answers to its requests go to
// the Router with it. Requests are registered before they are written, so
// no answer can arrive first. A request refused at the interception point
// is answered through the Router, and Send goes on with the next message.
//
// Send fails with ErrClosed once the connection has ended, with ErrBusy
// when the child is not reading and too much is waiting (nothing was
// written), and with the write error if stdin failed (the child is gone).
// Requests not written are forgotten: their client should answer them.
func (c *Conn) Send(origin Origin, msgs ...jsonrpc.Message) error {
	return c.SendBy(origin, time.Time{}, msgs...)
}

// SendBy is Send that waits for the child's stdin only until deadline
// (zero: no bound). It fails with ErrStalled if it could not begin to
// write by then (nothing was written), and with ErrWriting if it began
// but the child stopped reading: the rest is then written in the
// background, in order, and its requests stay in flight. Bounding the
// write itself needs a stdin that takes write deadlines (pipes and
// containers' attach connections do); with another, only the wait behind
// other writes is bounded.
func (c *Conn) SendBy(origin Origin, deadline time.Time, msgs ...jsonrpc.Message) error {
	if c.toChild != nil {
		var err error
		if msgs, err = c.filter(origin, msgs); err != nil {
			return err
		}
	}
	size := 0
	for i := range msgs {
		size += len(msgs[i].Data) + 1
	}
	if q := c.queued.Add(int64(size)); q > c.maxQueued && q > int64(size) {
		c.queued.Add(-int64(size))
		return fmt.Errorf("%w: %d bytes are waiting for it", ErrBusy, q-int64(size))
	}
	if !c.lockWrite(deadline) {
		c.queued.Add(-int64(size))
		return ErrStalled
	}
	c.writeBy(deadline)
	for i := range msgs {
		m := &msgs[i]
		ids, ok, err := c.register(origin, m)
		if err != nil {
			c.forget(origin, msgs[i:])
			c.unlockWrite()
			c.queued.Add(-int64(size))
			return err
		}
		if !ok {
			continue
		}
		if err := c.writeLine(m.Data, &ids); err != nil {
			if sw, ok := err.(*stalledWrite); ok {
				// The line is cut: what remains, and the messages after
				// it, go on in the background, which keeps the right to
				// write and the queued bytes until then.
				c.bg.Add(1)
				go c.finish(origin, sw.rest, cloneMessages(msgs[i+1:]), size)
				return ErrWriting
			}
			c.forget(origin, msgs[i:])
			c.unlockWrite()
			c.queued.Add(-int64(size))
			return fmt.Errorf("writing to the MCP server's stdin: %w", err)
		}
	}
	c.unlockWrite()
	c.queued.Add(-int64(size))
	return nil
}

// filter runs client messages through the interception point. It returns
// the messages to write; refused requests are answered.
//
// It allocates only where it must (the profile of a short call counted
// three objects per message here): msgs itself is returned while every
// message passes unchanged, and one Message, from a pool, carries them all
// through the chain.
func (c *Conn) filter(origin Origin, msgs []jsonrpc.Message) ([]jsonrpc.Message, error) {
	var out []jsonrpc.Message // nil while msgs[:i] all passed unchanged
	m := chainMessages.Get().(*Message)
	defer func() {
		*m = Message{} // keeps no client's bytes alive in the pool
		chainMessages.Put(m)
	}()
	for i := range msgs {
		msg := &msgs[i] // not a range value: that copies each Message
		*m = Message{Message: *msg, Dir: ToChild, Origin: origin, Method: msg.Env.Method}
		err := c.toChild(m)
		if m.passed && err == nil {
			if out == nil && sameData(m.Data, msg.Data) {
				continue
			}
			if out == nil {
				out = append(make([]jsonrpc.Message, 0, len(msgs)), msgs[:i]...)
			}
			out = append(out, m.Message)
			continue
		}
		if out == nil {
			out = append(make([]jsonrpc.Message, 0, len(msgs)), msgs[:i]...)
		}
		rpcErr := refusal(err)
		if rpcErr == nil {
			return nil, err
		}
		if msg.Env.Kind == jsonrpc.KindRequest {
			c.answerRefused(origin, *msg, rpcErr)
		}
	}
	if out == nil {
		return msgs, nil
	}
	return out, nil
}

// chainMessages are the Messages that carry client messages through the
// ToChild chain. The Message escapes (the chain is a func value), and at
// a few hundred bytes it was the Conn's largest allocation for a short
// call (the allocs profile of bridge-bench); an Interceptor keeps none
// beyond its call (see Interceptor).
var chainMessages = sync.Pool{New: func() any { return new(Message) }}

// sameData reports whether an interceptor passed a message's own bytes on
// (an interceptor that changes a message passes new ones).
func sameData(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// refusal is the error a refused request is answered with: err's
// *jsonrpc.Error, or an internal error when the chain dropped the request
// without one. It is nil when err is another error, which Send returns.
func refusal(err error) *jsonrpc.Error {
	if err == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the bridge dropped this request"}
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return rpcErr
	}
	return nil
}

// answerRefused hands the Router the answer to a refused request.
func (c *Conn) answerRefused(origin Origin, msg jsonrpc.Message, rpcErr *jsonrpc.Error) {
	data := rpcErr.Response(msg.Env.IDAt.In(msg.Data))
	env, err := jsonrpc.Parse(data)
	if err != nil {
		panic("peer: an error response does not parse: " + err.Error())
	}
	c.router.Route(&Message{Message: jsonrpc.Message{Data: data, Env: env}, Dir: FromChild, Origin: origin, Method: msg.Env.Method})
}

// idEdits are the ids a message gets on its way to the child, in place
// of what it has at each Span (a zero Span: no edit): a colliding id or
// progress token, the requestId of a cancellation. writeLine writes them
// as it frames the message, so that a renamed request is not copied once
// more (jsonrpc.Rewrite), and no id is rendered on its own.
type idEdits [2]idEdit

type idEdit struct {
	at jsonrpc.Span
	id jsonrpc.ID
}

func (ed *idEdits) none() bool { return ed[0].at.IsZero() && ed[1].at.IsZero() }

// appendTo appends data with the edits made to b (jsonrpc.AppendRewrite),
// the ids rendered on the stack.
func (ed *idEdits) appendTo(b, data []byte) []byte {
	var raw [2][24]byte
	var edits [2]jsonrpc.Edit
	for i, e := range ed {
		if !e.at.IsZero() {
			edits[i] = jsonrpc.Edit{At: e.at, Raw: e.id.AppendJSON(raw[i][:0])}
		}
	}
	return jsonrpc.AppendRewrite(b, data, edits[:]...)
}

// register enters a client request in the table and says what to
// rewrite as it is written. It returns false for a message not to write.
func (c *Conn) register(origin Origin, m *jsonrpc.Message) (idEdits, bool, error) {
	env := &m.Env
	switch {
	case env.Kind == jsonrpc.KindRequest:
	case env.Method == "notifications/cancelled" && env.RequestID != "":
		return c.cancelled(origin, m)
	default:
		return idEdits{}, true, nil // responses to the child's requests, notifications
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids idEdits
	if c.ended {
		return ids, false, ErrClosed
	}
	e := entries.Get().(*entry)
	*e = entry{origin: origin, method: env.Method, clientID: env.ID}
	childID := env.ID
	if _, taken := c.inflight[childID]; taken {
		childID = c.freshLocked()
		e.renamed, e.rawID = true, bytes.Clone(env.IDAt.In(m.Data))
		ids[0] = idEdit{env.IDAt, childID}
		c.renamedLive++
	}
	if env.ProgressToken != "" {
		e.token = env.ProgressToken
		if _, taken := c.tokens[e.token]; taken {
			e.token = c.freshLocked()
			e.rawToken = bytes.Clone(env.ProgressTokenAt.In(m.Data))
			ids[1] = idEdit{env.ProgressTokenAt, e.token}
		}
		c.tokens[e.token] = e
	}
	c.inflight[childID] = e
	return ids, true, nil
}

// entries are the entries of clients' requests: allocated one per
// request, they were the Conn's second largest allocation for a short
// call. An entry is recycled once receive has used the answer to it: from then on it is
// neither in the table nor referenced elsewhere (the bridge's own entries,
// which Call keeps comparing, and entries pushed out as tombstones are
// left to the collector).
var entries = sync.Pool{New: func() any { return new(entry) }}

// recycle returns the entry of an answered client request to entries.
func recycle(e *entry) {
	*e = entry{} // keeps no client alive in the pool
	entries.Put(e)
}

// cancelled passes on a client's notifications/cancelled: its requestId
// becomes the id the child knows the request by, and the request a
// tombstone whose late answer is dropped. A client can cancel only its own
// requests: a cancellation of another's, or of no request in flight, is
// not written.
func (c *Conn) cancelled(origin Origin, m *jsonrpc.Message) (idEdits, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids idEdits
	id := m.Env.RequestID
	childID, renamed := c.renamedLocked(origin, id)
	if !renamed {
		childID = id
	}
	e := c.inflight[childID]
	if e == nil || e.own != nil || e.origin != origin || e.clientID != id || e.renamed != renamed {
		c.logger.Debug("not passing on a cancellation of no request in flight of this client", "requestId", string(id))
		return ids, false, nil
	}
	c.tombstoneLocked(childID, e)
	if renamed {
		ids[0] = idEdit{m.Env.RequestIDAt, childID}
	}
	return ids, true, nil
}

// renamedLocked returns the id the child knows a request of origin by,
// which its client knows as id, if that request's id was rewritten and it
// is not cancelled. It looks through the table, but only while such
// requests are in flight: only a cancellation (or a failed write) asks,
// where a map from (origin, id) cost an insertion and a deletion, keyed by
// an interface, on every renamed request, which in a pool shared by many
// clients counting their ids from 1 is most requests. A client
// that gave one id to several requests in flight (which JSON-RPC forbids)
// gets one of them.
func (c *Conn) renamedLocked(origin Origin, id jsonrpc.ID) (jsonrpc.ID, bool) {
	if c.renamedLive == 0 {
		return "", false
	}
	for childID, e := range c.inflight {
		if e.renamed && !e.cancelled && e.own == nil && e.clientID == id && e.origin == origin {
			return childID, true
		}
	}
	return "", false
}

// tombstoneLocked marks a request cancelled: it stays in the table, so that
// its id is not reused while the child may still answer it, until the
// child answers or maxTombstones later cancellations push it out.
func (c *Conn) tombstoneLocked(childID jsonrpc.ID, e *entry) {
	if e.cancelled {
		return
	}
	e.cancelled = true
	// The token stays known until the child answers or the tombstone is
	// pushed out: the child's later progress for it is dropped (the
	// client forgot the token; TypeScript clients report each such
	// notification as an error).
	if e.renamed {
		c.renamedLive--
	}
	if len(c.tombstones) == maxTombstones {
		old := c.tombstones[0]
		c.tombstones = c.tombstones[1:]
		if oe := c.inflight[old]; oe != nil && oe.cancelled {
			delete(c.inflight, old)
			c.forgetTokenLocked(oe)
		}
	}
	c.tombstones = append(c.tombstones, childID)
}

func (c *Conn) forgetTokenLocked(e *entry) {
	if e.token != "" && c.tokens[e.token] == e {
		delete(c.tokens, e.token)
	}
}

// forget drops the entries of requests that were not written.
func (c *Conn) forget(origin Origin, msgs []jsonrpc.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		if m.Env.Kind != jsonrpc.KindRequest {
			continue
		}
		childID, renamed := c.renamedLocked(origin, m.Env.ID)
		if !renamed {
			childID = m.Env.ID
		}
		if e := c.inflight[childID]; e != nil && e.origin == origin && e.clientID == m.Env.ID && !e.cancelled {
			c.removeLocked(childID, e)
		}
	}
}

// removeLocked forgets an answered request.
func (c *Conn) removeLocked(childID jsonrpc.ID, e *entry) {
	delete(c.inflight, childID)
	c.forgetTokenLocked(e)
	if e.renamed && !e.cancelled {
		c.renamedLive--
	}
}

// freshBase is where fresh ids start: above the small numbers clients
// count their requests from, so that a fresh id seldom makes a client's
// next id collide in turn.
const freshBase = 1 << 30

// freshLocked returns an id in flight nowhere, for the bridge's own
// requests and for renamed client requests and tokens. A client may use
// the same id later: it is then renamed in turn.
func (c *Conn) freshLocked() jsonrpc.ID {
	if c.next < freshBase {
		c.next = freshBase - 1
	}
	for {
		c.next++
		id := jsonrpc.NumberID(c.next)
		_, a := c.inflight[id]
		_, b := c.tokens[id]
		if !a && !b {
			return id
		}
	}
}

// lineBufs holds buffers for framing small messages, so that a message and
// its newline reach the pipe in one write without a buffer per child.
var lineBufs = sync.Pool{New: func() any { return new([]byte) }}

const pooledLineBytes = 64 << 10

var newline = []byte{'\n'}

// writeLine puts one message on stdin as one line, with the ids of ids
// (nil: none). Called with the right to write (wlock).
func (c *Conn) writeLine(data []byte, ids *idEdits) error {
	// Two IndexByte scans (vectorized) rather than ContainsAny, which
	// tests each byte against a set: about 0.1k instructions a call
	// instead of 2.9k (bridge-bench -only instr).
	multiline := bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0
	if ids != nil && ids.none() {
		ids = nil
	}
	if ids != nil && (multiline || len(data) >= pooledLineBytes) {
		// Written apart from the pooled buffer: edited first.
		data, ids = ids.appendTo(nil, data), nil
	}
	if multiline {
		// Pretty-printed JSON: stdio framing needs one message per line.
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			return err
		}
		data = buf.Bytes()
	}
	if len(data) >= pooledLineBytes {
		return c.write(data, newline)
	}
	bp := lineBufs.Get().(*[]byte)
	var line []byte
	if ids != nil {
		line = append(ids.appendTo((*bp)[:0], data), '\n')
	} else {
		line = append(append((*bp)[:0], data...), '\n')
	}
	err := c.write(line, nil)
	*bp = line
	lineBufs.Put(bp)
	return err
}

// Call sends a request of the bridge's own and returns its result, or the
// *jsonrpc.Error it was answered with. params is marshalled with
// encoding/json (nil sends none). Its answer never reaches the Router. If
// ctx ends first, the child is sent notifications/cancelled for it.
func (c *Conn) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	answer := make(chan []byte, 1)
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	id := c.freshLocked()
	e := &entry{method: method, clientID: id, own: answer}
	c.inflight[id] = e
	c.mu.Unlock()

	req, err := marshalMessage(method, id, params)
	if err == nil {
		err = c.sendOwn(req)
	}
	if err != nil {
		c.mu.Lock()
		c.removeLocked(id, e)
		c.mu.Unlock()
		return nil, err
	}
	select {
	case data := <-answer:
		result, rpcErr, err := jsonrpc.DecodeResponse(data)
		switch {
		case err != nil:
			return nil, err
		case rpcErr != nil:
			return nil, rpcErr
		}
		return result, nil
	case <-c.done:
		return nil, ErrClosed
	case <-ctx.Done():
		c.mu.Lock()
		if c.inflight[id] == e {
			c.tombstoneLocked(id, e)
		}
		c.mu.Unlock()
		// "When a party wants to cancel an in-progress request, it sends a
		// notifications/cancelled notification" (basic/utilities/cancellation).
		_ = c.Notify("notifications/cancelled", map[string]any{"requestId": json.RawMessage(id.AppendJSON(nil)), "reason": ctx.Err().Error()})
		return nil, ctx.Err()
	}
}

// Notify sends a notification of the bridge's own.
func (c *Conn) Notify(method string, params any) error {
	data, err := marshalMessage(method, "", params)
	if err != nil {
		return err
	}
	return c.sendOwn(data)
}

// sendOwn writes a message of the bridge's own, through the interception
// point (which sees it with Own set and may refuse it).
func (c *Conn) sendOwn(data []byte) error {
	env, err := jsonrpc.Parse(data)
	if err != nil {
		return err
	}
	if c.toChild != nil {
		m := Message{Message: jsonrpc.Message{Data: data, Env: env}, Dir: ToChild, Own: true, Method: env.Method}
		if err := c.toChild(&m); err != nil {
			return err
		}
		if !m.passed {
			return errors.New("the bridge's interception point dropped its own request")
		}
		data = m.Data
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	c.queued.Add(int64(len(data) + 1))
	defer c.queued.Add(-int64(len(data) + 1))
	c.lockWrite(time.Time{})
	defer c.unlockWrite()
	c.writeBy(time.Time{})
	if err := c.writeLine(data, nil); err != nil {
		// A message of the bridge's own is one line it marshalled: writing
		// it fails only when stdin no longer takes anything, which is the
		// end of the connection, though the reader may not have seen the
		// child's stdout end yet (Stop closes stdin first and waits; a
		// child that exits breaks the pipe before its stdout is drained).
		// Callers tell that end from a real failure with ErrClosed (a
		// pin enforcer's list racing a DELETE logged "file already
		// closed" at WARN).
		return fmt.Errorf("%w: writing to the MCP server's stdin: %w", ErrClosed, err)
	}
	return nil
}

func marshalMessage(method string, id jsonrpc.ID, params any) ([]byte, error) {
	b := append(make([]byte, 0, 128), `{"jsonrpc":"2.0",`...)
	if id != "" {
		b = append(b, `"id":`...)
		b = id.AppendJSON(b)
		b = append(b, ',')
	}
	b = append(b, `"method":`...)
	b = strconv.AppendQuote(b, method) // MCP methods are ASCII
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("encoding the params of %s: %w", method, err)
		}
		b = append(b, `,"params":`...)
		b = append(b, p...)
	}
	return append(b, '}'), nil
}

// Initialize performs the MCP handshake for a child that no client
// initializes: initialize with params, then notifications/initialized. It
// returns the child's initialize result.
func (c *Conn) Initialize(ctx context.Context, params any) (json.RawMessage, error) {
	result, err := c.Call(ctx, "initialize", params)
	if err != nil {
		return nil, fmt.Errorf("initializing the MCP server: %w", err)
	}
	if err := c.Notify("notifications/initialized", nil); err != nil {
		return nil, err
	}
	return result, nil
}

// Ping sends ping and waits for the answer: a child that does not answer
// before ctx ends is hung.
func (c *Conn) Ping(ctx context.Context) error {
	_, err := c.Call(ctx, "ping", nil)
	return err
}

// read reads the child's stdout until it ends, handing each message on,
// then tells the Router why it ended.
func (c *Conn) read() {
	defer close(c.done)
	lr := newLineReader(c.proc.Stdout(), c.maxLine)
	for {
		line, err := lr.next()
		if err != nil {
			var tl *lineTooLong
			if errors.As(err, &tl) {
				c.oversized(tl)
				continue
			}
			break
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			// A bare CR is JSON white space between tokens, but it ends a
			// line in SSE, and would cut the event short. A space is the same JSON; inside a string a raw CR is
			// invalid JSON anyway, which Parse refuses. The line is ours.
			for i, b := range line {
				if b == '\r' {
					line[i] = ' '
				}
			}
		}
		env, err := jsonrpc.Parse(line)
		if err != nil {
			c.logger.Warn("skipping a line from the MCP server that is not a JSON-RPC message",
				"err", err, "line", truncate(line, 200))
			continue
		}
		c.receive(line, env)
	}
	// Stdout has ended: the child can answer nothing more, whether or not
	// it exits (one that closed stdout and kept running
	// left a session whose calls hung). A child that exits closes stdout
	// as it does, so its exit status, which says why, is waited for
	// briefly; the Router stops one still running.
	exited := make(chan error, 1)
	go func() { // ends when the child does, which Close makes sure of
		defer close(c.waited)
		exited <- c.proc.Wait()
	}()
	grace := time.NewTimer(exitStatusWait)
	defer grace.Stop()
	select {
	case werr := <-exited:
		if werr == nil {
			werr = errors.New("exit status 0")
		}
		c.end(&ExitError{Status: werr})
	case <-grace.C:
		c.end(fmt.Errorf("%w but kept running; it was stopped", ErrStdoutClosed))
	}
}

// end marks the connection ended, passes each client request still
// unanswered through the interception point as abandoned, and tells the
// Router.
func (c *Conn) end(reason error) {
	c.mu.Lock()
	c.ended = true
	var left []*entry
	if c.intercept != nil {
		for _, e := range c.inflight {
			if e.own == nil && !e.cancelled {
				left = append(left, e)
			}
		}
	}
	c.mu.Unlock()
	for _, e := range left {
		c.abandon(e, reason)
	}
	c.router.Ended(reason)
}

// abandon passes the explicit end of a request the child will never
// answer through the FromChild chain (Message.Abandoned). The reader has
// returned: nothing else passes the chain meanwhile.
func (c *Conn) abandon(e *entry, reason error) {
	data := jsonrpc.ErrorResponse(e.clientID.AppendJSON(nil), jsonrpc.CodeServerError,
		"the MCP server ended before answering: "+reason.Error(), nil)
	env, err := jsonrpc.Parse(data)
	if err != nil {
		return // an id the bridge parsed always renders
	}
	m := &c.in
	*m = Message{Message: jsonrpc.Message{Data: data, Env: env}, Dir: FromChild,
		Origin: e.origin, Method: e.method, Abandoned: true}
	if err := c.intercept(m); err != nil {
		c.logger.Warn("the interception point failed on an abandoned request", "err", err, "method", m.Method)
	}
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// receive restores what the way in rewrote in a message from the child and
// hands it on.
func (c *Conn) receive(data []byte, env jsonrpc.Envelope) {
	if env.Kind == jsonrpc.KindRequest {
		data, env = withParams(data, env)
	}
	m := &c.in
	*m = Message{Message: jsonrpc.Message{Data: data, Env: env}, Dir: FromChild, Method: env.Method}
	switch {
	case env.Kind == jsonrpc.KindResponse:
		c.mu.Lock()
		e := c.inflight[env.ID]
		if e == nil {
			c.mu.Unlock()
			break // an answer to no request: the Router decides
		}
		c.removeLocked(env.ID, e)
		if e.method == "initialize" && !env.IsError {
			c.learnVersion(data)
		}
		c.mu.Unlock()
		switch {
		case e.cancelled:
			c.logger.Debug("dropping the MCP server's late answer to a cancelled request", "id", string(env.ID))
			if e.own == nil {
				recycle(e)
			}
			return
		case e.own != nil:
			m.Own = true
		case e.renamed:
			m.Data = m.Env.Rewrite(data, jsonrpc.Edit{At: env.IDAt, Raw: e.rawID})
		}
		m.Origin, m.Method, m.reply = e.origin, e.method, e.own
		if e.own == nil {
			recycle(e)
		}
	case env.Method == "notifications/progress" && env.ProgressToken != "":
		c.mu.Lock()
		e := c.tokens[env.ProgressToken]
		cancelled := e != nil && e.cancelled
		c.mu.Unlock()
		if e == nil {
			break
		}
		if cancelled {
			// "Progress notifications MUST only reference tokens that ...
			// are associated with an in-progress operation"
			// (basic/utilities/progress): the client cancelled this one.
			c.logger.Debug("dropping the MCP server's progress for a cancelled request", "token", string(env.ProgressToken))
			return
		}
		if e.rawToken != nil {
			m.Data = m.Env.Rewrite(data, jsonrpc.Edit{At: env.ProgressTokenAt, Raw: e.rawToken})
		}
		m.Origin = e.origin
		m.Own = e.own != nil
	}
	if c.intercept != nil {
		if err := c.intercept(m); err != nil {
			c.logger.Warn("the interception point failed on a message from the MCP server", "err", err, "method", m.Method)
		}
		return
	}
	_ = c.deliver(m)
}

// deliver is the end of the FromChild chain.
func (c *Conn) deliver(m *Message) error {
	switch {
	case m.Abandoned:
		// The Router answers it (Ended).
	case m.reply != nil:
		m.reply <- m.Data // buffered: the call may have given up
	case m.Own:
		// Progress of the bridge's own requests: nobody listens.
	default:
		c.router.Route(m)
	}
	return nil
}

// learnVersion reads result.protocolVersion of an initialize answer: the
// one place the negotiated protocol version is learned.
func (c *Conn) learnVersion(data []byte) {
	if result, ok := jsonrpc.Lookup(data, "result"); ok {
		if v, ok := jsonrpc.Lookup(result, "protocolVersion"); ok {
			c.version, _ = jsonrpc.StringValue(v)
		}
	}
}

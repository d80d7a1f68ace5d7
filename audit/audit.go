// Package audit writes the audit log: one JSON line per request a client
// sends to the server and per request the server sends to a client, with
// who sent it, what it named, a digest of its arguments, its outcome, its
// duration and its size; and one line per alert (a server offering what
// the pin file refuses).
//
// A line is written when its request is answered (just after the answer
// has gone on to its client), refused or cancelled, with one write(2) to
// a file opened with O_APPEND, and nothing is buffered across lines: the
// request waits until its line is written, so a crash loses at most the
// lines being written, and several bridges may append to one file without
// their lines mixing (POSIX makes each append of a regular file atomic
// with respect to other appends; Linux does for writes of any size to a
// local file). A request writes its own line when no write is under way;
// behind a write under way, lines queue for a goroutine of the log's, and
// their requests wait at most WriteTimeout: a blocked writer (a FIFO or
// pipe whose reader stalled, a hung network file system) stalls no
// session but, on a regular file, the request whose own write blocked
// (see output); lines then queue, up to QueueBytes, and beyond it are
// lost and counted (Lost). A line a failed write cut part-way (a full
// disk) is completed before any other, so two records never share a line.
//
// The log holds no token: the interception point never sees HTTP headers.
// It holds arguments only as their SHA-256 unless Options.Args is set, as
// arguments may carry what users typed.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// MaxPending bounds the requests in flight a connection's interceptor
// tracks; a request beyond it is written at once with outcome "sent".
const MaxPending = 4096

// A Record is one line of the audit log.
type Record struct {
	Time  time.Time `json:"time"`  // when the request was answered (or refused), UTC
	Event string    `json:"event"` // "request", or "pin_violation"
	// Server names the server of the bridge's --config file (Options.Server).
	Server  string `json:"server,omitempty"`
	Session string `json:"session,omitempty"`
	// The principal of the client: the request's sender (from "client"),
	// or the client that answered (from "server").
	Sub      string `json:"sub,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	// From is who sent the request: "client", or "server" (sampling,
	// elicitation, roots/list).
	From   string `json:"from,omitempty"`
	Method string `json:"method,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	// Advertised is the name the client knows Tool or Prompt by, when it
	// is not the server's own: an aggregate's (Options.Advertise).
	Advertised string `json:"advertised,omitempty"`
	Resource   string `json:"resource,omitempty"` // a URI, or a URI template for pin violations
	// ArgsSHA256 is the hex SHA-256 of params.arguments as written (of
	// params for methods without arguments), absent when there were none.
	ArgsSHA256 string          `json:"args_sha256,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"` // only with Options.Args
	// Outcome: "ok", "error" (ErrorCode says which), "denied" (DeniedBy
	// says by which rule; ErrorCode is what the client got), "cancelled",
	// "sent" (not tracked: too many in flight), "unanswered" (the
	// connection ended first); "dropped" for a pin violation.
	Outcome    string  `json:"outcome"`
	ErrorCode  int     `json:"error_code,omitempty"`
	DeniedBy   string  `json:"denied_by,omitempty"`
	Reason     string  `json:"reason,omitempty"` // why an "unanswered" request was not answered
	DurationMS float64 `json:"duration_ms"`
	BytesIn    int     `json:"bytes_in"`  // the request
	BytesOut   int     `json:"bytes_out"` // its answer

	// argsSum is the digest ArgsSHA256 is written from (in hex, when
	// that is empty), if hasSum: kept as bytes, not a string, to spare an
	// allocation per line.
	argsSum [sha256.Size]byte
	hasSum  bool
	// quotedSession, if not empty, is Session as a JSON string: what a
	// connection's lines write without escaping its session every time.
	quotedSession string
	// quotedName[:quotedLen], if not empty, is the member quotedWhat
	// names (Tool or Prompt) as a JSON string: its request's bytes
	// (pending.quotedName), copied (a slice of a pending would move it to
	// the heap).
	quotedLen  uint8
	quotedWhat named
	quotedName [maxQuotedName]byte
}

// Options configure a Log. Every zero value means the documented default.
type Options struct {
	// Args records each request's arguments beside their digest. False
	// (the default) records only the digest.
	Args bool
	// Server is put in each record's server: the name of the server the
	// log is for, when one log holds several servers' lines (ForServer).
	Server string
	// Advertise, if not nil, gives the name clients know a tool or
	// prompt of the server by (a member of an aggregate: its prefixed
	// name), written in each record's advertised beside the server's own
	// name. Nil: clients know the server's own names.
	Advertise func(name string) string
	// Logger gets write failures. Nil means slog.Default().
	Logger *slog.Logger
	// WriteTimeout is how long a request waits for its line to be written
	// before the log counts as stalled. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// QueueBytes bounds the lines waiting for a stalled log; beyond it
	// records are lost, and counted (Lost). Zero means DefaultQueueBytes.
	QueueBytes int
}

// A Log is an audit log. Its methods are safe for concurrent use.
type Log struct {
	o    Options
	out  *output
	view bool // a ForServer view: Close leaves the file open
}

// ForServer is a view of l that writes to the same file, with the server
// called name in each record. Closing l closes the file; closing a view
// does nothing.
func (l *Log) ForServer(name string) *Log {
	o := l.o
	o.Server = name
	return &Log{o: o, out: l.out, view: true}
}

// Advertising is l with Options.Advertise set to advertise. It owns the
// file as l does (closing it closes the file if closing l would): it
// replaces l.
func (l *Log) Advertising(advertise func(name string) string) *Log {
	o := l.o
	o.Advertise = advertise
	return &Log{o: o, out: l.out, view: l.view}
}

// Open appends to the file at path (created 0600 if missing), or writes
// to standard output for "-".
func Open(path string, opts *Options) (*Log, error) {
	if path == "-" {
		return New(os.Stdout, opts), nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	l := New(f, opts)
	l.out.closer = f
	return l, nil
}

// New writes the log to w, one Write per line: a request's own, or, behind
// a write under way, a goroutine's (see output).
func New(w io.Writer, opts *Options) *Log {
	l := &Log{}
	if opts != nil {
		l.o = *opts
	}
	if l.o.Logger == nil {
		l.o.Logger = slog.Default()
	}
	l.out = newOutput(w, &l.o)
	return l
}

// Close waits for the lines queued (at most WriteTimeout once the writer
// is blocked) and closes the file Open opened. Closing a ForServer view
// does nothing.
func (l *Log) Close() error {
	if l.view {
		return nil
	}
	return l.out.close()
}

// Lost is how many records could not be written: the writes failed, or
// the writer was blocked and its queue full.
func (l *Log) Lost() int64 { return l.out.lost.Load() }

// write appends one record as one line, in one write.
func (l *Log) write(r *Record) {
	r.Server = l.o.Server
	bp := bufs.Get().(*[]byte)
	line := append(r.appendJSON((*bp)[:0]), '\n')
	l.out.put(line)
	if cap(line) <= maxPooled {
		*bp = line
		bufs.Put(bp)
	}
}

// principal puts in r who the client origin acts for (peer.Origin.Caller):
// its subject and client; nothing without one (no authentication, or a
// static token, which names neither).
func (l *Log) principal(origin peer.Origin, r *Record) {
	if origin == nil {
		return
	}
	if c := origin.Caller(); c != nil {
		r.Sub, r.ClientID = c.Subject, c.ClientID
	}
}

// Alert records a pin violation: what the server offered (kind is "tool",
// "prompt", "resource" or "resource template") and why it was dropped.
func (l *Log) Alert(session string, origin peer.Origin, kind, name, problem string) {
	r := &Record{Time: time.Now().UTC(), Event: "pin_violation", Session: session, Outcome: "dropped", DeniedBy: "pin: " + problem}
	l.principal(origin, r)
	switch kind {
	case "tool":
		r.Tool = name
	case "prompt":
		r.Prompt = name
	default:
		r.Resource = name
	}
	if l.o.Advertise != nil && (r.Tool != "" || r.Prompt != "") {
		r.Advertised = l.o.Advertise(name)
	}
	l.write(r)
}

// pending is a request waiting for its answer: what its line will say
// of it, without the members the answer sets, in about half a Record's
// size. It is built on the stack and copied where it waits (see
// inFlight): one allocation a request was a tenth of the guards' cost.
type pending struct {
	start         time.Time
	method        string
	name          string // the tool, prompt or resource: what says which
	sub, clientID string
	args          json.RawMessage // only with Options.Args
	argsSum       [sha256.Size]byte
	bytesIn       int
	what          named
	hasSum        bool
	fromServer    bool
	// quotedName[:quotedLen], if not empty, is the name of a tool or
	// prompt (name is then "") as its request wrote it: a JSON string
	// that needs no escaping, which is how a line writes it. Copied, not
	// decoded into a string: an allocation less a call.
	quotedLen  uint8
	quotedName [maxQuotedName]byte
	origin     peer.Origin // the client of a client's request in flight
	seq        uint64      // names a client's request in flight (inFlight.add)
}

// maxQuotedName bounds pending.quotedName: a longer name is decoded.
const maxQuotedName = 64

// named says what pending.name is.
type named uint8

const (
	namesNothing named = iota
	namesTool
	namesPrompt
	namesResource
)

// line sets in r, a zero Record, p's line, of the connection c, before
// its answer. (Through a pointer, and member by member: a Record returned,
// or set from a literal, is built aside and copied.)
func (p *pending) line(c *conn, r *Record) {
	r.Event, r.Session, r.quotedSession, r.From = "request", c.session, c.quotedSession, "client"
	r.Method, r.Sub, r.ClientID = p.method, p.sub, p.clientID
	r.Args, r.BytesIn, r.argsSum, r.hasSum = p.args, p.bytesIn, p.argsSum, p.hasSum
	if p.fromServer {
		r.From = "server"
	}
	switch p.what {
	case namesTool:
		r.Tool = p.name
	case namesPrompt:
		r.Prompt = p.name
	case namesResource:
		r.Resource = p.name
	}
	if p.quotedLen > 0 {
		r.quotedName, r.quotedLen, r.quotedWhat = p.quotedName, p.quotedLen, p.what
	}
	if c.l.o.Advertise != nil && (p.what == namesTool || p.what == namesPrompt) {
		name := p.name
		if p.quotedLen > 0 {
			// A plain JSON string (setName): its bytes between the quotes.
			name = string(p.quotedName[1 : p.quotedLen-1])
		}
		r.Advertised = c.l.o.Advertise(name)
	}
}

// conn is the state of one connection's interceptor.
type conn struct {
	l       *Log
	session string
	// quotedSession is session as a JSON string, written once (see quoted).
	quotedSession string
	mu            sync.Mutex
	clients       inFlight                // clients' requests
	server        map[jsonrpc.ID]*pending // the server's requests, by id
}

// inFlight holds the requests of a connection's clients until their
// answers. The first is kept in one, by value (a session's client usually
// waits for each answer, and a map's insertion and deletion were some 300
// instructions a call, the pending's allocation more); the
// others in byID, by id alone: those of one client, or of clients whose
// ids differ (hashing an interface, the client, for every request cost
// some 400 more). A request whose id another client's request in flight
// has (the callers a pool's child serves may all start at 1) is in
// others, by client and id. An id is in one or in byID, not both.
type inFlight struct {
	one    pending // if hasOne
	hasOne bool
	oneID  jsonrpc.ID
	byID   map[jsonrpc.ID]*pending
	others map[key]*pending
	seq    uint64 // the seq of the latest request added
}

type key struct {
	origin peer.Origin
	id     jsonrpc.ID
}

func newInFlight() inFlight {
	return inFlight{byID: map[jsonrpc.ID]*pending{}, others: map[key]*pending{}}
}

func (f *inFlight) len() int {
	n := len(f.byID) + len(f.others)
	if f.hasOne {
		n++
	}
	return n
}

// first returns the request in one or byID with the given id, or nil.
func (f *inFlight) first(id jsonrpc.ID) *pending {
	if f.hasOne && f.oneID == id {
		return &f.one
	}
	if len(f.byID) == 0 {
		return nil
	}
	return f.byID[id]
}

// add keeps a copy of p, the request id of origin, unless there are
// MaxPending already or origin has a request id in flight (which peer
// refuses); it reports whether it does. It sets p.seq, which names the
// copy kept (see take).
func (f *inFlight) add(origin peer.Origin, id jsonrpc.ID, p *pending) bool {
	if f.len() >= MaxPending {
		return false
	}
	first := f.first(id)
	if first != nil && first.origin == origin {
		return false
	}
	k := key{origin, id}
	if len(f.others) > 0 || first != nil {
		if _, dup := f.others[k]; dup {
			return false
		}
	}
	f.seq++
	p.origin, p.seq = origin, f.seq
	switch {
	case first != nil:
		f.others[k] = clone(p)
	case !f.hasOne:
		f.one, f.oneID, f.hasOne = *p, id, true
	default:
		f.byID[id] = clone(p)
	}
	return true
}

// clone is a copy of p on the heap.
func clone(p *pending) *pending {
	q := *p
	return &q
}

// take removes the request id of origin, into p if not nil, and reports
// whether there was one. With seq not 0, it removes only the request add
// gave that seq.
func (f *inFlight) take(origin peer.Origin, id jsonrpc.ID, seq uint64, p *pending) bool {
	if q := f.first(id); q != nil && q.origin == origin {
		if seq != 0 && q.seq != seq {
			return false
		}
		if p != nil {
			*p = *q
		}
		if q == &f.one {
			f.one, f.oneID, f.hasOne = pending{}, "", false // nothing kept alive
		} else {
			delete(f.byID, id)
		}
		return true
	}
	if len(f.others) == 0 {
		return false
	}
	k := key{origin, id}
	q := f.others[k]
	if q == nil || seq != 0 && q.seq != seq {
		return false
	}
	if p != nil {
		*p = *q
	}
	delete(f.others, k)
	return true
}

// Interceptor returns the interceptor of one connection, whose lines name
// session, and the function to call when the connection has ended: it
// writes the requests still waiting for an answer, with outcome
// "unanswered" and the reason given. Put the interceptor first in the
// chain: it then sees requests as their clients sent them, refusals by the
// interceptors after it (errors with a DeniedBy method, such as policy's
// and pin's), and answers as their clients get them.
func (l *Log) Interceptor(session string) (intercept peer.Interceptor, ended func(reason string)) {
	c := &conn{l: l, session: session, quotedSession: quoted(session), clients: newInFlight(), server: map[jsonrpc.ID]*pending{}}
	return c.intercept, c.ended
}

// ended writes the requests left unanswered.
func (c *conn) ended(reason string) {
	c.mu.Lock()
	var left []*pending
	if c.clients.hasOne {
		left = append(left, clone(&c.clients.one))
	}
	for _, p := range c.clients.byID {
		left = append(left, p)
	}
	for _, p := range c.clients.others {
		left = append(left, p)
	}
	for _, p := range c.server {
		left = append(left, p)
	}
	seq := c.clients.seq
	c.clients = newInFlight()
	c.clients.seq = seq // a seq names one request of the connection's life
	clear(c.server)
	c.mu.Unlock()
	slices.SortFunc(left, func(a, b *pending) int { return a.start.Compare(b.start) })
	for _, p := range left {
		var rec Record
		p.line(c, &rec)
		p.answered(&rec)
		rec.Outcome = "unanswered"
		if reason != "" {
			rec.Reason = reason
		}
		c.l.write(&rec)
	}
}

func (c *conn) intercept(next peer.Handler) peer.Handler {
	return func(m *peer.Message) error {
		if m.Own {
			return next(m) // the bridge's own requests are not a client's
		}
		switch {
		case m.Abandoned:
			// Written "unanswered", with the reason, when the connection
			// has ended (ended).
		case m.Env.Kind == jsonrpc.KindRequest && m.Dir == peer.ToChild:
			return c.clientRequest(next, m)
		case m.Env.Kind == jsonrpc.KindRequest: // from the server
			c.serverRequest(m)
		case m.Env.Kind == jsonrpc.KindResponse && m.Dir == peer.FromChild:
			return c.answer(next, m, true)
		case m.Env.Kind == jsonrpc.KindResponse: // a client answers the server
			return c.answer(next, m, false)
		case m.Dir == peer.ToChild && m.Method == "notifications/cancelled":
			c.cancelled(m)
		}
		return next(m)
	}
}

func (c *conn) clientRequest(next peer.Handler, m *peer.Message) error {
	// Tracked before it goes on: the server's answer may pass the chain,
	// on the connection's reader, before next returns. (In frames of
	// their own, not this one, which stays on the stack under the rest of
	// the chain.)
	seq, untracked := c.track(m)
	err := next(m)
	switch {
	case untracked != nil && err == nil:
		c.sent(untracked)
	case untracked != nil:
		c.failed(untracked, err)
	case err != nil:
		c.takeFailed(m, seq, err)
	}
	return err
}

// sent writes the line of a request that is not tracked, at once.
func (c *conn) sent(p *pending) {
	var rec Record
	p.line(c, &rec)
	rec.Time, rec.Outcome = time.Now().UTC(), "sent"
	c.l.write(&rec)
}

// takeFailed writes the line of the request m, tracked as seq, that the
// chain refused with err, unless the connection ended meanwhile (and
// wrote it).
func (c *conn) takeFailed(m *peer.Message, seq uint64, err error) {
	var p pending
	c.mu.Lock()
	mine := c.clients.take(m.Origin, m.Env.ID, seq, &p)
	c.mu.Unlock()
	if mine {
		c.failed(&p, err)
	}
}

// track records a client's request and keeps it in flight: it returns
// its seq; or, beyond MaxPending or for an id its client has in flight,
// the record (on the heap), which is not kept.
func (c *conn) track(m *peer.Message) (seq uint64, untracked *pending) {
	var p pending
	c.record(m, false, &p)
	c.mu.Lock()
	tracked := c.clients.add(m.Origin, m.Env.ID, &p)
	c.mu.Unlock()
	if !tracked {
		return 0, clone(&p)
	}
	return p.seq, nil
}

// failed writes the line of a request that the chain after the audit
// log refused (or that could not be sent) with err.
func (c *conn) failed(p *pending, err error) {
	var rec Record
	p.line(c, &rec)
	p.answered(&rec)
	rec.Outcome = "error"
	var denied interface{ DeniedBy() string }
	if errors.As(err, &denied) {
		rec.Outcome, rec.DeniedBy = "denied", denied.DeniedBy()
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		rec.ErrorCode = rpcErr.Code
	}
	c.l.write(&rec)
}

// serverRequest records a request of the server and tracks it until its
// answer, or writes it at once.
func (c *conn) serverRequest(m *peer.Message) {
	var p pending
	if c.record(m, true, &p); !c.trackServer(m.Env.ID, &p) {
		c.sent(&p)
	}
}

// trackServer keeps a copy of a request of the server until its answer,
// and reports whether it does: not beyond MaxPending.
func (c *conn) trackServer(id jsonrpc.ID, p *pending) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.server) >= MaxPending {
		return false
	}
	c.server[id] = clone(p)
	return true
}

// record describes a request in p, from now.
func (c *conn) record(m *peer.Message, fromServer bool, p *pending) {
	p.start, p.method, p.bytesIn, p.fromServer = time.Now(), m.Method, len(m.Data), fromServer
	if !fromServer {
		if caller := m.Caller(); caller != nil {
			p.sub, p.clientID = caller.Subject, caller.ClientID
		}
	}
	switch m.Method {
	case "tools/call":
		p.what = namesTool
		p.setName(m)
		c.arguments(m, p)
		return
	case "prompts/get":
		p.what = namesPrompt
		p.setName(m)
		c.arguments(m, p)
		return
	}
	params, _ := jsonrpc.Lookup(m.Data, "params")
	args := params
	switch m.Method {
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		p.what = namesResource
		if v, ok := jsonrpc.Lookup(params, "uri"); ok {
			p.name, _ = jsonrpc.StringValue(v)
		}
		args = nil // the URI is the argument, and is recorded
	}
	c.digest(p, args)
}

// setName sets the name of the tool or prompt m names in p: in
// quotedName if it is short and written as a line writes it, else in name.
func (p *pending) setName(m *peer.Message) {
	if at := m.Env.NameAt; !at.IsZero() {
		if raw := at.In(m.Data); len(raw) > 2 && len(raw) <= maxQuotedName && isPlain(raw[1:len(raw)-1]) {
			p.quotedLen = uint8(copy(p.quotedName[:], raw))
			return
		}
	}
	p.name = m.Env.Name(m.Data)
}

// digest sets the digest of a request's arguments (and with Options.Args
// their copy) in p.
func (c *conn) digest(p *pending, args []byte) {
	if len(args) == 0 {
		return
	}
	p.argsSum, p.hasSum = sha256.Sum256(args), true
	if c.l.o.Args {
		// A copy: the message's bytes may be reused once it has passed.
		p.args = json.RawMessage(bytes.Clone(args))
	}
}

// arguments sets the digest of params.arguments of a tools/call or
// prompts/get in p: where the envelope found them, without reading the
// message again.
func (c *conn) arguments(m *peer.Message, p *pending) {
	var args []byte
	if at := m.Env.ArgumentsAt; !at.IsZero() {
		args = at.In(m.Data)
	}
	c.digest(p, args)
}

// answer passes on m, the answer to a client's request (or, if not
// client, a client's answer to the server's), and writes its request's
// line.
//
// The request is taken out of those in flight before the answer goes on,
// so that its client may send the next request with the same id at once;
// and the line is written after the goroutine waiting for the answer has
// had a chance to run. The answer readies that goroutine, and on one P
// (the bridge's own GOMAXPROCS governor, internal/procs, gives it one P
// at one request at a time) it would run only once this one, the
// connection's reader, blocks: the line's encoding and its write(2) came
// first, on every call's critical path. Yielding lets the
// answer reach its client first; the line is written while the client
// reads it. A crash in between loses this line, which a crash during its
// write would lose too.
func (c *conn) answer(next peer.Handler, m *peer.Message, client bool) error {
	var p pending
	if !c.take(m, client, &p) {
		return next(m)
	}
	answered := time.Now()
	err := next(m)
	if client {
		runtime.Gosched()
	}
	c.finish(&p, m, client, answered)
	return err
}

// take removes the request that m answers from those in flight, into p,
// and reports whether there was one.
func (c *conn) take(m *peer.Message, client bool, p *pending) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if client {
		return c.clients.take(m.Origin, m.Env.ID, 0, p)
	}
	q := c.server[m.Env.ID]
	if q == nil {
		return false
	}
	*p = *q
	delete(c.server, m.Env.ID)
	return true
}

// finish writes the line of p, a request m answered at the time given.
func (c *conn) finish(p *pending, m *peer.Message, client bool, answered time.Time) {
	var rec Record
	p.line(c, &rec)
	p.answeredAt(&rec, answered)
	rec.BytesOut = len(m.Data)
	if !client {
		c.l.principal(m.Origin, &rec) // the client that answered
	}
	rec.Outcome = "ok"
	if m.Env.IsError {
		rec.Outcome = "error"
		if e, ok := jsonrpc.Lookup(m.Data, "error"); ok {
			if code, ok := jsonrpc.Lookup(e, "code"); ok {
				rec.ErrorCode, _ = strconv.Atoi(string(code))
			}
		}
	}
	c.l.write(&rec)
}

// cancelled writes the line of a request its client cancelled.
func (c *conn) cancelled(m *peer.Message) {
	if m.Env.RequestID == "" {
		return
	}
	c.mu.Lock()
	var p pending
	ok := c.clients.take(m.Origin, m.Env.RequestID, 0, &p)
	c.mu.Unlock()
	if !ok {
		return
	}
	var rec Record
	p.line(c, &rec)
	p.answered(&rec)
	rec.Outcome = "cancelled"
	c.l.write(&rec)
}

// answered sets the time of rec, p's line, and the duration
// since p's request: one reading of the clock.
func (p *pending) answered(rec *Record) { p.answeredAt(rec, time.Now()) }

// answeredAt sets the time of rec, p's line, to now, and the duration
// since p's request.
func (p *pending) answeredAt(rec *Record, now time.Time) {
	rec.Time, rec.DurationMS = now.UTC(), ms(now.Sub(p.start))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

package session

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// Errors of the event log.
var (
	// ErrEventsPurged means a resume point is older than what the log still
	// holds: the events after it were evicted to bound memory. Replaying from
	// there would silently skip messages, so the log refuses.
	ErrEventsPurged = errors.New("the events after this Last-Event-ID were evicted from the session's log")
	// ErrUnknownEvent means a resume point (Last-Event-ID) that names no
	// stream of the session, or a position that stream never reached.
	ErrUnknownEvent = errors.New("Last-Event-ID names no event of this session")
	// ErrStreamFinished means a resume point at the end of a stream that
	// is finished: there is nothing to replay and nothing will follow (a
	// cancelled request's stream, say). A client that resumes it again
	// would get nothing again, forever.
	ErrStreamFinished = errors.New("the stream after this Last-Event-ID is finished: nothing to replay")
	// ErrSuperseded ends a reader whose stream was taken over by a newer
	// connection (a resume of the same stream).
	ErrSuperseded = errors.New("the stream was resumed on another connection")
)

// Default bounds of a session's event log.
const (
	DefaultLogMaxEvents = 1024
	DefaultLogMaxBytes  = 8 << 20
)

// EventLog holds the SSE events of one session's streams, so that a broken
// connection can be resumed with Last-Event-ID without losing or repeating a
// message.
//
// Concurrency: all methods are safe for concurrent use. Each stream has at
// most one reader at a time; attaching a new reader to a stream (a resume)
// ends the previous one with ErrSuperseded.
//
// Memory: the log holds at most maxEvents events and maxBytes bytes of event
// data across all of its streams. An append that would exceed either bound
// first evicts the oldest events of the session, whatever their stream, but
// never the event being appended (so one message larger than maxBytes still
// passes through). A stream that is finished, holds no events and has no
// reader is freed, so the number of streams is bounded by the held events
// plus the open and read streams. A transient stream (NewTransientStream)
// is outside these bounds and the eviction order: its events wait only for
// the reader attached to it, and it is freed with them once it is finished
// and has no reader. The log belongs to one session: it holds
// no goroutine and is garbage once the session and its readers are gone.
//
// Eviction: a reader or a resume point whose next event was evicted gets
// ErrEventsPurged, never a partial replay; so does any position of a stream
// that was freed. A position the stream never reached, or a stream the log
// never opened, gets ErrUnknownEvent.
//
// A position in the log is a stream and a sequence number: seq counts the
// events of the stream from 1, and 0 names the position before its first
// event. The front end makes event IDs of them (the bridge: "<stream>_<seq>").
type EventLog struct {
	maxEvents int
	maxBytes  int64

	mu      sync.Mutex
	streams map[int64]*logStream
	lastID  int64
	events  int   // events held
	bytes   int64 // bytes of event data held
	// order is a FIFO of the stream of each held event, oldest first: it
	// says which stream's first event to evict next. A ring, so that an
	// append allocates nothing once the log has warmed up. A budget walk
	// evicts from its middle and leaves nil there (see reclaim).
	order ring

	// budget, if not nil, also bounds the event data of this log and
	// others (LogBudget). counted: the log is among the budget's logs and
	// its bytes are in the budget's total; released: the session ended
	// and the log left the budget for good (FinishAll).
	budget   *LogBudget
	counted  bool
	released bool

	walkGen uint64 // numbers reclaim's walks over order

	// ended remembers the ends of the last streams freed after every
	// event was handed out and none evicted (a stream that finished
	// holding nothing, such as a cancelled request's): a resume from such
	// an end is
	// ErrStreamFinished, not ErrEventsPurged (nothing was lost). Bounded:
	// older ones are forgotten, and a resume there is ErrEventsPurged.
	ended     [endedStreams]streamEnd
	endedNext int

	// onEvict, if set, is told the size of each evicted event (under mu),
	// by the log's own bounds or a budget walk, for metrics
	// (Observer.EventEvicted).
	onEvict func(bytes int)
	// onOverBudget, if set, ends the log's session: its budget found it
	// holding the most undelivered events when they alone exceeded the
	// budget (LogBudget). Called under mu, with the bytes held: it must
	// not wait for the session (Close runs in its own goroutine).
	onOverBudget func(held int64)
}

type logStream struct {
	id     int64
	first  uint64   // seq of events[0]
	events [][]byte // held events, seq first, first+1, ...: a window of buf
	// buf is the array events lives in. Eviction moves the window's start
	// forward; push slides the window back to the front instead of
	// reallocating, so a stream in its steady state appends without
	// allocating.
	buf [][]byte
	// one is buf's first array, in the stream itself: most streams are a
	// POST's and hold one event, its answer, for as long as the log keeps
	// it, so a separate array would be one more object per held answer to
	// allocate and for the collector to scan.
	one  [1][]byte
	next uint64 // seq the next appended event gets
	done bool   // no event will be appended any more
	// sent is the highest seq handed to a reader: events after it never
	// reached any connection.
	sent uint64
	// gen counts attachments; a reader whose gen is stale was superseded.
	gen       uint64
	attached  bool
	transient bool // see NewTransientStream
	adopted   bool // Adopt moved events of it to another stream
	evicted   bool // an event of it was evicted
	// blocked is the walkGen of the reclaim walk that found this stream's
	// oldest held event live: its later events are live too.
	blocked uint64
	// wake is closed (and set to nil) on append or finish. A waiting reader
	// creates it, so an append with no reader waiting allocates nothing.
	wake chan struct{}
}

// endedStreams bounds EventLog.ended.
const endedStreams = 64

// streamEnd is a freed stream and the seq its next event would have had.
type streamEnd struct {
	id   int64
	next uint64
}

// NewEventLog returns a log bounded by maxEvents events and maxBytes bytes.
// Zero values mean DefaultLogMaxEvents and DefaultLogMaxBytes.
func NewEventLog(maxEvents int, maxBytes int64) *EventLog {
	if maxEvents <= 0 {
		maxEvents = DefaultLogMaxEvents
	}
	if maxBytes <= 0 {
		maxBytes = DefaultLogMaxBytes
	}
	return &EventLog{maxEvents: maxEvents, maxBytes: maxBytes, streams: make(map[int64]*logStream)}
}

// NewStream opens a stream and returns its ID.
func (l *EventLog) NewStream() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.newStreamLocked().id
}

// NewTransientStream opens a stream whose events are handed to its reader
// and never kept for a resume: they are not counted against the log's
// bounds and are dropped, with the stream, once it is finished and has no
// reader. It serves a POST answered as one JSON body: no event ID reaches
// that client, so nothing could resume the stream, and keeping its answers
// would only cost memory and garbage-collection work.
func (l *EventLog) NewTransientStream() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.newStreamLocked()
	s.transient = true
	return s.id
}

// open opens a stream and attaches r to it, as NewStream or
// NewTransientStream and then attach would, in one hold of the lock: a
// POST's stream, read by the POST's own connection.
func (l *EventLog) open(r *Reader, transient bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.newStreamLocked()
	s.transient = transient
	s.gen++
	s.attached = true
	*r = Reader{l: l, s: s, gen: s.gen}
	return s.id
}

func (l *EventLog) newStreamLocked() *logStream {
	l.lastID++
	s := &logStream{id: l.lastID, first: 1, next: 1}
	s.buf = s.one[:]
	s.events = s.buf[:0]
	l.streams[s.id] = s
	return s
}

// Append adds an event to a stream. It reports false if the stream is
// finished or unknown (the event is then dropped by the caller's choice).
func (l *EventLog) Append(stream int64, data []byte) bool {
	return l.appendFinish(stream, data, false)
}

// appendFinish is Append that, with finish, also finishes the stream in
// the same hold of the lock (Finish): the answer to a POST's last request
// and the end of its stream reach its reader together, which then writes
// both at once, and the log is looked up and locked once, not twice.
func (l *EventLog) appendFinish(stream int64, data []byte, finish bool) bool {
	l.mu.Lock()
	s := l.streams[stream]
	if s == nil || s.done {
		l.mu.Unlock()
		return false
	}
	over := l.appendLocked(s, data)
	if finish {
		l.finishLocked(s)
	}
	l.mu.Unlock()
	if over {
		// Without l.mu: the walk takes the logs' locks one at a time.
		l.budget.reclaim()
	}
	return true
}

// appendLocked appends data to s and reports whether the budget is exceeded.
func (l *EventLog) appendLocked(s *logStream, data []byte) (over bool) {
	if s.transient {
		s.push(data)
		s.next++
		s.wakeLocked()
		return false
	}
	for l.events > 0 && (l.events+1 > l.maxEvents || l.bytes+int64(len(data)) > l.maxBytes) {
		l.evictLocked()
	}
	s.push(data)
	s.next++
	l.events++
	l.bytes += int64(len(data))
	l.order.push(s)
	s.wakeLocked()
	if l.budget != nil && !l.released {
		if !l.counted {
			l.counted = true
			l.budget.register(l)
		}
		over = l.budget.add(int64(len(data)))
	}
	return over
}

// push appends data to s.events, keeping events a window of buf. The
// array starts as s.one (an array of eight slots was 168 of the
// 350 bytes a held answer cost besides its own).
func (s *logStream) push(data []byte) {
	if n := len(s.events); n == cap(s.events) { // the window reached buf's end
		if 2*n > len(s.buf) {
			nb := make([][]byte, 2*n)
			copy(nb, s.events)
			s.buf = nb
			s.one[0] = nil // no stale reference: one is unused from now on
		} else {
			copy(s.buf, s.events)
			clear(s.buf[n:]) // no stale references to evicted events
		}
		s.events = s.buf[:n]
	}
	s.events = append(s.events, data)
}

// maxIdleBuf is the largest array an empty stream keeps for its next events.
const maxIdleBuf = 64

func (s *logStream) wakeLocked() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// evictLocked drops the oldest event of the session.
func (l *EventLog) evictLocked() {
	s := l.order.pop()
	for s == nil { // evicted by a budget walk already
		s = l.order.pop()
	}
	l.dropFirstLocked(s)
}

// dropFirstLocked evicts the oldest held event of s and returns its size.
func (l *EventLog) dropFirstLocked(s *logStream) int64 {
	data := s.events[0]
	s.events[0] = nil
	s.events = s.events[1:]
	if len(s.events) == 0 {
		// Start the window over at the front, and let a stream that once
		// held many events give their array back.
		if len(s.buf) > maxIdleBuf {
			s.buf = s.one[:]
		}
		s.events = s.buf[:0]
	}
	s.first++
	s.evicted = true
	l.events--
	l.bytes -= int64(len(data))
	if l.counted {
		l.budget.total.Add(-int64(len(data)))
	}
	l.maybeFreeLocked(s)
	if l.onEvict != nil {
		l.onEvict(len(data))
	}
	return int64(len(data))
}

// heldBytes is the event data the log holds, transient streams aside.
func (l *EventLog) heldBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// reclaim serves a budget walk: it evicts the oldest replayable events of
// the log (those a reader was handed: seq <= sent) until it holds at most
// floor bytes or has freed need bytes, and at least one if it can. Live
// events stay, wherever they are in the order: the walk skips them, and
// all later events of their stream. It returns the bytes the log still
// holds, how many events it evicted, and whether replayable events remain.
func (l *EventLog) reclaim(floor, need int64) (size int64, n int, more bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return l.bytes, 0, false
	}
	l.walkGen++
	gen := l.walkGen
	o := &l.order
	freed := int64(0)
	for i := 0; i < o.n; i++ {
		j := (o.head + i) % len(o.buf)
		s := o.buf[j]
		if s == nil || s.blocked == gen {
			continue
		}
		// In order, the first entry of s met is its oldest held event.
		if s.first > s.sent {
			s.blocked = gen // live, and so is the rest of s
			continue
		}
		if n > 0 && (l.bytes <= floor || freed >= need) {
			more = true // a replayable event is left
			break
		}
		o.buf[j] = nil
		freed += l.dropFirstLocked(s)
		n++
	}
	for o.n > 0 && o.buf[o.head] == nil {
		o.pop()
	}
	return l.bytes, n, more
}

// endForBudget takes the log out of its budget and ends its session, if
// it has one (onOverBudget) and is still counted. Its events stay for the
// session's end (the errors of its requests in flight are appended after
// them) but no longer count: the session is ending.
func (l *EventLog) endForBudget() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.onOverBudget == nil || !l.counted || l.released {
		return false
	}
	l.budget.total.Add(-l.bytes)
	l.budget.unregister(l)
	l.counted = false
	l.released = true
	l.onOverBudget(l.bytes)
	return true
}

func (l *EventLog) maybeFreeLocked(s *logStream) {
	if s.done && !s.attached && (len(s.events) == 0 || s.transient) {
		delete(l.streams, s.id)
		if !s.transient && !s.adopted && !s.evicted && s.sent+1 >= s.next {
			l.ended[l.endedNext] = streamEnd{s.id, s.next}
			l.endedNext = (l.endedNext + 1) % endedStreams
		}
	}
}

// Finish marks a stream complete: its reader gets io.EOF after the held
// events. Finishing twice is harmless.
func (l *EventLog) Finish(stream int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.streams[stream]; s != nil && !s.done {
		l.finishLocked(s)
	}
}

// finishLocked marks s finished, wakes its reader and frees it if no
// reader holds it and it keeps nothing for a resume.
func (l *EventLog) finishLocked(s *logStream) {
	s.done = true
	s.wakeLocked()
	l.maybeFreeLocked(s)
}

// FinishAll finishes every stream (the session ended). The log leaves its
// budget: only the readers still attached read the events it holds, and
// no resume can reach it any more.
func (l *EventLog) FinishAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counted {
		l.budget.total.Add(-l.bytes)
		l.budget.unregister(l)
		l.counted = false
	}
	l.released = true
	for _, s := range l.streams {
		if !s.done {
			l.finishLocked(s)
		}
	}
}

// StreamState describes a stream of the log.
type StreamState struct {
	Exists       bool // the stream is in the log
	Open         bool // events can still be appended
	Attached     bool // a reader holds it now
	EverAttached bool // a reader held it at some point
}

// State describes a stream.
func (l *EventLog) State(stream int64) StreamState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.streams[stream]
	if s == nil {
		return StreamState{}
	}
	return StreamState{Exists: true, Open: !s.done, Attached: s.attached, EverAttached: s.gen > 0}
}

// Adopt finishes stream old and moves the events no reader was ever handed
// into a new stream, whose ID it returns. It serves a client that opens a
// fresh standalone stream instead of resuming the old one: messages that
// never reached a connection must not be stranded on a stream nobody will
// resume (DESIGN: "never the same message on two streams", and none lost).
func (l *EventLog) Adopt(old int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.newStreamLocked()
	o := l.streams[old]
	if o == nil {
		return n.id
	}
	k := 0
	if o.sent+1 >= o.first {
		k = int(o.next - (o.sent + 1))
	} else {
		k = len(o.events)
	}
	if k > 0 && !o.transient { // a transient stream has no place in the order
		moved := o.events[len(o.events)-k:]
		for _, e := range moved {
			n.push(e)
		}
		n.next += uint64(k)
		o.adopted = true
		clear(moved)
		o.events = o.events[:len(o.events)-k]
		o.next -= uint64(k)
		// The moved events are the newest k of stream o: re-point the last
		// k entries of o in the eviction order.
		for i, left := l.order.n-1, k; i >= 0 && left > 0; i-- {
			j := (l.order.head + i) % len(l.order.buf)
			if l.order.buf[j] == o {
				l.order.buf[j] = n
				left--
			}
		}
	}
	o.done = true
	o.wakeLocked()
	l.maybeFreeLocked(o)
	return n.id
}

// A Reader reads one stream's events in order, waiting for live ones.
// It is used by one goroutine.
type Reader struct {
	l   *EventLog
	s   *logStream
	gen uint64
	pos uint64 // seq of the last event returned
}

// Attach starts reading a stream after position after (0: from its start),
// superseding any reader attached before. It fails with ErrUnknownEvent for
// a stream the log never opened or a position the stream never reached, and
// with ErrEventsPurged when the event after that position was evicted or the
// stream itself was freed, and with ErrStreamFinished when the stream was
// freed after every event was handed out and the position is its end.
//
// A transient stream is never attached this way: its ID never reached a
// client, so a resume naming it gets ErrUnknownEvent (or ErrEventsPurged
// once it is freed), and cannot take it over from its reader.
func (l *EventLog) Attach(stream int64, after uint64) (*Reader, error) {
	r := new(Reader)
	if err := l.attach(r, stream, after, false); err != nil {
		return nil, err
	}
	return r, nil
}

// attach is Attach into a Reader the caller allocated; with transient, a
// transient stream may be attached (by the POST that opened it).
func (l *EventLog) attach(r *Reader, stream int64, after uint64, transient bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.streams[stream]
	if s == nil {
		for _, e := range l.ended {
			if e.id == stream && stream != 0 && after+1 >= e.next {
				return ErrStreamFinished
			}
		}
		if stream > 0 && stream <= l.lastID {
			// The stream existed and was freed: it finished holding no
			// event (evicted, moved by Adopt, or none ever appended). Its
			// end position is forgotten with it, so whatever followed this
			// resume point is gone; refusing is the only answer that cannot
			// be a silent partial replay.
			return ErrEventsPurged
		}
		return ErrUnknownEvent
	}
	if after >= s.next || (s.transient && !transient) {
		return ErrUnknownEvent
	}
	if after+1 < s.first {
		return ErrEventsPurged
	}
	s.gen++
	s.attached = true
	s.wakeLocked() // a superseded reader must notice
	*r = Reader{l: l, s: s, gen: s.gen, pos: after}
	return nil
}

// Stream is the ID of the stream being read.
func (r *Reader) Stream() int64 { return r.s.id }

// Next returns the next event: its position in its stream (counting from
// 1) and its data. It waits for one if none is held yet. It returns io.EOF once the stream is finished and fully read,
// ErrSuperseded if another reader took the stream over, ErrEventsPurged if
// the reader fell so far behind that its next event was evicted, or the
// context's error. Those states come before the context: with a context
// that is already done, Next is a poll that never waits and allocates
// nothing.
func (r *Reader) Next(ctx context.Context) (seq uint64, data []byte, err error) {
	return r.NextBefore(ctx, nil)
}

// ErrNotYet is NextBefore's answer when expire fires before an event.
var ErrNotYet = errors.New("no event yet")

// NextBefore is Next that also stops waiting, with ErrNotYet, when expire
// delivers (a timer's channel). It spares a caller that waits a little on
// every request a context of its own (context.WithTimeout allocates and
// registers with its parent each time).
func (r *Reader) NextBefore(ctx context.Context, expire <-chan time.Time) (seq uint64, data []byte, err error) {
	l, s := r.l, r.s
	for {
		l.mu.Lock()
		switch {
		case r.gen != s.gen:
			l.mu.Unlock()
			return 0, nil, ErrSuperseded
		case r.pos+1 < s.first:
			l.mu.Unlock()
			return 0, nil, ErrEventsPurged
		case r.pos+1 < s.next:
			r.pos++
			data = s.events[r.pos-s.first]
			if r.pos > s.sent {
				s.sent = r.pos
			}
			l.mu.Unlock()
			return r.pos, data, nil
		case s.done:
			l.mu.Unlock()
			return 0, nil, io.EOF
		}
		if err := ctx.Err(); err != nil {
			// Nothing to return and the caller will not wait (a done
			// context asks "is an event ready?"): no wake channel needed.
			l.mu.Unlock()
			return 0, nil, err
		}
		if s.wake == nil {
			s.wake = make(chan struct{})
		}
		wake := s.wake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-expire:
			return 0, nil, ErrNotYet
		}
	}
}

// Detach releases the stream; it stays in the log for a later resume.
func (r *Reader) Detach() {
	l, s := r.l, r.s
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.gen == s.gen {
		s.attached = false
		l.maybeFreeLocked(s)
	}
}

// AtEnd reports whether the stream is finished and the reader has read
// every event of it.
func (r *Reader) AtEnd() bool {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.s.done && r.pos+1 >= r.s.next
}

// Pos is the position of the last event returned: 0 before the first one
// (where a priming event stands).
func (r *Reader) Pos() uint64 { return r.pos }

// Stats reports what the log holds, for tests and metrics.
func (l *EventLog) Stats() (events int, bytes int64, streams int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.events, l.bytes, len(l.streams)
}

// ring is a growable FIFO of streams. It may hold nil entries, where a
// budget walk evicted an event out of order.
type ring struct {
	buf  []*logStream
	head int
	n    int
}

func (r *ring) push(s *logStream) {
	if r.n == len(r.buf) {
		// Full: copy it over, without the holes a budget walk left.
		kept := 0
		for i := 0; i < r.n; i++ {
			if r.buf[(r.head+i)%len(r.buf)] != nil {
				kept++
			}
		}
		nb := make([]*logStream, max(16, 2*kept))
		k := 0
		for i := 0; i < r.n; i++ {
			if e := r.buf[(r.head+i)%len(r.buf)]; e != nil {
				nb[k] = e
				k++
			}
		}
		r.buf, r.head, r.n = nb, 0, k
	}
	r.buf[(r.head+r.n)%len(r.buf)] = s
	r.n++
}

func (r *ring) pop() *logStream {
	s := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return s
}

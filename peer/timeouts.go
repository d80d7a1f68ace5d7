package peer

import (
	"sync"
	"time"
)

// Timeouts is one timer for many deadlines of the same length, such as the
// request timeout of every call a pool serves, or the keep-alive of every
// stateless response. A runtime timer per call costs an allocation and
// two updates of the runtime's timer heap (arm, stop) on every request,
// and all but a few calls end long before their timeout: here a call's
// deadline is a link in a list, and the one timer fires only when the
// oldest deadline passes.
//
// All deadlines have the same length, so the list, kept in the order the
// deadlines were set, is in the order they pass: Start and Restart put a
// deadline at the tail, Stop unlinks it, and the timer is armed for the
// head's. A timer armed for a deadline that was stopped since fires early,
// finds nothing due and is armed for the head's again; so every deadline
// fires when it passes (as a timer of its own would), never before.
//
// An Expirer's Expire runs on the timer's goroutine, one after another: it
// must not block (wake the waiter, or start a goroutine).
type Timeouts struct {
	d time.Duration

	mu         sync.Mutex
	head, tail *Timeout
	t          *time.Timer
	armedAt    time.Time // when t fires; zero: not armed
	closed     bool
	due        []Expirer // expire's, reused
}

// A Timeout is one deadline of a Timeouts. Its zero value is stopped; it
// is reused once stopped or expired.
type Timeout struct {
	prev, next *Timeout
	at         time.Time
	on         bool // in the list
	e          Expirer
}

// An Expirer is told that its deadline passed.
type Expirer interface{ Expire() }

// NewTimeouts returns a Timeouts whose deadlines are d after they are set.
// d must be positive.
func NewTimeouts(d time.Duration) *Timeouts {
	if d <= 0 {
		panic("peer: NewTimeouts of a duration that is not positive")
	}
	return &Timeouts{d: d}
}

// Start sets to's deadline d from now: unless stopped first, e.Expire is
// called once it passes. to must be stopped or expired.
func (ts *Timeouts) Start(to *Timeout, e Expirer) {
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return
	}
	to.e = e
	ts.pushLocked(to, time.Now())
	ts.mu.Unlock()
}

// Restart sets a running deadline d from now again (progress restarts a
// request's timeout). It reports false, and does nothing, if to is not
// running (it expired, or was stopped).
func (ts *Timeouts) Restart(to *Timeout) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !to.on {
		return false
	}
	ts.unlinkLocked(to)
	ts.pushLocked(to, time.Now())
	return true
}

// Stop stops to. It reports whether to was running: false means it
// expired (its Expire has run or is running) or was stopped already.
func (ts *Timeouts) Stop(to *Timeout) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !to.on {
		return false
	}
	ts.unlinkLocked(to)
	to.e = nil
	return true
}

// Close stops the timer; deadlines running or started later never expire.
func (ts *Timeouts) Close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	for to := ts.head; to != nil; {
		next := to.next
		to.prev, to.next, to.on, to.e = nil, nil, false, nil
		to = next
	}
	ts.head, ts.tail = nil, nil
	if ts.t != nil {
		ts.t.Stop()
	}
}

func (ts *Timeouts) pushLocked(to *Timeout, now time.Time) {
	to.at = now.Add(ts.d)
	to.on = true
	to.next = nil
	to.prev = ts.tail
	if ts.tail != nil {
		ts.tail.next = to
	} else {
		ts.head = to
	}
	ts.tail = to
	if ts.armedAt.IsZero() {
		// Armed for no deadline (the list was empty when it last fired):
		// arm it for this one, the only one.
		ts.armLocked(to.at, now)
	}
}

func (ts *Timeouts) unlinkLocked(to *Timeout) {
	if to.prev != nil {
		to.prev.next = to.next
	} else {
		ts.head = to.next
	}
	if to.next != nil {
		to.next.prev = to.prev
	} else {
		ts.tail = to.prev
	}
	to.prev, to.next, to.on = nil, nil, false
}

func (ts *Timeouts) armLocked(at, now time.Time) {
	ts.armedAt = at
	if ts.t == nil {
		ts.t = time.AfterFunc(at.Sub(now), ts.expire)
		return
	}
	ts.t.Reset(at.Sub(now))
}

// expire runs on the timer: it expires every deadline that passed, and
// arms the timer for the next one.
func (ts *Timeouts) expire() {
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return
	}
	now := time.Now()
	due := ts.due[:0]
	for ts.head != nil && !ts.head.at.After(now) {
		to := ts.head
		ts.unlinkLocked(to)
		due = append(due, to.e)
		to.e = nil // a Timeout holds its Expirer only while it runs
	}
	ts.armedAt = time.Time{}
	if ts.head != nil {
		ts.armLocked(ts.head.at, now)
	}
	ts.due = nil // an expire that overlaps this one takes its own
	ts.mu.Unlock()
	for i, e := range due {
		due[i] = nil
		e.Expire()
	}
	ts.mu.Lock()
	if ts.due == nil {
		ts.due = due[:0]
	}
	ts.mu.Unlock()
}

package session

import (
	"cmp"
	"container/heap"
	"sync"
	"sync/atomic"
)

// DefaultLogMaxTotalBytes is the default process-wide budget of event data
// that all sessions' logs may hold for resumption (1,000 sessions
// at DefaultLogMaxBytes each could otherwise hold 8 GiB).
const DefaultLogMaxTotalBytes = 256 << 20

// LogBudget bounds the event data that a set of event logs (a Registry's)
// hold together.
//
// Which events it takes: only replayable ones, that is events already
// handed to a reader (a connection), kept so that a connection broken
// mid-write can be resumed with Last-Event-ID. An event no reader has been
// handed yet (an answer whose POST connection broke first, a message waiting
// for the next GET stream) is live: the budget never drops it, since no
// client has seen it and a resume is its only way out. When the budget is
// exceeded, the largest logs lose their oldest replayable events first,
// until the total is back under the budget (a walk evicts down to 15/16 of
// it, so that walks are rare). A resume from an evicted event gets
// ErrEventsPurged, as with a log's own bounds.
//
// Undelivered events (a client that posts calls and drops each
// connection leaves every answer live, and 100 sessions held 700 MiB under
// a 32 MiB budget): when a walk leaves live events alone over the budget,
// the logs holding the most are ended, largest first, until the rest is
// back under it: each such log leaves the budget at once and its session
// ends with ErrLogBudget (its client's requests then get 404, and the
// warning names the session), never a silent loss. Logs with no session
// (made by NewEventLog here, without one) are never ended.
//
// Memory: the event data held by all logs (transient streams aside, whose
// events wait only for their reader) is at most the larger of the budget
// and L + budget/16, plus one append's data, where L is what was live at the
// last walk. Live data is bounded by each log's own maxBytes times the
// number of sessions; with readers attached it stays near zero. (A walk
// that finds too little to evict leaves the total over the budget; the next
// walk then waits for another sixteenth of it to be appended, so that
// appends do not each walk in vain.) The event data is what is counted;
// each held event costs about 100 bytes more of bookkeeping.
//
// Cost: an append adds its size to one atomic counter and compares it with
// another; only an append that crosses the budget walks the logs, and one
// walk at a time (others go on without waiting).
//
// All methods are safe for concurrent use.
type LogBudget struct {
	max int64
	low int64 // a walk evicts down to this

	total atomic.Int64 // bytes of event data held by the logs, transient streams aside
	// next is the total above which an append starts a walk: max, or more
	// after a walk that found too few replayable events (live events alone
	// exceed the budget), so that appends do not each walk in vain.
	next    atomic.Int64
	evicted atomic.Int64 // events evicted by the budget
	ended   atomic.Int64 // logs (sessions) ended for their undelivered events

	walking sync.Mutex // held by the one walk under way (TryLock)

	mu   sync.Mutex
	logs map[*EventLog]struct{} // the logs holding counted events
}

// NewLogBudget returns a budget of maxBytes bytes of event data. Zero means
// DefaultLogMaxTotalBytes; a negative value means no budget (nil), which
// NewEventLog accepts.
func NewLogBudget(maxBytes int64) *LogBudget {
	if maxBytes < 0 {
		return nil
	}
	if maxBytes == 0 {
		maxBytes = DefaultLogMaxTotalBytes
	}
	b := &LogBudget{max: maxBytes, low: maxBytes - maxBytes/16, logs: make(map[*EventLog]struct{})}
	b.next.Store(maxBytes)
	return b
}

// NewEventLog returns an event log bounded by maxEvents and maxBytes, as
// the package's NewEventLog, whose events also count against b. A nil b
// is no budget.
func (b *LogBudget) NewEventLog(maxEvents int, maxBytes int64) *EventLog {
	l := NewEventLog(maxEvents, maxBytes)
	l.budget = b
	return l
}

// LogBudgetStats is what a budget's logs hold.
type LogBudgetStats struct {
	Bytes   int64 // event data held, transient streams aside
	Logs    int   // logs holding counted events (sessions not yet ended)
	Evicted int64 // events the budget has evicted so far
	Ended   int64 // sessions ended so far because their undelivered events exceeded it
}

// Stats reports what the logs hold, for tests and metrics.
func (b *LogBudget) Stats() LogBudgetStats {
	b.mu.Lock()
	n := len(b.logs)
	b.mu.Unlock()
	return LogBudgetStats{Bytes: b.total.Load(), Logs: n, Evicted: b.evicted.Load(), Ended: b.ended.Load()}
}

// add counts n more bytes and reports whether a walk is due.
func (b *LogBudget) add(n int64) bool {
	return b.total.Add(n) > b.next.Load()
}

func (b *LogBudget) register(l *EventLog) {
	b.mu.Lock()
	b.logs[l] = struct{}{}
	b.mu.Unlock()
}

func (b *LogBudget) unregister(l *EventLog) {
	b.mu.Lock()
	delete(b.logs, l)
	b.mu.Unlock()
}

// reclaim walks the logs if no other walk is under way. It must be called
// without any log's lock held: it takes them one at a time.
func (b *LogBudget) reclaim() {
	if !b.walking.TryLock() {
		return // the walk under way sees this append's bytes too
	}
	defer b.walking.Unlock()
	if b.total.Load() <= b.max {
		return
	}
	b.walk()
	if b.total.Load() > b.max {
		b.endLargest()
	}
	if t := b.total.Load(); t > b.max {
		// Live events alone exceed the budget: walk again only after
		// another sixteenth of it, or once a walk got under it.
		b.next.Store(t + b.max/16)
	} else {
		b.next.Store(b.max)
	}
}

// walk evicts the oldest replayable events of the largest logs until the
// total is at most low or nothing replayable is left.
func (b *LogBudget) walk() {
	b.mu.Lock()
	h := make(logHeap, 0, len(b.logs))
	for l := range b.logs {
		h = append(h, sizedLog{l: l})
	}
	b.mu.Unlock()
	for i := range h {
		h[i].size = h[i].l.heldBytes()
	}
	heap.Init(&h)
	for len(h) > 0 {
		need := b.total.Load() - b.low
		if need <= 0 {
			return
		}
		top := heap.Pop(&h).(sizedLog)
		// Down to the next largest log's size, so that the largest logs
		// shrink first, and by no more than is needed.
		floor := int64(0)
		if len(h) > 0 {
			floor = h[0].size
		}
		size, n, more := top.l.reclaim(floor, need)
		b.evicted.Add(int64(n))
		if more {
			heap.Push(&h, sizedLog{l: top.l, size: size})
		}
	}
}

// endLargest ends the logs holding the most (live) events, largest first,
// until the total is at most low. It runs after a walk that could not get
// under the budget: what is left is live.
func (b *LogBudget) endLargest() {
	b.mu.Lock()
	h := make(logHeap, 0, len(b.logs))
	for l := range b.logs {
		h = append(h, sizedLog{l: l})
	}
	b.mu.Unlock()
	for i := range h {
		h[i].size = h[i].l.heldBytes()
	}
	heap.Init(&h)
	for len(h) > 0 && b.total.Load() > b.low {
		top := heap.Pop(&h).(sizedLog)
		if top.l.endForBudget() {
			b.ended.Add(1)
		}
	}
}

type sizedLog struct {
	l    *EventLog
	size int64
}

// logHeap is a max-heap of logs by size.
type logHeap []sizedLog

func (h logHeap) Len() int           { return len(h) }
func (h logHeap) Less(i, j int) bool { return cmp.Compare(h[i].size, h[j].size) > 0 }
func (h logHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *logHeap) Push(x any)        { *h = append(*h, x.(sizedLog)) }
func (h *logHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

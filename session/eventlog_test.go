package session

// Tests of the event log's contract: event IDs, order, bounds and
// eviction, the two resume errors, superseding readers, Adopt, the freeing
// of finished streams, and concurrent use under -race.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// checkInvariants walks the log's internals and fails if its counters, its
// eviction order and its streams disagree, or if a bound is exceeded while
// more than one event is held (one event larger than the byte bound passes
// through alone).
func checkInvariants(t testing.TB, l *EventLog) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	perStream := map[*logStream]int{}
	for i := 0; i < l.order.n; i++ {
		if s := l.order.buf[(l.order.head+i)%len(l.order.buf)]; s != nil { // nil: evicted by a budget walk
			perStream[s]++
		}
	}
	events, bytes := 0, int64(0)
	for id, s := range l.streams {
		if s.id != id {
			t.Fatalf("stream %d is filed under %d", s.id, id)
		}
		if s.transient {
			if perStream[s] != 0 {
				t.Fatalf("transient stream %d has %d entries in the eviction order", id, perStream[s])
			}
			if s.done && !s.attached {
				t.Fatalf("transient stream %d is finished and unread but was not freed", id)
			}
		} else if got := perStream[s]; got != len(s.events) {
			t.Fatalf("stream %d holds %d events but has %d entries in the eviction order", id, len(s.events), got)
		}
		delete(perStream, s)
		if s.first+uint64(len(s.events)) != s.next {
			t.Fatalf("stream %d: first %d + %d held != next %d", id, s.first, len(s.events), s.next)
		}
		if s.done && len(s.events) == 0 && !s.attached {
			t.Fatalf("stream %d is finished, empty and unread but was not freed", id)
		}
		// events is a window of buf, and buf is at most twice the bound:
		// the memory of a stream's index stays bounded as events come and go.
		if len(s.events) > 0 && (cap(s.events) > len(s.buf) || &s.events[0] != &s.buf[len(s.buf)-cap(s.events)]) {
			t.Fatalf("stream %d: its events are not a window of its array", id)
		}
		// A stream that outgrew its inline array keeps no reference there.
		if &s.buf[0] != &s.one[0] && s.one[0] != nil {
			t.Fatalf("stream %d: its unused inline slot still references an event", id)
		}
		if len(s.buf) > max(1, 2*l.maxEvents) && !s.transient {
			t.Fatalf("stream %d: an array of %d slots for a bound of %d events", id, len(s.buf), l.maxEvents)
		}
		if s.transient {
			continue // outside the log's bounds
		}
		events += len(s.events)
		for _, e := range s.events {
			bytes += int64(len(e))
		}
	}
	for s, n := range perStream {
		t.Fatalf("%d entries of the eviction order point to stream %d, which the log no longer holds", n, s.id)
	}
	if events != l.events || bytes != l.bytes {
		t.Fatalf("counters say %d events / %d bytes, streams hold %d / %d", l.events, l.bytes, events, bytes)
	}
	if l.events > l.maxEvents || (l.events > 1 && l.bytes > l.maxBytes) {
		t.Fatalf("log holds %d events / %d bytes, bounds are %d / %d", l.events, l.bytes, l.maxEvents, l.maxBytes)
	}
}

// EventID names a position as the bridge's event IDs do, so that these
// tests can say which event they expect in one string.
func EventID(stream int64, seq uint64) string {
	return strconv.FormatInt(stream, 10) + "_" + strconv.FormatUint(seq, 10)
}

// nextID is r.Next with the event's position as an EventID.
func nextID(r *Reader, ctx context.Context) (id string, data []byte, err error) {
	seq, data, err := r.Next(ctx)
	if err != nil {
		return "", nil, err
	}
	return EventID(r.Stream(), seq), data, nil
}

// posID is r.Pos as an EventID.
func posID(r *Reader) string { return EventID(r.Stream(), r.Pos()) }

// readAll reads a stream to its end and returns the IDs and data read, and
// the error that ended it (io.EOF for a finished stream).
func readAll(t testing.TB, r *Reader) (ids, data []string, err error) {
	t.Helper()
	for {
		id, d, err := nextID(r, context.Background())
		if err != nil {
			return ids, data, err
		}
		ids = append(ids, id)
		data = append(data, string(d))
	}
}

func mustAttach(t testing.TB, l *EventLog, stream int64, after uint64) *Reader {
	t.Helper()
	r, err := l.Attach(stream, after)
	if err != nil {
		t.Fatalf("Attach(%d, %d): %v", stream, after, err)
	}
	return r
}

func eq(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEventLogDefaults(t *testing.T) {
	l := NewEventLog(0, 0)
	if l.maxEvents != DefaultLogMaxEvents || l.maxBytes != DefaultLogMaxBytes {
		t.Fatalf("zero bounds gave %d events / %d bytes, want the defaults %d / %d",
			l.maxEvents, l.maxBytes, DefaultLogMaxEvents, DefaultLogMaxBytes)
	}
}

// TestEventLogOrder: interleaved appends to several streams come back per
// stream, in order, with IDs "<stream>_<seq>" counting from 1, and each
// stream's reader ends with io.EOF once it is finished.
func TestEventLogOrder(t *testing.T) {
	l := NewEventLog(100, 1<<20)
	a, b, c := l.NewStream(), l.NewStream(), l.NewStream()
	if a == b || b == c || a == c || a <= 0 {
		t.Fatalf("stream IDs %d, %d, %d are not distinct positive numbers", a, b, c)
	}
	want := map[int64][]string{}
	wantIDs := map[int64][]string{}
	for i := range 30 {
		s := []int64{a, b, c}[i%3]
		if i%7 == 0 {
			s = b // uneven interleaving
		}
		d := fmt.Sprintf(`{"n":%d}`, i)
		if !l.Append(s, []byte(d)) {
			t.Fatalf("Append to open stream %d refused", s)
		}
		want[s] = append(want[s], d)
		wantIDs[s] = append(wantIDs[s], EventID(s, uint64(len(want[s]))))
		checkInvariants(t, l)
	}
	for _, s := range []int64{a, b, c} {
		l.Finish(s)
		r := mustAttach(t, l, s, 0)
		if got := posID(r); got != EventID(s, 0) {
			t.Errorf("a reader from the start is at %q, want the priming position %q", got, EventID(s, 0))
		}
		ids, data, err := readAll(t, r)
		if err != io.EOF {
			t.Fatalf("stream %d ended with %v, want io.EOF", s, err)
		}
		if !eq(ids, wantIDs[s]) || !eq(data, want[s]) {
			t.Fatalf("stream %d read\n ids %v\ndata %v\nwant\n ids %v\ndata %v", s, ids, data, wantIDs[s], want[s])
		}
		if r.Stream() != s || posID(r) != ids[len(ids)-1] {
			t.Fatalf("reader says stream %d at %q, want %d at %q", r.Stream(), posID(r), s, ids[len(ids)-1])
		}
		r.Detach()
		// A resume from the middle replays exactly the rest.
		mid := uint64(len(ids) / 2)
		r = mustAttach(t, l, s, mid)
		ids2, _, err := readAll(t, r)
		if err != io.EOF || !eq(ids2, wantIDs[s][mid:]) {
			t.Fatalf("resume of stream %d after %d read %v (%v), want %v", s, mid, ids2, err, wantIDs[s][mid:])
		}
		r.Detach()
		// A resume from the last event replays nothing and ends.
		r = mustAttach(t, l, s, uint64(len(ids)))
		if _, _, err := nextID(r, context.Background()); err != io.EOF {
			t.Fatalf("resume after the last event of finished stream %d: %v, want io.EOF", s, err)
		}
		r.Detach()
	}
	if l.Append(a, []byte("late")) {
		t.Fatal("Append to a finished stream was accepted")
	}
	if l.Append(c+100, []byte("nowhere")) {
		t.Fatal("Append to an unknown stream was accepted")
	}
	l.Finish(a) // twice is harmless
	checkInvariants(t, l)
}

// TestEventLogLive: a reader at the head waits for the next append, and for
// Finish; a cancelled context ends the wait without consuming anything.
func TestEventLogLive(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewEventLog(10, 1<<20)
	s := l.NewStream()
	r := mustAttach(t, l, s, 0)
	if r.Ready() {
		t.Fatal("Ready on an empty stream")
	}
	type result struct {
		id   string
		data string
		err  error
	}
	got := make(chan result)
	next := func() {
		id, d, err := nextID(r, context.Background())
		got <- result{id, string(d), err}
	}
	go next()
	l.Append(s, []byte("one"))
	if res := <-got; res.id != EventID(s, 1) || res.data != "one" || res.err != nil {
		t.Fatalf("live Next = %+v", res)
	}
	l.Append(s, []byte("two"))
	if !r.Ready() {
		t.Fatal("not Ready with an event held")
	}
	go next()
	if res := <-got; res.id != EventID(s, 2) || res.data != "two" {
		t.Fatalf("Next = %+v", res)
	}
	go next()
	l.Finish(s)
	if res := <-got; res.err != io.EOF {
		t.Fatalf("Next after Finish = %+v, want io.EOF", res)
	}

	s2 := l.NewStream()
	r2 := mustAttach(t, l, s2, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := nextID(r2, ctx)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context = %v", err)
	}
	l.Append(s2, []byte("kept"))
	if id, d, err := nextID(r2, context.Background()); err != nil || id != EventID(s2, 1) || string(d) != "kept" {
		t.Fatalf("after a cancelled wait Next = %q %q %v: the event must not be lost", id, d, err)
	}
}

// TestEventLogEvictsByEvents: the log never holds more than maxEvents; the
// oldest events of the session go first whatever their stream.
func TestEventLogEvictsByEvents(t *testing.T) {
	l := NewEventLog(4, 1<<20)
	a, b := l.NewStream(), l.NewStream()
	for i := 1; i <= 5; i++ {
		l.Append(a, []byte("a"+strconv.Itoa(i)))
		checkInvariants(t, l)
	}
	// a holds a2..a5. Three events on b evict a2, a3, a4.
	for i := 1; i <= 3; i++ {
		l.Append(b, []byte("b"+strconv.Itoa(i)))
		checkInvariants(t, l)
	}
	if ev, _, _ := l.Stats(); ev != 4 {
		t.Fatalf("log holds %d events, want 4", ev)
	}
	for after := uint64(0); after <= 3; after++ {
		if _, err := l.Attach(a, after); !errors.Is(err, ErrEventsPurged) {
			t.Fatalf("resume of a after %d: %v, want ErrEventsPurged (a%d was evicted)", after, err, after+1)
		}
	}
	r := mustAttach(t, l, a, 4)
	if id, d, err := nextID(r, context.Background()); err != nil || id != EventID(a, 5) || string(d) != "a5" {
		t.Fatalf("resume of a after 4 read %q %q %v, want a5", id, d, err)
	}
	r.Detach()
	r = mustAttach(t, l, b, 0)
	l.Finish(b)
	ids, data, err := readAll(t, r)
	if err != io.EOF || !eq(data, []string{"b1", "b2", "b3"}) || ids[0] != EventID(b, 1) {
		t.Fatalf("stream b read %v %v %v", ids, data, err)
	}
	r.Detach()
	for _, after := range []uint64{6, 7, math.MaxUint64} {
		if _, err := l.Attach(a, after); !errors.Is(err, ErrUnknownEvent) {
			t.Fatalf("resume of a after %d (never reached): %v, want ErrUnknownEvent", after, err)
		}
	}
	for _, s := range []int64{0, -1, b + 1, math.MaxInt64} {
		if _, err := l.Attach(s, 0); !errors.Is(err, ErrUnknownEvent) {
			t.Fatalf("Attach to stream %d the log never opened: %v, want ErrUnknownEvent", s, err)
		}
	}
}

// TestEventLogEvictsByBytes: the byte bound holds after every append; one
// event larger than the bound passes through alone.
func TestEventLogEvictsByBytes(t *testing.T) {
	l := NewEventLog(1000, 100)
	s := l.NewStream()
	for i := range 20 {
		l.Append(s, make([]byte, 30))
		checkInvariants(t, l)
		if _, bytes, _ := l.Stats(); bytes > 100 {
			t.Fatalf("after append %d the log holds %d bytes, bound 100", i, bytes)
		}
	}
	if ev, bytes, _ := l.Stats(); ev != 3 || bytes != 90 {
		t.Fatalf("log holds %d events / %d bytes, want 3 / 90", ev, bytes)
	}
	// s holds 18..20. One oversized event evicts everything else and stays.
	l.Append(s, make([]byte, 500))
	checkInvariants(t, l)
	if ev, bytes, _ := l.Stats(); ev != 1 || bytes != 500 {
		t.Fatalf("after an oversized append the log holds %d events / %d bytes, want 1 / 500", ev, bytes)
	}
	r := mustAttach(t, l, s, 20)
	if id, d, err := nextID(r, context.Background()); err != nil || id != EventID(s, 21) || len(d) != 500 {
		t.Fatalf("the oversized event must still be delivered: %q, %d bytes, %v", id, len(d), err)
	}
	if _, err := l.Attach(s, 19); !errors.Is(err, ErrEventsPurged) {
		t.Fatalf("resume after 19: %v, want ErrEventsPurged", err)
	}
	// The next append evicts it.
	l.Append(s, make([]byte, 10))
	checkInvariants(t, l)
	if ev, bytes, _ := l.Stats(); ev != 1 || bytes != 10 {
		t.Fatalf("log holds %d events / %d bytes, want 1 / 10", ev, bytes)
	}
}

// TestEventLogReaderFallsBehind: a reader whose next event is evicted gets
// ErrEventsPurged, never the later events (a silent gap).
func TestEventLogReaderFallsBehind(t *testing.T) {
	l := NewEventLog(3, 1<<20)
	s := l.NewStream()
	r := mustAttach(t, l, s, 0)
	l.Append(s, []byte("1"))
	if _, _, err := nextID(r, context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 6; i++ {
		l.Append(s, []byte(strconv.Itoa(i)))
	}
	// Held: 4, 5, 6. The reader is at 1.
	if r.Ready() != true {
		t.Fatal("Ready must report that Next will not wait")
	}
	if id, d, err := nextID(r, context.Background()); !errors.Is(err, ErrEventsPurged) {
		t.Fatalf("Next of a reader that fell behind = %q %q %v, want ErrEventsPurged", id, d, err)
	}
	if posID(r) != EventID(s, 1) {
		t.Fatalf("a purged reader moved to %q", posID(r))
	}
}

// TestEventLogSupersede: attaching a stream again ends the previous reader,
// even one blocked waiting; its Detach does not release the new one.
func TestEventLogSupersede(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewEventLog(10, 1<<20)
	s := l.NewStream()
	l.Append(s, []byte("1"))
	r1 := mustAttach(t, l, s, 0)
	if _, _, err := nextID(r1, context.Background()); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error)
	go func() {
		_, _, err := nextID(r1, context.Background())
		blocked <- err
	}()
	r2 := mustAttach(t, l, s, 0) // a resume from the priming position
	if err := <-blocked; !errors.Is(err, ErrSuperseded) {
		t.Fatalf("a waiting reader that was superseded got %v", err)
	}
	if _, _, err := nextID(r1, context.Background()); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("Next of a superseded reader = %v", err)
	}
	r1.Detach()
	if st := l.State(s); !st.Attached || !st.EverAttached || !st.Open || !st.Exists {
		t.Fatalf("state after the old reader's Detach = %+v: the new reader must keep the stream", st)
	}
	if id, _, err := nextID(r2, context.Background()); err != nil || id != EventID(s, 1) {
		t.Fatalf("the new reader replays from its own position: %q %v", id, err)
	}
	r2.Detach()
	if st := l.State(s); st.Attached || !st.EverAttached {
		t.Fatalf("state after Detach = %+v", st)
	}
	if st := l.State(s + 1); st != (StreamState{}) {
		t.Fatalf("state of an unknown stream = %+v", st)
	}
}

// TestEventLogAdopt: Adopt finishes the old stream and moves exactly the
// events no reader was handed into a new stream; eviction stays exact (in
// the session's order) afterwards.
func TestEventLogAdopt(t *testing.T) {
	l := NewEventLog(8, 1<<20)
	old := l.NewStream()
	other := l.NewStream()
	l.Append(old, []byte("o1"))
	l.Append(other, []byte("x1"))
	l.Append(old, []byte("o2"))
	r := mustAttach(t, l, old, 0)
	for range 2 {
		if _, _, err := nextID(r, context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r.Detach()
	l.Append(old, []byte("o3"))
	l.Append(other, []byte("x2"))
	l.Append(old, []byte("o4"))
	l.Append(old, []byte("o5"))
	// Order, oldest first: o1 x1 o2 o3 x2 o4 o5. o1 and o2 were handed out.
	n := l.Adopt(old)
	checkInvariants(t, l)
	if n == old || n == other {
		t.Fatalf("Adopt returned an existing stream %d", n)
	}
	if st := l.State(old); st.Open {
		t.Fatal("the adopted stream is still open")
	}
	if l.Append(old, []byte("o6")) {
		t.Fatal("Append to the adopted stream was accepted")
	}
	rn := mustAttach(t, l, n, 0)
	if id, d, err := nextID(rn, context.Background()); err != nil || id != EventID(n, 1) || string(d) != "o3" {
		t.Fatalf("the new stream starts with %q %q %v, want o3 as %s", id, d, err, EventID(n, 1))
	}
	rn.Detach()
	// The old stream replays what it had handed out, and ends.
	ro := mustAttach(t, l, old, 0)
	ids, data, err := readAll(t, ro)
	if err != io.EOF || !eq(data, []string{"o1", "o2"}) || !eq(ids, []string{EventID(old, 1), EventID(old, 2)}) {
		t.Fatalf("the old stream replays %v %v %v, want o1 o2 then EOF", ids, data, err)
	}
	ro.Detach()
	if _, err := l.Attach(old, 3); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("the moved position %s: %v, want ErrUnknownEvent", EventID(old, 3), err)
	}

	// One more event fills the log (8); each later one evicts, oldest first.
	l.Append(other, []byte("x3"))
	wantGone := []struct {
		stream int64
		after  uint64 // a resume after this position must now be purged
	}{
		{old, 0},   // o1
		{other, 0}, // x1
		{old, 1},   // o2: old is now empty and finished, so it is freed
		{n, 0},     // o3, moved: evicted in its original place in the order
		{other, 1}, // x2
		{n, 1},     // o4
	}
	for i, g := range wantGone {
		l.Append(other, []byte("y"+strconv.Itoa(i)))
		checkInvariants(t, l)
		if _, err := l.Attach(g.stream, g.after); !errors.Is(err, ErrEventsPurged) {
			t.Fatalf("after eviction %d, resume of stream %d after %d: %v, want ErrEventsPurged", i+1, g.stream, g.after, err)
		}
	}
	if _, _, streams := l.Stats(); streams != 2 {
		t.Fatalf("%d streams held, want 2 (old was freed)", streams)
	}
	rn = mustAttach(t, l, n, 2)
	if id, d, err := nextID(rn, context.Background()); err != nil || string(d) != "o5" || id != EventID(n, 3) {
		t.Fatalf("n after 2 = %q %q %v, want o5", id, d, err)
	}
	rn.Detach()
}

// TestEventLogAdoptCases: a stream never read moves whole; a stream whose
// unread events were partly evicted moves what is left; a stream read to
// its end moves nothing; an unknown stream gives a fresh empty stream.
func TestEventLogAdoptCases(t *testing.T) {
	t.Run("never read", func(t *testing.T) {
		l := NewEventLog(10, 1<<20)
		s := l.NewStream()
		l.Append(s, []byte("1"))
		l.Append(s, []byte("2"))
		n := l.Adopt(s)
		checkInvariants(t, l)
		if st := l.State(s); st.Exists {
			t.Fatalf("the emptied, finished old stream was not freed: %+v", st)
		}
		if _, err := l.Attach(s, 0); !errors.Is(err, ErrEventsPurged) {
			t.Fatalf("resume of the freed old stream: %v, want ErrEventsPurged", err)
		}
		l.Finish(n)
		_, data, err := readAll(t, mustAttach(t, l, n, 0))
		if err != io.EOF || !eq(data, []string{"1", "2"}) {
			t.Fatalf("new stream read %v %v", data, err)
		}
	})
	t.Run("unread partly evicted", func(t *testing.T) {
		l := NewEventLog(3, 1<<20)
		s := l.NewStream()
		r := mustAttach(t, l, s, 0)
		l.Append(s, []byte("1"))
		if _, _, err := nextID(r, context.Background()); err != nil {
			t.Fatal(err)
		}
		r.Detach()
		for i := 2; i <= 6; i++ {
			l.Append(s, []byte(strconv.Itoa(i)))
		}
		// Held 4 5 6; handed out up to 1; 2 and 3 are lost already.
		n := l.Adopt(s)
		checkInvariants(t, l)
		l.Finish(n)
		_, data, err := readAll(t, mustAttach(t, l, n, 0))
		if err != io.EOF || !eq(data, []string{"4", "5", "6"}) {
			t.Fatalf("new stream read %v %v, want 4 5 6", data, err)
		}
	})
	t.Run("read to the end", func(t *testing.T) {
		l := NewEventLog(10, 1<<20)
		s := l.NewStream()
		l.Append(s, []byte("1"))
		r := mustAttach(t, l, s, 0)
		if _, _, err := nextID(r, context.Background()); err != nil {
			t.Fatal(err)
		}
		r.Detach()
		n := l.Adopt(s)
		checkInvariants(t, l)
		if r := mustAttach(t, l, n, 0); r.Ready() {
			t.Fatal("the new stream holds an event that was already delivered")
		}
		if ev, _, _ := l.Stats(); ev != 1 {
			t.Fatalf("%d events held, want 1", ev)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		l := NewEventLog(10, 1<<20)
		n := l.Adopt(99)
		if st := l.State(n); !st.Exists || !st.Open {
			t.Fatalf("Adopt of an unknown stream gave %+v", st)
		}
	})
}

// TestEventLogFreesStreams: finished streams leave the log once they hold
// no events and no reader; a stream that is read stays until Detach.
func TestEventLogFreesStreams(t *testing.T) {
	l := NewEventLog(10, 1<<20)
	var last int64
	for range 100 {
		s := l.NewStream()
		l.Append(s, []byte("answer"))
		l.Finish(s)
		last = s
		checkInvariants(t, l)
	}
	if ev, _, streams := l.Stats(); ev != 10 || streams != 10 {
		t.Fatalf("after 100 finished one-event streams: %d events, %d streams; want 10 and 10", ev, streams)
	}
	// A finished stream without events and without reader goes at once.
	empty := l.NewStream()
	l.Finish(empty)
	if l.State(empty).Exists {
		t.Fatal("a finished empty stream was kept")
	}
	// One with a reader stays until the reader leaves.
	held := l.NewStream()
	r := mustAttach(t, l, held, 0)
	l.Finish(held)
	if !l.State(held).Exists {
		t.Fatal("a stream was freed under its reader")
	}
	if _, _, err := nextID(r, context.Background()); err != io.EOF {
		t.Fatalf("Next on a finished empty stream = %v", err)
	}
	r.Detach()
	if l.State(held).Exists {
		t.Fatal("a finished empty stream was kept after its reader detached")
	}
	// An open stream whose events were all evicted stays: more may come.
	open := l.NewStream()
	l.Append(open, []byte("x"))
	for range 10 {
		l.Append(last, []byte("late")) // refused: last is finished
		s := l.NewStream()
		l.Append(s, []byte("y"))
		l.Finish(s)
	}
	if st := l.State(open); !st.Exists || !st.Open {
		t.Fatalf("an open stream was freed: %+v", st)
	}
	checkInvariants(t, l)
	// Freed streams answer ErrEventsPurged, never a replay or "unknown".
	if _, err := l.Attach(1, 0); !errors.Is(err, ErrEventsPurged) {
		t.Fatalf("resume of freed stream 1: %v, want ErrEventsPurged", err)
	}
	// FinishAll (the session ended) frees every stream left without events.
	l.FinishAll()
	checkInvariants(t, l)
	if _, _, streams := l.Stats(); streams > 10 {
		t.Fatalf("%d streams after FinishAll, at most one per held event expected", streams)
	}
	if st := l.State(open); st.Exists {
		t.Fatalf("the emptied stream survived FinishAll: %+v", st)
	}
}

// TestEventLogFinishAllWakes: readers waiting on any stream end with io.EOF
// after the held events when the session ends.
func TestEventLogFinishAllWakes(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewEventLog(10, 1<<20)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		s := l.NewStream()
		if i == 1 {
			l.Append(s, []byte("pending"))
		}
		r := mustAttach(t, l, s, 0)
		wg.Go(func() {
			_, _, errs[i] = readAll(t, r)
		})
	}
	l.FinishAll()
	wg.Wait()
	for i, err := range errs {
		if err != io.EOF {
			t.Errorf("reader %d ended with %v, want io.EOF", i, err)
		}
	}
}

// TestEventLogConcurrent runs writers, readers, resumers (which supersede
// readers) and Stats together under -race. Every reader must see its
// stream's events in order without gaps or repeats, each reader's run ends
// with io.EOF, ErrSuperseded or ErrEventsPurged, and the bounds hold at all
// times. The seed is logged so a failure can be replayed.
func TestEventLogConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, bounds := range []struct {
		events int
		bytes  int64
	}{{100000, 1 << 30}, {64, 4096}} {
		t.Run(fmt.Sprintf("%d_events_%d_bytes", bounds.events, bounds.bytes), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			l := NewEventLog(bounds.events, bounds.bytes)
			const writers, perWriter = 4, 2000
			streams := make([]int64, writers)
			for i := range streams {
				streams[i] = l.NewStream()
			}
			stop := make(chan struct{})
			var bg sync.WaitGroup
			bg.Go(func() { // Stats never exceed the bounds
				for {
					select {
					case <-stop:
						return
					default:
					}
					runtime.Gosched()
					ev, b, _ := l.Stats()
					if ev > bounds.events || (ev > 1 && b > bounds.bytes) {
						t.Errorf("Stats: %d events / %d bytes exceed the bounds", ev, b)
						return
					}
				}
			})
			var wg sync.WaitGroup
			for w, s := range streams {
				wg.Go(func() {
					for i := 1; i <= perWriter; i++ {
						if !l.Append(s, []byte(fmt.Sprintf("%d:%d", s, i))) {
							t.Errorf("Append %d to stream %d refused", i, s)
							return
						}
					}
					l.Finish(s)
				})
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(w)))
					after := uint64(0)
					for {
						r, err := l.Attach(s, after)
						if errors.Is(err, ErrEventsPurged) {
							if !l.State(s).Exists {
								return // finished, and all its events evicted: freed
							}
							after += uint64(rng.IntN(50) + 1) // skip ahead past the gap
							continue
						}
						if errors.Is(err, ErrUnknownEvent) {
							// Skipped beyond the head, or the stream was freed
							// after it finished.
							if st := l.State(s); !st.Exists || !st.Open {
								return
							}
							after = 0
							continue
						}
						if err != nil {
							t.Errorf("stream %d: Attach after %d: %v", s, after, err)
							return
						}
						// Read a random number of events, then resume from the
						// last one (a new connection), as a cut client would.
						budget := rng.IntN(300)
						for ; ; budget-- {
							if budget == 0 {
								r.Detach()
								break
							}
							id, d, err := nextID(r, context.Background())
							if err == io.EOF {
								r.Detach()
								return
							}
							if errors.Is(err, ErrEventsPurged) {
								r.Detach()
								break
							}
							if err != nil {
								t.Errorf("stream %d: Next: %v", s, err)
								return
							}
							want := EventID(s, after+1)
							if id != want || string(d) != fmt.Sprintf("%d:%d", s, after+1) {
								t.Errorf("stream %d: read %q %q after %d, want %q", s, id, d, after, want)
								return
							}
							after++
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			bg.Wait()
			checkInvariants(t, l)
		})
	}
}

// TestEventLogSupersedeRace: many connections resuming one stream at once.
// At most one reader is live at any time, and every event is delivered in
// order to whichever reader reads it.
func TestEventLogSupersedeRace(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewEventLog(100000, 1<<30)
	s := l.NewStream()
	const total = 3000
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= total; i++ {
			l.Append(s, []byte(strconv.Itoa(i)))
		}
		l.Finish(s)
	})
	var mu sync.Mutex
	maxSeen := uint64(0)
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				after := maxSeen
				mu.Unlock()
				r, err := l.Attach(s, after)
				if err != nil {
					t.Errorf("Attach after %d: %v", after, err)
					return
				}
				for {
					seq, d, err := r.Next(context.Background())
					if err == io.EOF {
						r.Detach()
						return
					}
					if errors.Is(err, ErrSuperseded) {
						r.Detach()
						break
					}
					if err != nil {
						t.Errorf("Next: %v", err)
						return
					}
					if string(d) != strconv.FormatUint(seq, 10) {
						t.Errorf("event %s carries %q", EventID(r.Stream(), seq), d)
					}
					mu.Lock()
					if seq > maxSeen {
						maxSeen = seq
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if maxSeen != total {
		t.Fatalf("the readers together reached %d, want %d", maxSeen, total)
	}
	checkInvariants(t, l)
}

// TestEventLogAppendAllocates: once warm, an append (with its eviction)
// allocates nothing; the event's bytes are the caller's.
func TestEventLogAppendAllocates(t *testing.T) {
	l := NewEventLog(100, 1<<20)
	a, b := l.NewStream(), l.NewStream()
	data := []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}`)
	i := 0
	appendOne := func() {
		l.Append([]int64{a, a, b}[i%3], data)
		i++
	}
	for range 1000 {
		appendOne()
	}
	// One run of 10,000 appends: AllocsPerRun truncates its average, which
	// would hide an array regrown every few hundred appends. It counts the
	// whole process's allocations, so a goroutine another test left behind
	// can add one: the fewest of three runs is the log's own (an array
	// regrown in the steady state shows in every run).
	fewest := math.MaxInt
	for range 3 {
		n := testing.AllocsPerRun(1, func() {
			for range 10000 {
				appendOne()
			}
		})
		fewest = min(fewest, int(n))
	}
	if fewest != 0 {
		t.Fatalf("10,000 appends in the steady state allocated %v times, want 0", fewest)
	}
	checkInvariants(t, l)
}

// TestEventLogNextPoll: with a done context Next still returns what is
// ready (an event, the end, a takeover) and otherwise the context's error
// at once, without allocating.
func TestEventLogNextPoll(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	l := NewEventLog(10, 1<<20)
	s := l.NewStream()
	r := mustAttach(t, l, s, 0)
	if _, _, err := nextID(r, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll of an empty stream = %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { nextID(r, done) }); n != 0 {
		t.Fatalf("a poll with nothing ready allocates %v times", n)
	}
	l.Append(s, []byte("x"))
	if id, d, err := nextID(r, done); err != nil || id != EventID(s, 1) || string(d) != "x" {
		t.Fatalf("poll with an event ready = %q %q %v", id, d, err)
	}
	l.Finish(s)
	if _, _, err := nextID(r, done); err != io.EOF {
		t.Fatalf("poll of a finished stream = %v, want io.EOF", err)
	}
	r2 := mustAttach(t, l, s, 1)
	if _, _, err := nextID(r, done); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("poll of a superseded reader = %v", err)
	}
	r2.Detach()
}

// NextBefore gives up with ErrNotYet when its channel delivers, returns an
// event that comes first, and leaves the reader usable either way.
func TestEventLogNextBefore(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewEventLog(10, 1<<20)
	s := l.NewStream()
	r := mustAttach(t, l, s, 0)
	expire := make(chan time.Time, 1)
	expire <- time.Time{}
	if _, _, err := r.NextBefore(context.Background(), expire); err != ErrNotYet {
		t.Fatalf("NextBefore with an expired channel = %v, want ErrNotYet", err)
	}
	// An event held wins over a channel that has fired.
	l.Append(s, []byte("held"))
	expire <- time.Time{}
	if seq, d, err := r.NextBefore(context.Background(), expire); err != nil || seq != 1 || string(d) != "held" {
		t.Fatalf("NextBefore with an event held = %d %q %v", seq, d, err)
	}
	<-expire
	// An event appended while it waits.
	got := make(chan string)
	go func() {
		_, d, err := r.NextBefore(context.Background(), expire)
		if err != nil {
			d = []byte(err.Error())
		}
		got <- string(d)
	}()
	l.Append(s, []byte("live"))
	if d := <-got; d != "live" {
		t.Fatalf("NextBefore while waiting = %q", d)
	}
	l.Finish(s)
	if _, _, err := r.NextBefore(context.Background(), expire); err != io.EOF {
		t.Fatalf("NextBefore of a finished stream = %v, want io.EOF", err)
	}
}

// A transient stream hands its events to its reader, holds them outside the
// log's bounds (it evicts nothing and is never evicted), and is freed with
// them once it is finished and unread.
func TestEventLogTransientStream(t *testing.T) {
	l := NewEventLog(2, 1<<20)
	kept := l.NewStream()
	l.Append(kept, []byte("k1"))
	l.Append(kept, []byte("k2"))

	tr := l.NewTransientStream()
	r := new(Reader)
	if err := l.attach(r, tr, 0, true); err != nil {
		t.Fatal(err)
	}
	// No resume can take it over: its ID never reached a client.
	if _, err := l.Attach(tr, 0); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("resuming a live transient stream = %v, want ErrUnknownEvent", err)
	}
	for i := range 5 {
		if !l.Append(tr, []byte(strconv.Itoa(i))) {
			t.Fatalf("append %d to a transient stream refused", i)
		}
	}
	checkInvariants(t, l)
	if n, b, _ := l.Stats(); n != 2 || b != 4 {
		t.Fatalf("the log counts %d events / %d bytes, want the kept stream's 2 / 4", n, b)
	}
	l.Finish(tr)
	for i := range 5 {
		if _, d, err := nextID(r, context.Background()); err != nil || string(d) != strconv.Itoa(i) {
			t.Fatalf("event %d of the transient stream = %q, %v", i, d, err)
		}
	}
	if _, _, err := nextID(r, context.Background()); err != io.EOF {
		t.Fatalf("after the transient stream's events: %v, want io.EOF", err)
	}
	r.Detach()
	checkInvariants(t, l)
	if _, _, streams := l.Stats(); streams != 1 {
		t.Fatalf("%d streams after the transient one was read and released, want 1", streams)
	}
	if _, err := l.Attach(tr, 0); !errors.Is(err, ErrEventsPurged) {
		t.Fatalf("resuming a freed transient stream = %v, want ErrEventsPurged", err)
	}
	// The kept stream lost nothing to the transient one's events.
	r = mustAttach(t, l, kept, 0)
	for _, want := range []string{"k1", "k2"} {
		if _, d, err := nextID(r, context.Background()); err != nil || string(d) != want {
			t.Fatalf("kept stream: %q, %v; want %q", d, err, want)
		}
	}

	// Finished with no reader (the client left first): freed at once, its
	// event with it.
	gone := l.NewTransientStream()
	l.Append(gone, []byte("late answer"))
	l.Finish(gone)
	checkInvariants(t, l)
	if _, _, streams := l.Stats(); streams != 1 {
		t.Fatalf("%d streams after an unread transient stream finished, want 1", streams)
	}
}

// A stream that finished holding nothing (a cancelled request's, with no
// progress) is freed; a resume from its end is ErrStreamFinished, not a
// loss of events.
func TestEventLogResumeFinishedEmpty(t *testing.T) {
	l := NewEventLog(10, 1<<20)
	s := l.NewStream()
	r := mustAttach(t, l, s, 0)
	l.Finish(s)
	r.Detach()
	if st := l.State(s); st.Exists {
		t.Fatalf("the finished empty stream is still held: %+v", st)
	}
	if _, err := l.Attach(s, 0); !errors.Is(err, ErrStreamFinished) {
		t.Fatalf("resume of its end: %v, want ErrStreamFinished", err)
	}
	// One whose event was read and is still held: the reader is at its end.
	s2 := l.NewStream()
	l.Append(s2, []byte("a"))
	l.Finish(s2)
	r2 := mustAttach(t, l, s2, 1)
	if !r2.AtEnd() {
		t.Fatal("a reader after the last event of a finished stream is not AtEnd")
	}
	r2.Detach()
	r3 := mustAttach(t, l, s2, 0)
	if r3.AtEnd() {
		t.Fatal("a reader before an event is AtEnd")
	}
	r3.Detach()
}

// A POST's stream (open) is attached as it opens; its last answer and its
// end come in one step (appendFinish): a poll that never waits gets the
// answer and then io.EOF, a later append is refused, and a kept stream
// stays in the log for a resume while a transient one is freed with its
// reader.
func TestEventLogOpenAppendFinish(t *testing.T) {
	poll, cancel := context.WithCancel(context.Background())
	cancel()
	for _, transient := range []bool{false, true} {
		l := NewEventLog(0, 0)
		r := new(Reader)
		id := l.open(r, transient)
		if !l.appendFinish(id, []byte("answer"), true) {
			t.Fatalf("transient %v: appendFinish refused on an open stream", transient)
		}
		if l.appendFinish(id, []byte("late"), false) {
			t.Fatalf("transient %v: an append after the stream's end was taken", transient)
		}
		if _, d, err := r.Next(poll); err != nil || string(d) != "answer" {
			t.Fatalf("transient %v: first poll = %q, %v; want the answer", transient, d, err)
		}
		if _, _, err := r.Next(poll); err != io.EOF {
			t.Fatalf("transient %v: second poll = %v, want io.EOF at once", transient, err)
		}
		r.Detach()
		checkInvariants(t, l)
		_, err := l.Attach(id, 0)
		switch {
		case transient && !errors.Is(err, ErrEventsPurged):
			t.Fatalf("resuming a read transient stream = %v, want ErrEventsPurged", err)
		case !transient && err != nil:
			t.Fatalf("resuming a kept stream = %v", err)
		}
	}
}

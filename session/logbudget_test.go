package session

// Tests of the process-wide budget of event data: what
// it evicts (the oldest replayable events of the largest logs), what it
// never evicts (live events), its accounting under concurrent use, and the
// memory it bounds.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// event is n bytes of c.
func event(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

// handed appends data to stream and hands it to r, as a connection would.
func handed(t *testing.T, l *EventLog, stream int64, r *Reader, data []byte) {
	t.Helper()
	if !l.Append(stream, data) {
		t.Fatalf("Append to stream %d refused", stream)
	}
	if _, got, err := r.Next(context.Background()); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Next: %d bytes, %v", len(got), err)
	}
}

// checkBudget fails if the budget's total is not the sum of its logs' bytes.
func checkBudget(t *testing.T, b *LogBudget, logs ...*EventLog) {
	t.Helper()
	sum := int64(0)
	for _, l := range logs {
		checkInvariants(t, l)
		l.mu.Lock()
		if l.counted {
			sum += l.bytes
		}
		l.mu.Unlock()
	}
	if got := b.Stats().Bytes; got != sum {
		t.Fatalf("the budget counts %d bytes, its logs hold %d", got, sum)
	}
}

// readFrom resumes stream after position after and reads what is held.
func readFrom(t *testing.T, l *EventLog, stream int64, after uint64) (n int, err error) {
	t.Helper()
	r, err := l.Attach(stream, after)
	if err != nil {
		return 0, err
	}
	defer r.Detach()
	for r.Ready() {
		if _, _, err := r.Next(context.Background()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func TestLogBudgetEvictsOldestReplayableOfLargest(t *testing.T) {
	b := NewLogBudget(1000) // a walk evicts down to 1000 - 1000/16 = 938
	la, lb, lc := b.NewEventLog(0, 0), b.NewEventLog(0, 0), b.NewEventLog(0, 0)
	sa, sb, sc := la.NewStream(), lb.NewStream(), lc.NewStream()
	ra, rb := mustAttach(t, la, sa, 0), mustAttach(t, lb, sb, 0)
	for range 6 {
		handed(t, la, sa, ra, event('a', 100))
	}
	for range 3 {
		handed(t, lb, sb, rb, event('b', 100))
	}
	lc.Append(sc, event('c', 100)) // live: no reader yet
	if st := b.Stats(); st.Bytes != 1000 || st.Evicted != 0 || st.Logs != 3 {
		t.Fatalf("at the budget: %+v, want 1000 bytes in 3 logs, none evicted", st)
	}
	lc.Append(sc, event('c', 100)) // 1100: over
	// The largest log (a, 600 bytes) loses its two oldest events: 162 bytes
	// had to go, and the third would take it below what was needed.
	if st := b.Stats(); st.Bytes != 900 || st.Evicted != 2 {
		t.Fatalf("after the walk: %+v, want 900 bytes, 2 evicted", st)
	}
	if _, err := readFrom(t, la, sa, 0); !errors.Is(err, ErrEventsPurged) {
		t.Errorf("resuming log a from its start: %v, want ErrEventsPurged", err)
	}
	if _, err := readFrom(t, la, sa, 1); !errors.Is(err, ErrEventsPurged) {
		t.Errorf("resuming log a after event 1: %v, want ErrEventsPurged", err)
	}
	if n, err := readFrom(t, la, sa, 2); n != 4 || err != nil {
		t.Errorf("resuming log a after event 2: %d events, %v; want 4", n, err)
	}
	if n, err := readFrom(t, lb, sb, 0); n != 3 || err != nil {
		t.Errorf("log b: %d events, %v; want all 3", n, err)
	}
	if n, err := readFrom(t, lc, sc, 0); n != 2 || err != nil {
		t.Errorf("log c: %d events, %v; want both", n, err)
	}
	ra.Detach()
	rb.Detach()
	checkBudget(t, b, la, lb, lc)
}

// TestLogBudgetKeepsLive: events no reader was handed are never evicted,
// wherever they sit in the log's order, even when they alone exceed the
// budget; what is replayable goes, oldest first.
func TestLogBudgetKeepsLive(t *testing.T) {
	b := NewLogBudget(500) // low: 469
	l := b.NewEventLog(0, 0)
	s0, s1 := l.NewStream(), l.NewStream()
	l.Append(s0, event('0', 100)) // live, and the oldest of the log
	for range 9 {
		l.Append(s1, event('1', 100)) // live too: twice the budget
	}
	if st := b.Stats(); st.Bytes != 1000 || st.Evicted != 0 {
		t.Fatalf("live events over the budget: %+v, want all 1000 bytes kept", st)
	}
	if n, err := readFrom(t, l, s1, 0); n != 9 || err != nil { // now handed: replayable
		t.Fatalf("stream 1: %d events, %v; want 9", n, err)
	}
	s2 := l.NewStream()
	l.Append(s2, event('2', 100)) // 1100: the walk skips s0's live event at the head
	if st := b.Stats(); st.Bytes != 400 || st.Evicted != 7 {
		t.Fatalf("after the walk: %+v, want 400 bytes, 7 evicted", st)
	}
	if _, err := readFrom(t, l, s1, 6); !errors.Is(err, ErrEventsPurged) {
		t.Errorf("resuming stream 1 after event 6: %v, want ErrEventsPurged", err)
	}
	if n, err := readFrom(t, l, s1, 7); n != 2 || err != nil {
		t.Errorf("resuming stream 1 after event 7: %d events, %v; want 2", n, err)
	}
	for _, s := range []int64{s0, s2} {
		if n, err := readFrom(t, l, s, 0); n != 1 || err != nil {
			t.Errorf("live stream %d: %d events, %v; want its one event", s, n, err)
		}
	}
	checkBudget(t, b, l)
	// The log's own order still works around the walk's holes.
	for range 20 {
		l.Append(s2, event('2', 100))
	}
	checkBudget(t, b, l)
}

// TestLogBudgetSessionEnd: an ended session's log leaves the budget.
func TestLogBudgetSessionEnd(t *testing.T) {
	b := NewLogBudget(1 << 20)
	l, idle := b.NewEventLog(0, 0), b.NewEventLog(0, 0)
	s := l.NewStream()
	l.Append(s, event('x', 300))
	idle.NewStream() // holds nothing: not among the budget's logs
	if st := b.Stats(); st.Bytes != 300 || st.Logs != 1 {
		t.Fatalf("%+v, want 300 bytes in 1 log", st)
	}
	l.FinishAll()
	l.FinishAll()
	if st := b.Stats(); st.Bytes != 0 || st.Logs != 0 {
		t.Fatalf("after the session ended: %+v, want nothing", st)
	}
	// Its held events still reach the reader of the ended session.
	if n, err := readFrom(t, l, s, 0); n != 1 || err != nil {
		t.Errorf("reading the ended session's stream: %d, %v", n, err)
	}
}

func TestLogBudgetOptions(t *testing.T) {
	if b := NewLogBudget(0); b.max != DefaultLogMaxTotalBytes {
		t.Errorf("NewLogBudget(0).max = %d, want the default", b.max)
	}
	if b := NewLogBudget(-1); b != nil {
		t.Errorf("NewLogBudget(-1) = %+v, want no budget", b)
	}
	var none *LogBudget
	l := none.NewEventLog(0, 0) // no budget: the log's own bounds only
	l.Append(l.NewStream(), event('x', 10))
	if r := NewRegistry(&Options{LogMaxTotalBytes: 12345}); r.logBudget == nil || r.logBudget.max != 12345 {
		t.Errorf("the registry's budget: %+v, want 12345 bytes", r.logBudget)
	}
}

// TestLogBudgetConcurrent: many logs appended to and read at once, under
// -race. A reader never loses an event to the budget (what it has not read
// is live), resumes get whole tails or ErrEventsPurged, and the budget's
// total stays the sum of its logs' bytes.
func TestLogBudgetConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const nlogs, perLog = 16, 400
	b := NewLogBudget(32 << 10)
	logs := make([]*EventLog, nlogs)
	streams := make([]int64, nlogs) // read by one connection
	resumed := make([]int64, nlogs) // resumed by clients again and again
	for i := range logs {
		logs[i] = b.NewEventLog(1<<20, 1<<30) // only the budget evicts
		streams[i] = logs[i].NewStream()
		resumed[i] = logs[i].NewStream()
	}
	payload := func(i, seq int) []byte {
		return fmt.Appendf(event('.', (i*37+seq*11)%300), "%d:%d", i, seq)
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.Stats()
			runtime.Gosched()
		}
	})
	var wg sync.WaitGroup
	for i, l := range logs {
		s, rs := streams[i], resumed[i]
		r := mustAttach(t, l, s, 0)
		wg.Go(func() {
			for seq := 1; seq <= perLog; seq++ {
				l.Append(s, payload(i, seq))
				l.Append(rs, payload(i, seq))
			}
			l.Finish(s)
			l.Finish(rs)
		})
		wg.Go(func() { // the connection: every event, in order
			defer r.Detach()
			for seq := 1; ; seq++ {
				_, d, err := r.Next(context.Background())
				if err == io.EOF && seq == perLog+1 {
					return
				}
				if err != nil || !bytes.Equal(d, payload(i, seq)) {
					t.Errorf("log %d: event %d: %q, %v", i, seq, d, err)
					return
				}
			}
		})
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() { // a resuming client: whole tails or a clear refusal
			for range 50 {
				after := uint64(rng.IntN(perLog))
				r, err := l.Attach(rs, after)
				if err != nil {
					if !errors.Is(err, ErrEventsPurged) && !errors.Is(err, ErrUnknownEvent) {
						t.Errorf("log %d: resume after %d: %v", i, after, err)
					}
					continue
				}
				// What it reads is the tail after its resume point, in order.
				for seq := int(after) + 1; r.Ready(); seq++ {
					_, d, err := r.Next(context.Background())
					if errors.Is(err, ErrSuperseded) || errors.Is(err, ErrEventsPurged) {
						break // another resume took over; it fell behind the budget
					}
					if err != nil || !bytes.Equal(d, payload(i, seq)) {
						t.Errorf("log %d: resumed after %d, event %d: %q, %v", i, after, seq, d, err)
						break
					}
				}
				r.Detach()
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	checkBudget(t, b, logs...)
	st := b.Stats()
	if st.Evicted == 0 {
		t.Errorf("%+v: %d logs of %d events never went over a budget of 32 KiB?", st, nlogs, perLog)
	}
	// Read what no resumer read: everything is replayable now. After the
	// walks that found only live events, the next walk comes within a
	// sixteenth of the budget of appends, and brings the total under it.
	for i, l := range logs {
		l.mu.Lock()
		rs := l.streams[resumed[i]]
		l.mu.Unlock()
		if rs == nil {
			continue // finished and all evicted: freed
		}
		if _, err := readFrom(t, l, resumed[i], rs.first-1); err != nil {
			t.Fatalf("log %d: reading what it holds: %v", i, err)
		}
	}
	l := logs[0]
	z := l.NewStream()
	for range b.max/16/100 + 1 {
		l.Append(z, event('z', 100))
	}
	if st := b.Stats(); st.Bytes > b.max {
		t.Errorf("after all was read and a sixteenth of the budget appended: %+v, over the budget %d", st, b.max)
	}
	checkBudget(t, b, logs...)
}

// TestLogBudgetMemory measures the bound: 1,000 sessions each append 8 MiB
// of events (DefaultLogMaxBytes: each log alone keeps it all), every event
// handed to a reader. Without the budget they would hold 8 GiB; with the
// default budget the heap stays under it plus a small overhead.
func TestLogBudgetMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("allocates 8 GiB in all; measures memory")
	}
	const sessions, eventBytes = 1000, 64 << 10
	const perSession = DefaultLogMaxBytes / eventBytes
	const overhead = 32 << 20
	b := NewLogBudget(0)
	logs := make([]*EventLog, 0, sessions) // all alive till the end
	peak := uint64(0)
	var ms runtime.MemStats
	measure := func() {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	for i := range sessions {
		l := b.NewEventLog(0, 0)
		logs = append(logs, l)
		s := l.NewStream()
		r := mustAttach(t, l, s, 0)
		for range perSession {
			data := make([]byte, eventBytes)
			data[0] = byte(i)
			handed(t, l, s, r, data)
		}
		r.Detach()
		if i%50 == 49 {
			measure()
		}
	}
	measure()
	st := b.Stats()
	t.Logf("%d sessions x %d MiB appended: the logs hold %d MiB (budget %d MiB), %d events evicted; peak heap after GC %d MiB",
		sessions, DefaultLogMaxBytes>>20, st.Bytes>>20, DefaultLogMaxTotalBytes>>20, st.Evicted, peak>>20)
	if st.Bytes > DefaultLogMaxTotalBytes {
		t.Errorf("the logs hold %d bytes, over the budget %d", st.Bytes, DefaultLogMaxTotalBytes)
	}
	if peak > DefaultLogMaxTotalBytes+overhead {
		t.Errorf("peak heap %d MiB, over the budget %d MiB + %d MiB", peak>>20, DefaultLogMaxTotalBytes>>20, overhead>>20)
	}
	runtime.KeepAlive(logs)
}

package session

// Benchmarks of the event log: a replay of 10,000 events (target:
// at most 20 ms), and an append, which must allocate nothing beyond the
// event itself once the log is warm.
//
//	go test -run '^$' -bench 'EventLog' -benchmem ./session/

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// benchEvent is a typical notifications/progress line, as the server
// writes it.
func benchEvent(i int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok-1","progress":%d,"total":10000}}`, i)
}

// BenchmarkEventLogReplay10k replays a stream of 10,000 held events from
// its priming position to its end, as a GET with Last-Event-ID "<stream>_0"
// does, without the HTTP part (see bridge's BenchmarkResumeReplay10k).
func BenchmarkEventLogReplay10k(b *testing.B) {
	const n = 10000
	l := NewEventLog(2*n, 1<<30)
	s := l.NewStream()
	for i := range n {
		l.Append(s, benchEvent(i+1))
	}
	l.Finish(s)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := l.Attach(s, 0)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			_, _, err := r.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			got++
		}
		r.Detach()
		if got != n {
			b.Fatalf("replayed %d events, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
}

// BenchmarkEventLogAppend appends to a full log, so every append also
// evicts the oldest event: the steady state of a busy session. The event's
// bytes are made once outside the loop (the caller owns them), so
// allocs/op counts what the log itself allocates per append.
func BenchmarkEventLogAppend(b *testing.B) {
	for _, c := range []struct {
		streams int
		budget  *LogBudget // the process-wide budget, never reached here: its hot path
	}{{1, nil}, {16, nil}, {1, NewLogBudget(0)}, {16, NewLogBudget(0)}} {
		streams := c.streams
		b.Run(fmt.Sprintf("streams=%d/budget=%v", streams, c.budget != nil), func(b *testing.B) {
			l := c.budget.NewEventLog(DefaultLogMaxEvents, DefaultLogMaxBytes)
			ids := make([]int64, streams)
			for i := range ids {
				ids[i] = l.NewStream()
			}
			data := benchEvent(1)
			for i := range 4 * DefaultLogMaxEvents { // warm up: fill, evict, grow
				l.Append(ids[i%streams], data)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !l.Append(ids[i%streams], data) {
					b.Fatal("append refused")
				}
				i++
			}
		})
	}
}

// BenchmarkEventLogAppendRead appends and reads each event on a stream
// with a reader: the live path of an SSE connection. The reader's
// allocation per event is its ID string.
func BenchmarkEventLogAppendRead(b *testing.B) {
	l := NewEventLog(DefaultLogMaxEvents, DefaultLogMaxBytes)
	s := l.NewStream()
	r, err := l.Attach(s, 0)
	if err != nil {
		b.Fatal(err)
	}
	data := benchEvent(1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l.Append(s, data)
		if _, _, err := r.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEventLogCall is one answered request as Session.Post and the
// bridge's answer make it: a stream opened, attached, one answer appended
// and read, the stream finished and detached. The log then holds the answer
// for a resume until newer events evict it, so the log's memory on a busy
// session is DefaultLogMaxEvents such calls; held-B/call is what each one
// holds besides the answer's own bytes (the stream, its index array, the
// map entry and the eviction order), measured on the heap with the log full.
func BenchmarkEventLogCall(b *testing.B) {
	answer := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hello"}]}}`)
	ctx := context.Background()
	call := func(l *EventLog) {
		s := l.NewStream()
		r, err := l.Attach(s, 0)
		if err != nil {
			b.Fatal(err)
		}
		l.Append(s, answer)
		l.Finish(s)
		if _, _, err := r.Next(ctx); err != nil {
			b.Fatal(err)
		}
		r.Detach()
	}
	held := func() float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := NewEventLog(DefaultLogMaxEvents, DefaultLogMaxBytes)
		for range 4 * DefaultLogMaxEvents {
			call(l)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(l)
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / DefaultLogMaxEvents
	}
	l := NewEventLog(DefaultLogMaxEvents, DefaultLogMaxBytes)
	b.ReportAllocs()
	for b.Loop() {
		call(l)
	}
	b.ReportMetric(held(), "held-B/call")
}

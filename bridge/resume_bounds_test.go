package bridge_test

// Memory stays bounded: a flood nobody reads, and a log freed with its
// session.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"weak"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// TestResumeFloodStaysBounded: children flood notifications while no client
// reads. Each session's log stays within its bounds all along, a flooding
// session blocks neither itself nor another session, the answer still
// lands in the log, and the evicted start of a stream is refused with 410
// rather than replayed in part.
func TestResumeFloodStaysBounded(t *testing.T) {
	const maxEvents, maxBytes, n = 200, 16 << 10, 5000
	b := startBridge(t, bridgeConfig{session: session.Options{LogMaxEvents: maxEvents, LogMaxBytes: maxBytes}})
	ctx := ctxT(t)
	gone := rsOpen(t, b.URL, "2025-11-25")  // its client leaves after the priming event
	stuck := rsOpen(t, b.URL, "2025-11-25") // its client holds the connection and does not read
	other := rsOpen(t, b.URL, "2025-11-25") // a bystander

	resp := gone.call(ctx, 1, "progress", map[string]any{"n": n}, "gone")
	goneID, err := rsNext(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if err != nil || !goneID.priming() {
		t.Fatal(goneID, err)
	}
	stuckResp := stuck.call(ctx, 1, "progress", map[string]any{"n": n}, "stuck")
	stuckBody := bufio.NewReader(stuckResp.Body)
	stuckID, err := rsNext(stuckBody) // the first event, then nothing until the end
	if err != nil || !stuckID.priming() {
		t.Fatal(stuckID, err)
	}

	// The bystander is answered while the stuck connection stays unread
	// (it is read only at the end of the test).
	for i := range 5 {
		evs := other.drain(other.call(ctx, 100+i, "echo", map[string]any{"text": "alive"}, ""))
		if m, _ := rsParse(evs[len(evs)-1].Data); len(evs) != 2 || m.text() != "alive" {
			t.Fatalf("the bystander got %v", evs)
		}
	}

	type watched struct {
		name   string
		log    *session.EventLog
		stream int64
		peak   [3]int64 // events, bytes, streams
	}
	var ws []*watched
	for _, w := range []struct {
		name string
		c    *rsClient
		id   string
	}{{"gone", gone, goneID.ID}, {"stuck", stuck, stuckID.ID}} {
		sess, err := b.Reg.Get(w.c.sid)
		if err != nil {
			t.Fatal(err)
		}
		stream, _, _ := bridge.ParseEventID(w.id)
		ws = append(ws, &watched{name: w.name, log: sess.Log(), stream: stream})
	}
	// Watch the logs until both answers are in them (both streams
	// finished), checking the bounds at every look. Nobody reads these
	// streams, so no event marks the end: the loop waits on the logs'
	// state, never on time.
	looks := 0
	for running := true; running; looks++ {
		if ctx.Err() != nil {
			t.Fatal("the floods never ended")
		}
		running = false
		for _, w := range ws {
			ev, by, streams := w.log.Stats()
			if ev > maxEvents || by > maxBytes {
				t.Fatalf("%s: the log holds %d events / %d bytes; bounds %d / %d", w.name, ev, by, maxEvents, maxBytes)
			}
			w.peak = [3]int64{max(w.peak[0], int64(ev)), max(w.peak[1], by), max(w.peak[2], int64(streams))}
			running = running || w.log.State(w.stream).Open
		}
		runtime.Gosched()
	}
	for _, w := range ws {
		t.Logf("%s: %d looks during the flood: at most %d events, %d bytes, %d streams held", w.name, looks, w.peak[0], w.peak[1], w.peak[2])
		// The initialize stream (until its event is evicted) and the call's.
		if w.peak[2] > 2 {
			t.Errorf("%s: %d streams held at once", w.name, w.peak[2])
		}
	}

	// The start of the abandoned stream is gone: refused, not replayed in part.
	g, err := gone.get(ctx, goneID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, g.Body); g.StatusCode != http.StatusGone || !strings.Contains(body, "evicted") {
		t.Fatalf("resume of the flooded stream from its start: %s %s, want 410", g.Status, body)
	}
	g.Body.Close()
	// Its answer is there: the disconnect cancelled nothing.
	g, err = gone.get(ctx, bridge.EventID(ws[0].stream, n))
	if err != nil || g.StatusCode != http.StatusOK {
		t.Fatalf("resume before the answer: %v %v", err, g.Status)
	}
	evs, err := rsReadAll(g.Body)
	g.Body.Close()
	if err != nil || len(evs) != 2 {
		t.Fatalf("resume before the answer read %v %v", evs, err)
	}
	if m, _ := rsParse(evs[1].Data); m.text() != fmt.Sprintf("sent %d", n) || evs[1].ID != bridge.EventID(ws[0].stream, n+1) {
		t.Fatalf("answer %s %s", evs[1].ID, evs[1].Data)
	}

	// The unread connection: what it delivers is in order with no gap. It
	// either kept up (the kernel's buffers took the flood) and ends with
	// the answer, or it fell behind the log and ended early; then a resume
	// from its last event is refused with 410.
	last := stuckID.ID
	answered := false
	for {
		ev, err := rsNext(stuckBody)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s, q, _ := bridge.ParseEventID(last)
		if ev.ID != bridge.EventID(s, q+1) {
			t.Fatalf("after %s came %s", last, ev.ID)
		}
		last = ev.ID
		if m, _ := rsParse(ev.Data); m.Method == "" {
			answered = true
		}
	}
	if !answered {
		g, err := stuck.get(ctx, last)
		if err != nil {
			t.Fatal(err)
		}
		if g.StatusCode != http.StatusGone {
			t.Fatalf("the unread connection ended at %s without its answer, and a resume from there got %s", last, g.Status)
		}
		g.Body.Close()
	}
	t.Logf("the unread connection delivered up to %s (answer: %v)", last, answered)
}

// TestResumeLogFreedWithSession: when a session ends, its open streams end
// (a call in flight gets an error), its log refuses nothing more because
// the session is gone (404), and the log's memory is released: nothing
// keeps it reachable.
func TestResumeLogFreedWithSession(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	if _, err := rsReadAll(c.call(ctx, 1, "progress", map[string]any{"n": 100}, "p").Body); err != nil {
		t.Fatal(err)
	}
	waiting := c.call(ctx, 2, "wait", nil, "")
	defer waiting.Body.Close()
	listen, err := c.get(ctx, "")
	if err != nil || listen.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v", err, listen.Status)
	}
	defer listen.Body.Close()
	var logRef weak.Pointer[session.EventLog]
	var sessRef weak.Pointer[session.Session]
	func() {
		s, err := b.Reg.Get(c.sid)
		if err != nil {
			t.Fatal(err)
		}
		if ev, _, _ := s.Log().Stats(); ev < 100 {
			t.Fatalf("the log holds %d events", ev)
		}
		logRef, sessRef = weak.Make(s.Log()), weak.Make(s)
	}()

	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, b.URL, nil)
	c.headers(req)
	if resp, err := c.hc.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	evs, err := rsReadAll(waiting.Body)
	if err != nil || len(evs) != 2 {
		t.Fatalf("the call in flight got %v %v", evs, err)
	}
	if m, _ := rsParse(evs[1].Data); m.Error == nil || !strings.Contains(m.Error.Message, "session ended") {
		t.Fatalf("the call in flight got %s, want an error saying the session ended", evs[1].Data)
	}
	if rest, err := rsReadAll(listen.Body); err != nil || len(rest) != 1 {
		t.Fatalf("the GET stream got %v %v, want its priming event and its end", rest, err)
	}
	if g, err := c.get(ctx, evs[0].ID); err != nil || g.StatusCode != http.StatusNotFound {
		t.Fatalf("resume in an ended session: %v %v, want 404", err, g.Status)
	} else {
		g.Body.Close()
	}

	// Wait for every goroutine that could hold the session: the child's
	// stop and stdout reader (Shutdown waits for them) and the HTTP
	// handlers (Close waits for them).
	if err := b.Reg.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c.hc.CloseIdleConnections()
	b.srv.Close()
	// A goroutine that has called wg.Done still holds the session on its
	// stack until it returns: collect until it has (a real leak stays
	// reachable through every cycle). This test found that a stopped idle
	// timer, still in the runtime's timer heap, kept ended sessions alive.
	for i := 0; i < 200 && (logRef.Value() != nil || sessRef.Value() != nil); i++ {
		runtime.Gosched()
		runtime.GC()
	}
	if logRef.Value() != nil || sessRef.Value() != nil {
		t.Fatalf("the ended session (%v) or its log (%v) is still reachable", sessRef.Value() != nil, logRef.Value() != nil)
	}
}

package bridge_test

// Replay with Last-Event-ID, its refusals, a stream resumed before its
// answer, and a disconnect that is no cancellation, with a raw HTTP client.

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// TestResumeReplaysAfterLastEventID: a GET with Last-Event-ID replays
// exactly the events of that stream after that ID, then ends; the priming
// event carries the resume point.
func TestResumeReplaysAfterLastEventID(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	// Two streams with events, so that a replay of one could leak the other.
	otherEvs := c.drain(c.call(ctx, 1, "progress", map[string]any{"n": 5}, "other"))
	if len(otherEvs) != 7 {
		t.Fatalf("first call: %d events", len(otherEvs))
	}
	all := c.drain(c.call(ctx, 2, "progress", map[string]any{"n": 10}, "tok"))
	if len(all) != 12 {
		t.Fatalf("second call: %d events", len(all))
	}
	if all[0].ID == otherEvs[0].ID || !all[0].priming() {
		t.Fatalf("streams not distinct or not primed: %+v %+v", all[0], otherEvs[0])
	}
	for _, after := range []int{0, 1, 5, 10} {
		resp, err := c.get(ctx, all[after].ID)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET after %s: %v %v", all[after].ID, err, resp.Status)
		}
		got, err := rsReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || !got[0].priming() || got[0].ID != all[after].ID {
			t.Fatalf("GET after %s starts with %+v, want a priming event with that ID", all[after].ID, got)
		}
		if want := all[after+1:]; !rsSameEvents(got[1:], want) {
			t.Fatalf("GET after %s replayed\n%v\nwant\n%v", all[after].ID, got[1:], want)
		}
	}
}

// A resume after the last event of a finished stream gets 204: nothing to
// replay, no stream (a 200 stream that closes at once is resumed
// again, forever, by the TypeScript SDK's transports).
func TestResumeAfterTheEnd(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	all := c.drain(c.call(ctx, 2, "progress", map[string]any{"n": 3}, "tok"))
	resp, err := c.get(ctx, all[len(all)-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET after the answer: %s, want 204", resp.Status)
	}
}

func rsSameEvents(a, b []rsEvent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Data != b[i].Data {
			return false
		}
	}
	return true
}

// TestResumeRefusals: a resume point that names nothing gets 400, one
// whose events were evicted gets 410 Gone, each with a JSON-RPC error body
// that says which; neither replays anything. Every stream here is read to
// its end before the next call, so what is evicted does not depend on how
// fast a connection is read.
func TestResumeRefusals(t *testing.T) {
	const bound = 40
	b := startBridge(t, bridgeConfig{session: session.Options{LogMaxEvents: bound}})
	c := rsOpen(t, b.URL, "2025-11-25") // 1 event: the initialize answer
	ctx := ctxT(t)
	first := c.drain(c.call(ctx, 1, "echo", map[string]any{"text": "first"}, ""))
	if len(first) != 2 {
		t.Fatalf("echo: %v", first)
	}
	s1, _, _ := bridge.ParseEventID(first[0].ID)
	check := func(lastID string, status int, says string) {
		t.Helper()
		resp, err := c.get(ctx, lastID)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body := readAll(t, resp.Body)
		if resp.StatusCode != status || !strings.Contains(body, says) {
			t.Fatalf("GET with Last-Event-ID %q: %s %s\nwant %d and a body saying %q", lastID, resp.Status, body, status, says)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("a refusal came as %q", ct)
		}
		if m, err := rsParse(body); err != nil || m.Error == nil {
			t.Fatalf("a refusal is not a JSON-RPC error: %s", body)
		}
	}
	for _, id := range []string{"nonsense", "1", "+" + first[1].ID, "0" + first[1].ID, bridge.EventID(s1, 2), bridge.EventID(s1+100, 1)} {
		check(id, http.StatusBadRequest, "names no event of this session")
	}
	// A POST with Last-Event-ID is refused: resumption is always a GET.
	hdr := map[string]string{"Mcp-Session-Id": c.sid, "MCP-Protocol-Version": c.version, "Last-Event-ID": first[1].ID}
	if r := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":10,"method":"ping"}`, hdr); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST with Last-Event-ID: %s", r.Status)
	}

	// 31 events (30 progress and the answer) fit in the log with the 2
	// before them; then 20 one-event calls push out the 13 oldest: the
	// initialize answer, the first echo's and the progress stream's first 11.
	prog := c.drain(c.call(ctx, 2, "progress", map[string]any{"n": 30}, "tok"))
	if len(prog) != 32 {
		t.Fatalf("progress: %d events", len(prog))
	}
	for i := range 20 {
		if evs := c.drain(c.call(ctx, 10+i, "echo", map[string]any{"text": "push"}, "")); len(evs) != 2 {
			t.Fatalf("echo: %v", evs)
		}
	}
	check(first[0].ID, http.StatusGone, "evicted") // the stream itself was freed
	check(first[1].ID, http.StatusGone, "evicted")
	check(prog[0].ID, http.StatusGone, "evicted")
	check(prog[10].ID, http.StatusGone, "evicted")
	// After the last evicted event, the replay is whole.
	resp, err := c.get(ctx, prog[11].ID)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET after %s: %v %v", prog[11].ID, err, resp.Status)
	}
	got, err := rsReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(got) == 0 || got[0].ID != prog[11].ID || !rsSameEvents(got[1:], prog[12:]) {
		t.Fatalf("replay after %s: %v %v, want %v", prog[11].ID, got, err, prog[12:])
	}
}

// TestResumePendingAnswer: a POST stream resumed before its answer exists
// goes on live on the resumed connection, and a second resume supersedes
// the first. Closing the POST connection did not cancel the request: the
// child still waits for the client's sampling answer and then answers.
func TestResumePendingAnswer(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	resp := c.call(ctx, 7, "sample", map[string]any{"text": "hello"}, "")
	br := bufio.NewReader(resp.Body)
	prime, err := rsNext(br)
	if err != nil || !prime.priming() {
		t.Fatalf("priming: %+v %v", prime, err)
	}
	sampling, err := rsNext(br)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rsParse(sampling.Data)
	if err != nil || m.Method != "sampling/createMessage" {
		t.Fatalf("expected the child's sampling request, got %s", sampling.Data)
	}
	resp.Body.Close() // the client leaves

	g1, err := c.get(ctx, prime.ID)
	if err != nil || g1.StatusCode != http.StatusOK {
		t.Fatalf("first resume: %v %v", err, g1.Status)
	}
	br1 := bufio.NewReader(g1.Body)
	if ev, err := rsNext(br1); err != nil || ev.ID != prime.ID || !ev.priming() {
		t.Fatalf("first resume primed with %+v %v", ev, err)
	}
	if ev, err := rsNext(br1); err != nil || ev.ID != sampling.ID || ev.Data != sampling.Data {
		t.Fatalf("first resume replayed %+v %v, want the sampling request", ev, err)
	}
	// A second resume takes the stream over: the first connection ends.
	g2, err := c.get(ctx, sampling.ID)
	if err != nil || g2.StatusCode != http.StatusOK {
		t.Fatalf("second resume: %v %v", err, g2.Status)
	}
	defer g2.Body.Close()
	if rest, err := rsReadAll(br1); err != nil || len(rest) != 0 {
		t.Fatalf("the superseded connection got %v %v, want a clean end", rest, err)
	}
	g1.Body.Close()
	br2 := bufio.NewReader(g2.Body)
	if ev, err := rsNext(br2); err != nil || ev.ID != sampling.ID || !ev.priming() {
		t.Fatalf("second resume primed with %+v %v", ev, err)
	}
	// Answer the sampling request; the tool's answer comes live on g2.
	answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"role":"assistant","model":"test","content":{"type":"text","text":"world"}}}`, m.ID)
	if r := c.post(ctx, answer); r.StatusCode != http.StatusAccepted {
		t.Fatalf("posting the sampling answer: %s", r.Status)
	} else {
		r.Body.Close()
	}
	rest, err := rsReadAll(br2)
	if err != nil || len(rest) != 1 {
		t.Fatalf("the resumed stream carried %v %v, want the answer then its end", rest, err)
	}
	s, q, _ := bridge.ParseEventID(sampling.ID)
	if a, _ := rsParse(rest[0].Data); string(a.ID) != "7" || a.text() != "sampled: world" || rest[0].ID != bridge.EventID(s, q+1) {
		t.Fatalf("answer %s %s", rest[0].ID, rest[0].Data)
	}
}

// TestResumeDisconnectIsNotCancellation: the client leaves right after the
// priming event; the child is not told, and its whole output lands in the
// log, where a resume fetches it.
func TestResumeDisconnectIsNotCancellation(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	resp := c.call(ctx, 3, "progress", map[string]any{"n": 50}, "tok")
	prime, err := rsNext(bufio.NewReader(resp.Body))
	if err != nil || !prime.priming() {
		t.Fatal(prime, err)
	}
	resp.Body.Close()
	g, err := c.get(ctx, prime.ID)
	if err != nil || g.StatusCode != http.StatusOK {
		t.Fatalf("resume: %v %v", err, g.Status)
	}
	evs, err := rsReadAll(g.Body)
	g.Body.Close()
	if err != nil || len(evs) != 52 {
		t.Fatalf("resume read %d events, %v; want priming + 50 progress + answer", len(evs), err)
	}
	if m, _ := rsParse(evs[51].Data); m.text() != "sent 50" {
		t.Fatalf("answer %s: the request was cancelled or lost", evs[51].Data)
	}
}

// rsRecorder is an http.RoundTripper that keeps a transcript of every
// exchange (bodies of SSE responses included, teed as the client reads
// them) and can cut SSE responses at random bytes after their first event.

package bridge_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// sseLines reads an SSE stream line by line, for tests that react to what
// arrives rather than read the stream to its end.
type sseLines struct {
	t  *testing.T
	br *bufio.Reader
}

func (s sseLines) line() string {
	s.t.Helper()
	l, err := s.br.ReadString('\n')
	if err != nil {
		s.t.Fatalf("the stream ended: %v", err)
	}
	return strings.TrimSuffix(l, "\n")
}

// event reads lines until the end of an event that has data, counting the
// keep-alive comments on the way.
func (s sseLines) event() (ev sseEvent, comments int) {
	s.t.Helper()
	for {
		l := s.line()
		switch {
		case l == ": keep-alive":
			comments++
		case strings.HasPrefix(l, "id: "):
			ev.ID = strings.TrimPrefix(l, "id: ")
		case strings.HasPrefix(l, "data: "):
			ev.Data = strings.TrimPrefix(l, "data: ")
		case strings.HasPrefix(l, "retry: "):
			ev.Retry = strings.TrimPrefix(l, "retry: ")
		case l == "" && ev.ID != "":
			return ev, comments
		}
	}
}

func seqOf(t *testing.T, id string) (string, int) {
	t.Helper()
	i := strings.LastIndexByte(id, '_')
	n, err := strconv.Atoi(id[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("event ID %q is not <stream>_<seq>", id)
	}
	return id[:i], n
}

// The standalone stream of a 2025 session gets keep-alive comments while
// quiet; they carry no ID, so the events around them keep consecutive
// IDs and a resume from an event before them replays what came after.
func TestStandaloneStreamKeepAlive(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{SSEKeepAlive: 10 * time.Millisecond}})
	sid := rawSession(t, b.URL, "2025-11-25")
	h := map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
	get := func(last string) sseLines {
		req, _ := http.NewRequest(http.MethodGet, b.URL, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		return sseLines{t, bufio.NewReader(resp.Body)}
	}
	stream := get("")
	prime, _ := stream.event()
	for stream.line() != ": keep-alive" {
	}
	// "changed" makes the server send tools/list_changed on this stream.
	resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"changed"}}`, h)
	readAll(t, resp.Body)
	changed, _ := stream.event()
	if !strings.Contains(changed.Data, "notifications/tools/list_changed") {
		t.Fatalf("event %+v; want tools/list_changed", changed)
	}
	ps, pn := seqOf(t, prime.ID)
	cs, cn := seqOf(t, changed.ID)
	if cs != ps || cn != pn+1 {
		t.Fatalf("priming event %s, then keep-alives, then event %s: want the next ID of the same stream", prime.ID, changed.ID)
	}
	// Quiet again: more comments.
	for stream.line() != ": keep-alive" {
	}
	// A resume from the priming event, past the comments, replays the
	// event, under its ID.
	resumed := get(prime.ID)
	again, _ := resumed.event()
	if again.Data == "" { // the resumed stream's own priming event
		again, _ = resumed.event()
	}
	if again != changed {
		t.Fatalf("resumed from %s: %+v; want %+v", prime.ID, again, changed)
	}
}

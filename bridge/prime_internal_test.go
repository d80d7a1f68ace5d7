package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// heldLauncher starts MCP servers in memory that the test drives: each
// one is sent on the channel.
type heldLauncher chan *memchild.Child

func (l heldLauncher) Launch(context.Context, string) (peer.Process, error) {
	c := memchild.New(nil)
	l <- c
	return c, nil
}

// heldPost is one POST served on its own goroutine.
type heldPost struct {
	rec  *flushRecorder
	done chan struct{}
}

func startPost(h *Handler, sid, body string) *heldPost {
	p := &heldPost{rec: &flushRecorder{header: http.Header{}}, done: make(chan struct{})}
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", primingVersion)
	}
	go func() {
		defer close(p.done)
		h.ServeHTTP(p.rec, req)
		p.rec.FlushError() // net/http writes what is left when the handler returns
	}()
	return p
}

// answer reads the next request the child got and answers it.
func answer(t *testing.T, child *memchild.Child, result string) {
	t.Helper()
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if line := child.Read(t); json.Unmarshal([]byte(line), &m) != nil || m.ID == nil {
		t.Fatalf("the child got %q; want a request", line)
	}
	child.Say(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+result+`}`)
}

// An SSE stream's priming event waits primeFlushDelay for the answer, so
// that a quick answer leaves in the same write; on a busy bridge (more
// requests in flight than busyInflight) it is flushed at once, since the
// answers take longer than that anyway. Either way it comes before the
// answer, and a stream quiet for SSEKeepAlive after it gets a comment.
func TestPrimeFlushedAtOnceWhenBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 25 * time.Second
		logger := slog.New(slog.DiscardHandler)
		kids := make(heldLauncher, 1)
		reg := session.NewRegistry(&session.Options{Launcher: kids, Logger: logger})
		h := NewHandler(reg, &Options{SSEKeepAlive: every, Logger: logger})
		h.busyInflight = 2

		init := startPost(h, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+primingVersion+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		child := <-kids
		answer(t, child, `{"protocolVersion":"`+primingVersion+`","capabilities":{},"serverInfo":{"name":"m","version":"1"}}`)
		<-init.done
		sid := init.rec.header.Get("Mcp-Session-Id")
		if sid == "" {
			t.Fatalf("initialize: no session (%q)", init.rec.take())
		}
		initialized := startPost(h, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		<-initialized.done
		child.Read(t)

		call := func(id string) *heldPost {
			return startPost(h, sid, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
		}
		// Up to busyInflight requests in flight: each stream's priming
		// event waits for its answer, primeFlushDelay at most.
		var quiet []*heldPost
		for _, id := range []string{"1", "2"} {
			p := call(id)
			synctest.Wait()
			if got := p.rec.take(); got != "" {
				t.Fatalf("request %s, %d in flight: %q flushed at once; want the priming event held for its answer", id, reg.Inflight(), got)
			}
			quiet = append(quiet, p)
		}
		// One more: busy, the priming event goes out at once.
		busy := call("3")
		synctest.Wait()
		if got := busy.rec.take(); !strings.HasPrefix(got, "id: ") || !strings.HasSuffix(got, "_0\ndata: \n\n") {
			t.Fatalf("request 3, %d in flight: %q flushed at once; want the priming event", reg.Inflight(), got)
		}
		time.Sleep(primeFlushDelay)
		synctest.Wait()
		for i, p := range quiet {
			if got := p.rec.take(); !strings.HasPrefix(got, "id: ") || !strings.HasSuffix(got, "_0\ndata: \n\n") {
				t.Fatalf("request %d after primeFlushDelay without its answer: %q flushed; want the priming event", i+1, got)
			}
		}
		// Quiet for SSEKeepAlive: a comment on each stream.
		time.Sleep(every)
		synctest.Wait()
		for i, p := range append(quiet, busy) {
			if got := p.rec.take(); got != keepAliveComment {
				t.Fatalf("request %d quiet for %s: %q flushed; want %q", i+1, every, got, keepAliveComment)
			}
		}
		for range 3 {
			answer(t, child, `{"content":[]}`)
		}
		for i, p := range append(quiet, busy) {
			<-p.done
			if got := p.rec.take(); !strings.Contains(got, "_1\ndata: {") || !strings.Contains(got, `"content":[]`) {
				t.Fatalf("request %d: the stream ended with %q; want the answer as event 1", i+1, got)
			}
		}
		if err := reg.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

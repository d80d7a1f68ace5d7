package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
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
// that a quick answer leaves with it in one write, however many requests
// are in flight; one without its answer by then gets the priming event on
// its own, before the answer, and a stream quiet for SSEKeepAlive after it
// gets a comment.
func TestPrimeHeldForTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 25 * time.Second
		logger := slog.New(slog.DiscardHandler)
		kids := make(heldLauncher, 1)
		reg := session.NewRegistry(&session.Options{Launcher: kids, Logger: logger})
		h := NewHandler(reg, &Options{SSEKeepAlive: every, Logger: logger})

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

		// More requests in flight than a 2-core bridge's old threshold for
		// flushing at once (eight): each stream's priming event is held.
		const inflight = 12
		var calls []*heldPost
		for i := range inflight {
			p := startPost(h, sid, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+1)+`,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
			synctest.Wait()
			if got := p.rec.take(); got != "" {
				t.Fatalf("request %d in flight: %q flushed at once; want the priming event held for its answer", i+1, got)
			}
			calls = append(calls, p)
		}
		// The first answer comes within primeFlushDelay: the priming event
		// and the answer leave together.
		answer(t, child, `{"content":[]}`)
		<-calls[0].done
		if got := calls[0].rec.take(); !strings.HasPrefix(got, "id: ") || !strings.Contains(got, "_0\ndata: \n\nid: ") || !strings.Contains(got, `"content":[]`) {
			t.Fatalf("request 1 answered within %s: %q; want the priming event and the answer", primeFlushDelay, got)
		}
		if n := calls[0].rec.flushes(); n != 1 {
			t.Fatalf("request 1 answered within %s: written in %d flushes; want the priming event and the answer in one", primeFlushDelay, n)
		}
		quiet := calls[1:]
		time.Sleep(primeFlushDelay)
		synctest.Wait()
		for i, p := range quiet {
			if got := p.rec.take(); !strings.HasPrefix(got, "id: ") || !strings.HasSuffix(got, "_0\ndata: \n\n") {
				t.Fatalf("request %d after primeFlushDelay without its answer: %q flushed; want the priming event", i+2, got)
			}
		}
		// Quiet for SSEKeepAlive: a comment on each stream.
		time.Sleep(every)
		synctest.Wait()
		for i, p := range quiet {
			if got := p.rec.take(); got != keepAliveComment {
				t.Fatalf("request %d quiet for %s: %q flushed; want %q", i+2, every, got, keepAliveComment)
			}
		}
		for range quiet {
			answer(t, child, `{"content":[]}`)
		}
		for i, p := range quiet {
			<-p.done
			if got := p.rec.take(); !strings.Contains(got, "_1\ndata: {") || !strings.Contains(got, `"content":[]`) {
				t.Fatalf("request %d: the stream ended with %q; want the answer as event 1", i+2, got)
			}
		}
		if err := reg.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

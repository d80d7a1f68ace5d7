package bridge

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// memLauncher starts MCP servers in memory that answer every request with
// an empty result, for tests on synctest's clock (a real process's pipes
// are no durable block).
type memLauncher struct{}

func (memLauncher) Launch(context.Context, string) (peer.Process, error) {
	c := memchild.New(nil)
	c.Serve()
	return c, nil
}

// flushRecorder is a streaming ResponseWriter: what was written reaches
// the test at each flush, as on a connection.
type flushRecorder struct {
	header  http.Header
	mu      sync.Mutex
	pending strings.Builder
	flushed strings.Builder
	writes  int // flushes that had something to write
}

func (r *flushRecorder) Header() http.Header { return r.header }
func (r *flushRecorder) WriteHeader(int)     {}
func (r *flushRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending.Write(p)
}

func (r *flushRecorder) FlushError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending.Len() > 0 {
		r.writes++
	}
	r.flushed.WriteString(r.pending.String())
	r.pending.Reset()
	return nil
}

// flushes returns how many flushes had something to write.
func (r *flushRecorder) flushes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

// take returns what was flushed since the last take.
func (r *flushRecorder) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.flushed.String()
	r.flushed.Reset()
	return s
}

// legacyStream opens a legacy SSE stream on a handler with keepAlive, in
// memory, and returns the handler, the stream's recorder (what was
// flushed before is its endpoint URL, returned too) and a function that
// closes the stream and shuts the registry down. Call it in a synctest
// bubble.
func legacyStream(t *testing.T, keepAlive time.Duration) (h *Handler, rec *flushRecorder, endpoint string, end func()) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	reg := session.NewRegistry(&session.Options{Launcher: memLauncher{}, Logger: logger})
	h = NewHandler(reg, &Options{SSEKeepAlive: keepAlive, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	rec = &flushRecorder{header: http.Header{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/sse", nil))
	}()
	synctest.Wait()
	first := rec.take()
	endpoint, ok := strings.CutPrefix(first, "event: endpoint\ndata: ")
	if !ok || !strings.HasSuffix(endpoint, "\n\n") {
		t.Fatalf("the stream began with %q; want the endpoint event", first)
	}
	return h, rec, strings.TrimSuffix(endpoint, "\n\n"), func() {
		cancel()
		<-done
		if err := reg.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// A quiet legacy SSE stream gets a comment every SSEKeepAlive, counted
// from its last write: not before, and not while events flow.
func TestLegacySSEKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 25 * time.Second
		h, rec, endpoint, end := legacyStream(t, every)

		quiet := func(what string) {
			t.Helper()
			time.Sleep(every - time.Nanosecond)
			synctest.Wait()
			if got := rec.take(); got != "" {
				t.Fatalf("%s: %q written before the stream was quiet for %s", what, got, every)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if got := rec.take(); got != keepAliveComment {
				t.Fatalf("%s: after %s of quiet the stream got %q; want %q", what, every, got, keepAliveComment)
			}
		}
		quiet("after the endpoint event")
		quiet("after a comment")

		// A message and its answer, 10 s into the quiet: the next comment
		// comes SSEKeepAlive after the answer, not after the last comment.
		time.Sleep(10 * time.Second)
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		post := httptest.NewRecorder()
		h.ServeHTTP(post, req)
		if post.Code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", endpoint, post.Code, post.Body)
		}
		synctest.Wait()
		if got, want := rec.take(), "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n"; got != want {
			t.Fatalf("the answer on the stream: %q; want %q", got, want)
		}
		quiet("after an event")
		end()
	})
}

// With SSEKeepAlive negative, a quiet stream stays silent.
func TestLegacySSEKeepAliveOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rec, _, end := legacyStream(t, -1)
		time.Sleep(10 * DefaultSSEKeepAlive)
		synctest.Wait()
		if got := rec.take(); got != "" {
			t.Fatalf("keep-alives off, the quiet stream got %q", got)
		}
		end()
	})
}

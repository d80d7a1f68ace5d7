package bridge

import (
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// streamKeeper writes one stateless response: the events the pool emits,
// and an SSE comment whenever the response has been quiet for
// SSEKeepAlive, from the handler's one keep-alive timer (Handler.keepAlives:
// a runtime timer per request cost an allocation, or two updates of the
// runtime's timer heap, on every call; the handler's goroutine waits in
// the pool meanwhile). A call that says nothing for that long is switched
// to an SSE stream so that the comment can be sent: its answer then comes
// as the stream's last event, which revision 2026-07-28 allows for any
// answer. "Servers are encouraged to periodically emit an SSE comment line
// ... as a keep-alive" (basic/transports/streamable-http): behind a proxy
// with an idle timeout, a quiet subscriptions/listen or a long call dies
// without one. One writer for both: the pool's listen has no
// keep-alive of its own where the bridge's front end keeps its streams.
type streamKeeper struct {
	quiet peer.Timeout // expires (Expire) after SSEKeepAlive of quiet
	ts    *peer.Timeouts

	mu sync.Mutex // serializes the writes to w
	w  http.ResponseWriter
	// The keeper's own renewal of the write deadline (its rc is rc): the
	// handler renews it too, each one a deadline no earlier than its own
	// last, so the later one holds; and the response's writeDeadline
	// stays on the handler's stack, not on the heap once per request.
	dl        writeDeadline
	rc        http.ResponseController
	streaming bool  // the SSE headers were sent
	done      bool  // the handler took the response back: write nothing
	err       error // a failed keep-alive write: the next emit returns it
}

// keepers are streamKeepers, reused across requests.
var keepers = sync.Pool{New: func() any { return new(streamKeeper) }}

// newStreamKeeper returns a keeper for one response; ts nil: no
// keep-alives (nil: emit writes directly).
func newStreamKeeper(w http.ResponseWriter, writeTimeout time.Duration, ts *peer.Timeouts) *streamKeeper {
	if ts == nil {
		return nil
	}
	k := keepers.Get().(*streamKeeper)
	k.ts, k.w = ts, w
	k.rc = *http.NewResponseController(w)
	k.dl = writeDeadline{rc: &k.rc, timeout: writeTimeout}
	ts.Start(&k.quiet, k)
	return k
}

// Expire implements peer.Expirer: the response has been quiet for
// SSEKeepAlive. The comment is written on a goroutine of its own: the
// timer is every response's, and a write may wait for a slow client.
func (k *streamKeeper) Expire() { go k.fire() }

// fire writes a keep-alive comment on a quiet response.
func (k *streamKeeper) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done || k.err != nil {
		return
	}
	k.dl.extend()
	if !k.streaming {
		k.streaming = true
		startSSE(k.w)
	}
	if _, err := io.WriteString(k.w, ":\n\n"); err != nil {
		k.err = err
		return
	}
	if err := k.dl.rc.Flush(); err != nil {
		k.err = err
		return
	}
	k.ts.Start(&k.quiet, k)
}

// emit writes one event (nil: a comment) with write, under the keeper's
// lock, and re-arms the timer.
func (k *streamKeeper) emit(write func() error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return k.err
	}
	if err := write(); err != nil {
		return err
	}
	// (Expired already: the fire on its way writes a comment and starts
	// the quiet time again.)
	k.ts.Restart(&k.quiet)
	return nil
}

// finish takes the response back for the handler, and reports whether it
// is an SSE stream by now. Once it returns, the timer writes nothing.
func (k *streamKeeper) finish() (streaming bool) {
	k.mu.Lock()
	k.done = true
	stopped := k.ts.Stop(&k.quiet)
	streaming = k.streaming
	k.w, k.dl, k.rc = nil, writeDeadline{}, http.ResponseController{}
	k.mu.Unlock()
	if stopped {
		// No fire is pending or running (it would hold or wait for the
		// lock): the keeper is safe to reuse. Otherwise the collector
		// takes it, once that fire has seen done.
		k.streaming, k.done, k.err = false, false, nil
		keepers.Put(k)
	}
	return streaming
}

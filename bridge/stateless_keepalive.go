package bridge

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// streamKeeper writes one stateless response: the events the pool emits,
// and an SSE comment whenever the response has been quiet for
// SSEKeepAlive, from a timer of its own (the handler's goroutine waits in
// the pool meanwhile). A call that says nothing for that long is switched
// to an SSE stream so that the comment can be sent: its answer then comes
// as the stream's last event, which revision 2026-07-28 allows for any
// answer. "Servers are encouraged to periodically emit an SSE comment line
// ... as a keep-alive" (basic/transports/streamable-http): behind a proxy
// with an idle timeout, a quiet subscriptions/listen or a long call dies
// without one. One writer for both: the pool's listen has no
// keep-alive of its own where the bridge's front end keeps its streams.
type streamKeeper struct {
	t     *time.Timer // fires fire; armed for every
	every time.Duration

	mu        sync.Mutex // serializes the writes to w
	w         http.ResponseWriter
	dl        *writeDeadline
	streaming bool  // the SSE headers were sent
	done      bool  // the handler took the response back: write nothing
	err       error // a failed keep-alive write: the next emit returns it
}

// keepers are streamKeepers with their timer, reused across requests: a
// timer is an allocation per request otherwise.
var keepers = sync.Pool{New: func() any {
	k := new(streamKeeper)
	k.t = time.AfterFunc(time.Hour, k.fire)
	k.t.Stop()
	return k
}}

// newStreamKeeper returns a keeper for one response; every <= 0: no
// keep-alives (nil: emit writes directly).
func newStreamKeeper(w http.ResponseWriter, dl *writeDeadline, every time.Duration) *streamKeeper {
	if every <= 0 {
		return nil
	}
	k := keepers.Get().(*streamKeeper)
	k.every, k.w, k.dl = every, w, dl
	k.t.Reset(every)
	return k
}

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
	k.t.Reset(k.every)
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
	k.t.Reset(k.every)
	return nil
}

// finish takes the response back for the handler, and reports whether it
// is an SSE stream by now. Once it returns, the timer writes nothing.
func (k *streamKeeper) finish() (streaming bool) {
	k.mu.Lock()
	k.done = true
	stopped := k.t.Stop()
	streaming = k.streaming
	k.w, k.dl = nil, nil
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

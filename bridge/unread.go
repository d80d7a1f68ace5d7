package bridge

import (
	"net/http"
	"time"
)

// boundUnreadBody puts a read deadline of timeout (if positive) on the
// connection of a request that has a body, as its handler starts, just
// after its headers arrived. A handler that reads the body (readBody) sets
// its own and lifts it once the body is read, so that the answer's stream
// is not cut. One that answers without reading it (401, 403 for Origin or
// Host, 404, 405, 406, 415, ...) leaves it: net/http then discards a body
// declared under 256 KiB before it writes the answer, and without a
// deadline a client that declared 200,000 bytes, sent one and stalled held
// its connection forever; --max-connections of them locked every other
// client out. With it, the discard fails at the
// deadline, and net/http writes the answer and closes the connection.
//
// GET streams and other requests without a body get no deadline: a read
// deadline reached while a response streams would cancel the request.
func boundUnreadBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if timeout <= 0 || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
}

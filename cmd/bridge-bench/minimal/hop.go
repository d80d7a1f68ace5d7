package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// The hop floor: HTTP in front of one stdio child per session, doing the
// least any bridge must do and nothing else. A POST's body goes to its
// session's child as one line; for a request, the child's next line is the
// answer, written back as application/json. No validation, no routing by
// id, no event log, no SSE, no timeouts: what it costs over the HTTP floor
// is the hop itself (a pipe write, a pipe read, a second process), which
// is what the bridge must add as little as possible to.
type hop struct {
	exe string
	sse bool // answer as SSE (the SSE hop floor, -ssehop)

	mu       sync.Mutex
	sessions map[string]*hopChild
	next     int
}

type hopChild struct {
	mu      sync.Mutex // one message in flight, as the load generator sends them
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	streams atomic.Uint64 // SSE streams opened, for their event IDs
}

func newHop(sse bool) (*hop, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &hop{exe: exe, sse: sse, sessions: map[string]*hopChild{}}, nil
}

func (h *hop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		h.end(r.Header.Get("Mcp-Session-Id"))
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	var err error
	if sid == "" {
		if sid, err = h.start(); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Mcp-Session-Id", sid)
	}
	h.mu.Lock()
	c := h.sessions[sid]
	h.mu.Unlock()
	if c == nil {
		http.Error(w, "no such session", http.StatusNotFound)
		return
	}
	request := bytes.Contains(body, []byte(`"id"`))
	if h.sse && request {
		c.serveSSE(w, body)
		return
	}
	answer, err := c.exchange(body, request, nil)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
	case answer == nil:
		w.WriteHeader(http.StatusAccepted)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}
}

// exchange writes msg as a line and, for a request, reads the answer
// line, appended to dst.
func (c *hopChild) exchange(msg []byte, request bool, dst []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.in.Write(append(msg, '\n')); err != nil {
		return nil, err
	}
	if !request {
		return nil, nil
	}
	line, err := c.out.ReadSlice('\n')
	return append(dst, line...), err // a copy, as a bridge must: the reader reuses its buffer
}

// serveSSE answers a request as the SSE hop floor does: what the SSE
// framing of an answer costs at the least, with the guarantees a 2025-11-25
// server gives its client and nothing else. The headers and a priming
// event go out at once, flushed before the request reaches the child
// ("the server SHOULD immediately send an SSE event consisting of an event
// ID and an empty data field in order to prime the client to reconnect"):
// that is a write of its own whenever the answer takes longer than the
// flush, as it does with many sessions on a small machine. Then the
// answer, as one event with an ID, and the end of the response, in the
// write net/http makes when the handler returns. No event log, no
// keep-alives, no resumption: an event ID that nothing could resume is the
// floor's only saving over a server that keeps its promise.
func (c *hopChild) serveSSE(w http.ResponseWriter, body []byte) {
	stream := c.streams.Add(1)
	hd := w.Header()
	hd["Content-Type"] = sseContentType
	hd["Cache-Control"] = sseCacheControl
	w.WriteHeader(http.StatusOK)
	ev := make([]byte, 0, 512)
	ev = append(ev, "id: "...)
	ev = strconv.AppendUint(ev, stream, 10)
	ev = append(ev, "_0\ndata: \n\n"...)
	w.Write(ev)
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	ev = append(ev[:0], "id: "...)
	ev = strconv.AppendUint(ev, stream, 10)
	ev = append(ev, "_1\ndata: "...)
	ev, err := c.exchange(body, true, ev)
	if err != nil {
		return // the client sees the response end without an answer
	}
	// The child's line ends in a newline; an event ends in a blank line.
	ev = append(ev, '\n')
	w.Write(ev)
}

// Header values of the SSE hop floor's answers, shared as the bridge
// shares its own.
var (
	sseContentType  = []string{"text/event-stream"}
	sseCacheControl = []string{"no-cache"}
)

func (h *hop) start() (string, error) {
	cmd := exec.Command(h.exe)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	sid := "hop-" + strconv.Itoa(h.next)
	h.sessions[sid] = &hopChild{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}
	return sid, nil
}

func (h *hop) end(sid string) {
	h.mu.Lock()
	c := h.sessions[sid]
	delete(h.sessions, sid)
	h.mu.Unlock()
	if c != nil {
		c.in.Close() // the child exits at the end of its stdin
		c.cmd.Wait()
	}
}

// closeAll ends every session's child.
func (h *hop) closeAll() {
	h.mu.Lock()
	var sids []string
	for sid := range h.sessions {
		sids = append(sids, sid)
	}
	h.mu.Unlock()
	for _, sid := range sids {
		h.end(sid)
	}
}

// serveHop serves the hop floor on addr until stdin ends; with sse, the
// SSE hop floor.
func serveHop(addr string, sse bool) error {
	h, err := newHop(sse)
	if err != nil {
		return err
	}
	name := "hop floor"
	if sse {
		name = "SSE hop floor"
	}
	return serveFloor(name, addr, h, h.closeAll)
}

// serveFloor serves a floor's handler on addr until stdin ends, then
// closes what it started.
func serveFloor(name, addr string, h http.Handler, closeAll func()) error {
	defer closeAll()
	err := serveUntilStdinEnds(addr, h)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

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

	mu       sync.Mutex
	sessions map[string]*hopChild
	next     int
}

type hopChild struct {
	mu  sync.Mutex // one message in flight, as the load generator sends them
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func newHop() (*hop, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &hop{exe: exe, sessions: map[string]*hopChild{}}, nil
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
	answer, err := c.exchange(body, bytes.Contains(body, []byte(`"id"`)))
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

// exchange writes msg as a line and, for a request, reads the answer line.
func (c *hopChild) exchange(msg []byte, request bool) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.in.Write(append(msg, '\n')); err != nil {
		return nil, err
	}
	if !request {
		return nil, nil
	}
	line, err := c.out.ReadSlice('\n')
	return bytes.Clone(line), err // as a bridge must: the reader reuses its buffer
}

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

// serveHop serves the hop floor on addr until stdin ends.
func serveHop(addr string) error {
	h, err := newHop()
	if err != nil {
		return err
	}
	return serveFloor("hop floor", addr, h, h.closeAll)
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

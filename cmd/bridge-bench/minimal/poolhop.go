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
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// The pool hop floor: HTTP in front of a few stdio children shared by every
// client (one per core), doing the least a stateless (revision 2026-07-28)
// front end on a pool must do and nothing else. A POST's request goes to
// the least busy child under an id of the floor's own (clients' ids
// collide), and the child's answer goes back with the client's id put back.
// No validation, no _meta, no result decoration, no interception point: what
// it costs over the HTTP floor is the shared hop (pipe writes and reads to
// a few processes, an id table), so that the stateless rows can be read
// against what any pool could reach on this machine.
type poolHop struct {
	children []*poolChild
	ids      atomic.Int64
}

type poolChild struct {
	cmd  *exec.Cmd
	busy atomic.Int64

	wmu sync.Mutex // one writer of in at a time
	in  io.WriteCloser

	mu      sync.Mutex
	waiting map[int64]chan []byte // by the floor's id; the reader answers
}

func newPoolHop(n int) (*poolHop, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &poolHop{}
	for range n {
		c, err := startPoolChild(exe)
		if err != nil {
			p.close()
			return nil, err
		}
		p.children = append(p.children, c)
	}
	return p, nil
}

func startPoolChild(exe string) (*poolChild, error) {
	cmd := exec.Command(exe)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &poolChild{cmd: cmd, in: in, waiting: map[int64]chan []byte{}}
	r := bufio.NewReaderSize(out, 64<<10)
	// The pool initializes its children itself, as the bridge does.
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pool-hop","version":"1.0.0"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
	if _, err := io.WriteString(in, init); err != nil {
		return nil, err
	}
	if _, err := r.ReadSlice('\n'); err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	go c.read(r)
	return c, nil
}

// read hands each answer line to the request waiting for its id, until
// the child's stdout ends.
func (c *poolChild) read(r *bufio.Reader) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			c.mu.Lock()
			for id, ch := range c.waiting {
				close(ch) // no answer will come
				delete(c.waiting, id)
			}
			c.mu.Unlock()
			return
		}
		at, end, ok := idAt(line)
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(string(line[at:end]), 10, 64)
		if err != nil {
			continue
		}
		c.mu.Lock()
		ch := c.waiting[id]
		delete(c.waiting, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- bytes.Clone(line) // the reader reuses its buffer
		}
	}
}

// idAt finds the value of a message's first "id" member (the bench's
// messages put it before any nested object).
func idAt(msg []byte) (start, end int, ok bool) {
	i := bytes.Index(msg, []byte(`"id":`))
	if i < 0 {
		return 0, 0, false
	}
	start = i + len(`"id":`)
	end = start
	for end < len(msg) && msg[end] != ',' && msg[end] != '}' {
		end++
	}
	return start, end, end < len(msg)
}

func (p *poolHop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	c := p.children[0]
	for _, o := range p.children[1:] {
		if o.busy.Load() < c.busy.Load() {
			c = o
		}
	}
	at, end, ok := idAt(body)
	if !ok { // a notification
		c.write(body)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	clientID := bytes.Clone(body[at:end])
	id := p.ids.Add(1)
	msg := append(append(append(make([]byte, 0, len(body)+24), body[:at]...), strconv.FormatInt(id, 10)...), body[end:]...)
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	c.busy.Add(1)
	err := c.write(msg)
	var answer []byte
	if err == nil {
		answer = <-ch
	}
	c.busy.Add(-1)
	if err == nil && answer == nil {
		err = errors.New("the child ended")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	at, end, _ = idAt(answer)
	w.Header().Set("Content-Type", "application/json")
	w.Write(answer[:at])
	w.Write(clientID)
	w.Write(answer[end:])
}

func (c *poolChild) write(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.in.Write(append(msg, '\n'))
	return err
}

func (p *poolHop) close() {
	for _, c := range p.children {
		c.in.Close() // the child exits at the end of its stdin
		c.cmd.Wait()
	}
}

// servePoolHop serves the pool hop floor on addr until stdin ends.
func servePoolHop(addr string) error {
	p, err := newPoolHop(runtime.NumCPU())
	if err != nil {
		return fmt.Errorf("pool hop floor: %w", err)
	}
	return serveFloor("pool hop floor", addr, p, p.close)
}

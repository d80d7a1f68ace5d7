package peer_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// memProcess is a sandbox.Process in memory, driven by a test: it reads
// what the Conn writes to the child's stdin line by line, and writes what
// the child says. It is the scripted child of the transcripts.
type memProcess struct {
	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter
	lines   chan string // lines read from stdin, in order

	exited chan struct{}
	status error
	once   sync.Once
	reader sync.WaitGroup
}

func newMemProcess() *memProcess {
	p := &memProcess{lines: make(chan string, 64), exited: make(chan struct{})}
	p.stdinR, p.stdinW = io.Pipe()
	p.stdoutR, p.stdoutW = io.Pipe()
	p.reader.Add(1)
	go func() {
		defer p.reader.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(p.stdinR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

func (p *memProcess) ID() string                 { return "mem" }
func (p *memProcess) Stdin() io.WriteCloser      { return p.stdinW }
func (p *memProcess) Stdout() io.Reader          { return p.stdoutR }
func (p *memProcess) Wait() error                { <-p.exited; return p.status }
func (p *memProcess) Stop(context.Context) error { p.exit(errors.New("stopped")); return nil }

// say writes a line as the child.
func (p *memProcess) say(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdoutW, line+"\n"); err != nil {
		t.Fatalf("the child cannot write: %v", err)
	}
}

// heard returns the next line the child read.
func (p *memProcess) heard(t testing.TB) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatal("the child's stdin was closed")
		}
		return line
	case <-time.After(10 * time.Second):
		t.Fatal("the child read nothing for 10s")
	}
	return ""
}

// exit ends the child: stdout closes, then Wait returns status.
func (p *memProcess) exit(status error) {
	p.once.Do(func() {
		p.status = status
		p.stdoutW.Close()
		p.stdinR.Close()
		close(p.exited)
	})
	p.reader.Wait()
}

// routed is what a Router was given.
type routed struct {
	origin any
	data   string
	own    bool
}

// chanRouter records what the Conn hands it.
type chanRouter struct {
	msgs  chan routed
	ended chan error
}

func newChanRouter() *chanRouter {
	return &chanRouter{msgs: make(chan routed, 64), ended: make(chan error, 1)}
}

func (r *chanRouter) Route(m *peer.Message) {
	r.msgs <- routed{origin: m.Origin, data: string(m.Data), own: m.Own}
}

func (r *chanRouter) Ended(err error) { r.ended <- err }

func (r *chanRouter) next(t testing.TB) routed {
	t.Helper()
	select {
	case m := <-r.msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the router got nothing for 10s")
	}
	return routed{}
}

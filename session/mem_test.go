package session_test

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

// memProcess is a child in memory, driven by a test (the scripted child
// of the transcripts): it reads its stdin line by line and writes what the
// test says.
type memProcess struct {
	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter
	lines   chan string

	exited  chan struct{}
	status  error
	once    sync.Once
	reader  sync.WaitGroup
	stopped chan struct{} // closed by Stop
	stop    sync.Once
}

func newMemProcess() *memProcess {
	p := &memProcess{lines: make(chan string, 64), exited: make(chan struct{}), stopped: make(chan struct{})}
	p.stdinR, p.stdinW = io.Pipe()
	p.stdoutR, p.stdoutW = io.Pipe()
	p.reader.Add(1)
	go func() {
		defer p.reader.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(p.stdinR)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

func (p *memProcess) ID() string            { return "mem" }
func (p *memProcess) Stdin() io.WriteCloser { return p.stdinW }
func (p *memProcess) Stdout() io.Reader     { return p.stdoutR }
func (p *memProcess) Wait() error           { <-p.exited; return p.status }
func (p *memProcess) Stop(context.Context) error {
	p.stop.Do(func() { close(p.stopped) })
	p.exit(errors.New("stopped"))
	return nil
}

func (p *memProcess) say(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdoutW, line+"\n"); err != nil {
		t.Fatalf("the child cannot write: %v", err)
	}
}

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

func (p *memProcess) exit(status error) {
	p.once.Do(func() {
		p.status = status
		p.stdoutW.Close()
		p.stdinR.Close()
		close(p.exited)
	})
	p.reader.Wait()
}

// memLauncher launches memProcesses and hands each to the test.
type memLauncher struct{ procs chan *memProcess }

func (l memLauncher) Launch(context.Context, string) (peer.Process, error) {
	p := newMemProcess()
	l.procs <- p
	return p, nil
}

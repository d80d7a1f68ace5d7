package peer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// deafStdin is the stdin of a child that stopped reading: writes wait
// until resume is closed, their write deadline passes (os.ErrDeadlineExceeded,
// as a pipe fails), or Close.
type deafStdin struct {
	mu       sync.Mutex
	deadline time.Time
	changed  chan struct{} // closed and replaced when the deadline changes
	resume   chan struct{}
	closed   chan struct{}
	once     sync.Once
	got      bytes.Buffer
}

func newDeafStdin() *deafStdin {
	return &deafStdin{changed: make(chan struct{}), resume: make(chan struct{}), closed: make(chan struct{})}
}

func (s *deafStdin) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

func (s *deafStdin) Write(p []byte) (int, error) {
	for {
		s.mu.Lock()
		deadline, changed := s.deadline, s.changed
		s.mu.Unlock()
		var expired <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-s.resume:
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.got.Write(p)
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		case <-changed:
		case <-s.closed:
			return 0, os.ErrClosed
		}
	}
}

func (s *deafStdin) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *deafStdin) written() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got.String()
}

// deafProcess is a child whose stdin is a deafStdin.
type deafProcess struct {
	stdin   *deafStdin
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter
	exited  chan struct{}
	once    sync.Once
}

func (p *deafProcess) ID() string            { return "deaf" }
func (p *deafProcess) Stdin() io.WriteCloser { return p.stdin }
func (p *deafProcess) Stdout() io.Reader     { return p.stdoutR }
func (p *deafProcess) Wait() error           { <-p.exited; return nil }
func (p *deafProcess) Stop(context.Context) error {
	p.once.Do(func() {
		p.stdin.Close()
		p.stdoutW.Close()
		close(p.exited)
	})
	return nil
}

// A Send to a child that stopped reading waited for
// ever. SendBy gives up at its deadline: in the middle of its write
// (ErrWriting; the rest is written once the child reads again, whole and
// in order), or behind another write (ErrStalled; nothing is written).
func TestSendByDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stdoutR, stdoutW := io.Pipe()
		proc := &deafProcess{stdin: newDeafStdin(), stdoutR: stdoutR, stdoutW: stdoutW, exited: make(chan struct{})}
		conn := peer.New(proc, discardRouter{}, nil)
		msg := func(data string) jsonrpc.Message {
			env, err := jsonrpc.Parse([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			return jsonrpc.Message{Data: []byte(data), Env: env}
		}
		first := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`
		second := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}`
		start := time.Now()
		if err := conn.SendBy(client("c"), start.Add(time.Minute), msg(first)); !errors.Is(err, peer.ErrWriting) {
			t.Fatalf("SendBy to a child that does not read: %v, want ErrWriting", err)
		}
		if waited := time.Since(start); waited != time.Minute {
			t.Fatalf("SendBy returned after %s, want its deadline", waited)
		}
		start = time.Now()
		if err := conn.SendBy(client("c"), start.Add(time.Minute), msg(second)); !errors.Is(err, peer.ErrStalled) || !errors.Is(err, peer.ErrBusy) {
			t.Fatalf("SendBy behind a stalled write: %v, want ErrStalled", err)
		}
		if waited := time.Since(start); waited != time.Minute {
			t.Fatalf("SendBy returned after %s, want its deadline", waited)
		}
		close(proc.stdin.resume) // the child reads again
		synctest.Wait()
		if got := proc.stdin.written(); got != first+"\n" {
			t.Fatalf("the child read %q, want the first request whole and nothing of the second", got)
		}
		// The right to write is free again.
		if err := conn.SendBy(client("c"), time.Now().Add(time.Minute), msg(second)); err != nil {
			t.Fatalf("SendBy once the child reads: %v", err)
		}
		if got := proc.stdin.written(); got != first+"\n"+second+"\n" {
			t.Fatalf("the child read %q", got)
		}
		conn.Close(context.Background())
	})
}

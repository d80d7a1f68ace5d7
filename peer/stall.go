package peer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// A child that stops reading its stdin (stopped, hung, or just busy) once
// blocked every Send for good: the first in its write, the others behind
// it, and the requests they carried were answered only when the session
// ended, whatever --request-timeout said. SendBy bounds
// both waits by a deadline.

var (
	// ErrStalled: SendBy's deadline passed while it waited for the writes
	// before it (the child is not reading its stdin). Nothing of its
	// messages was written, and its requests are forgotten. It is an
	// ErrBusy.
	ErrStalled = fmt.Errorf("%w: its stdin stayed blocked until the request's deadline", ErrBusy)
	// ErrWriting: SendBy's deadline passed in the middle of its writes.
	// What was not written yet is written in the background, in order (a
	// line cannot be cut), until the child reads it or the connection
	// ends; its requests stay in flight.
	ErrWriting = errors.New("the MCP server did not read its stdin before the request's deadline; the rest is written when it does")
)

// writeDeadliner is a stdin whose writes can be given a deadline: a pipe
// (*os.File) or the connection of a container's attach.
type writeDeadliner interface {
	SetWriteDeadline(time.Time) error
}

// writeLock is the right to write to stdin: a mutex, which costs an
// uncontended Send two atomic operations (a channel used as a semaphore
// cost some 300 instructions a call, BenchmarkShortCall under valgrind),
// and a way for SendBy to stop waiting for it at a deadline.
type writeLock struct {
	mu sync.Mutex
	// timed counts the waiters with a deadline; while there are some,
	// each unlock closes freed, under cmu, to wake them.
	timed atomic.Int32
	cmu   sync.Mutex
	freed chan struct{}
}

// lock takes the right to write, waiting at most until deadline (zero: no
// bound). It reports false if the deadline passed.
func (l *writeLock) lock(deadline time.Time) bool {
	if l.mu.TryLock() {
		return true
	}
	if deadline.IsZero() {
		l.mu.Lock()
		return true
	}
	l.timed.Add(1)
	defer l.timed.Add(-1)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		// The channel is taken before trying: an unlock after the try
		// closes it, so no wake-up is lost.
		l.cmu.Lock()
		if l.freed == nil {
			l.freed = make(chan struct{})
		}
		freed := l.freed
		l.cmu.Unlock()
		if l.mu.TryLock() {
			return true
		}
		select {
		case <-freed:
		case <-t.C:
			return false
		}
	}
}

func (l *writeLock) unlock() {
	l.mu.Unlock()
	if l.timed.Load() > 0 {
		l.cmu.Lock()
		if l.freed != nil {
			close(l.freed)
			l.freed = nil
		}
		l.cmu.Unlock()
	}
}

// lockWrite takes the right to write to stdin, waiting at most until
// deadline (zero: no bound). It reports false if the deadline passed.
func (c *Conn) lockWrite(deadline time.Time) bool { return c.wlock.lock(deadline) }

func (c *Conn) unlockWrite() { c.wlock.unlock() }

// writeBy makes the writes that follow fail with os.ErrDeadlineExceeded
// after deadline (zero: never), where stdin allows it. A deadline set
// earlier is kept when it is at most 1/16 of the time left before
// deadline: setting one updates a runtime timer, and consecutive requests'
// deadlines differ by little. Called with the right to write.
func (c *Conn) writeBy(deadline time.Time) {
	if c.dl == nil || deadline.Equal(c.dlSet) {
		return
	}
	if !deadline.IsZero() && !c.dlSet.IsZero() && !c.dlSet.After(deadline) {
		if now := time.Now(); c.dlSet.Sub(now) > deadline.Sub(now)*15/16 {
			return
		}
	}
	if c.dl.SetWriteDeadline(deadline) == nil {
		c.dlSet = deadline
	}
}

// stalledWrite is writeLine's error when the write deadline passed in the
// middle of a line: rest is what remains of it.
type stalledWrite struct{ rest []byte }

func (*stalledWrite) Error() string { return "write deadline passed in the middle of a line" }

// write writes p and then more (nil: nothing) to stdin. When the write
// deadline passes first, it returns a *stalledWrite with a copy of what
// was not written.
func (c *Conn) write(p, more []byte) error {
	n, err := c.stdin.Write(p)
	if err == nil && more != nil {
		p, more = more, nil
		n, err = c.stdin.Write(p)
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		rest := append(bytes.Clone(p[n:]), more...)
		return &stalledWrite{rest}
	}
	return err
}

// finish writes, without a deadline, what a SendBy could not write before
// its own: the rest of a line, then the messages after it. It holds the
// right to write, and gives it up at the end. It ends when the child has
// read it all or stdin fails (Close stops the child, which closes stdin).
func (c *Conn) finish(origin Origin, rest []byte, msgs []jsonrpc.Message, size int) {
	defer c.bg.Done()
	defer c.queued.Add(-int64(size))
	defer c.unlockWrite()
	c.writeBy(time.Time{})
	if _, err := c.stdin.Write(rest); err != nil {
		c.forget(origin, msgs)
		return
	}
	for i := range msgs {
		m := &msgs[i]
		ids, ok, err := c.register(origin, m)
		if err != nil {
			c.forget(origin, msgs[i:])
			return
		}
		if !ok {
			continue
		}
		if err := c.writeLine(m.Data, &ids); err != nil {
			c.forget(origin, msgs[i:])
			return
		}
	}
}

// cloneMessages copies msgs and their bytes, for finish: the caller may
// reuse them once SendBy returned.
func cloneMessages(msgs []jsonrpc.Message) []jsonrpc.Message {
	out := make([]jsonrpc.Message, len(msgs))
	for i := range msgs {
		out[i] = jsonrpc.Message{Data: bytes.Clone(msgs[i].Data), Env: msgs[i].Env}
	}
	return out
}

// Package memchild is a stdio MCP server in memory, for tests: a Child is
// a peer.Process (and a sandbox.Process) whose stdin and stdout are
// io.Pipes, driven by the test, which reads the lines the bridge writes
// to the child and writes the child's lines itself (or lets Serve answer
// every request).
//
// Its pipes are io.Pipes, so that a goroutine waiting on one is durably
// blocked for testing/synctest, where a real process's pipes are not; a
// pump reads stdin into lines, so that the bridge's writes do not wait for
// the test. Nothing here sleeps or times out: a test outside synctest
// bounds its own waits (see Lines).
package memchild

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
)

// Options configure a Child. Every zero value means the documented
// default.
type Options struct {
	// ID is what ID returns. Empty means "mem".
	ID string
	// Paused starts the child without reading its stdin until Resume: a
	// server that does not read yet (the bridge's writes then block).
	Paused bool
	// StopStatus is what Wait returns after Stop. Nil means an error
	// "stopped".
	StopStatus error
}

// A Child is an MCP server in memory. Its methods are safe for
// concurrent use.
type Child struct {
	id         string
	stopStatus error

	inR  *io.PipeReader // the pump reads what the bridge writes to stdin
	inW  *io.PipeWriter
	outR *io.PipeReader // the bridge reads what the test writes to stdout
	outW *io.PipeWriter

	lines chan string    // stdin's lines; closed by the pump when stdin ends
	pump  sync.WaitGroup // the pump; Exit waits for it

	exitOnce sync.Once
	exited   chan struct{} // closed when the "process" has exited
	status   error         // the exit status, set before exited is closed

	stopOnce sync.Once
	stopped  chan struct{} // closed when Stop was called

	resumeOnce sync.Once
	resume     chan struct{} // nil, or closed by Resume to start the pump
}

// maxLine bounds a line of stdin the pump reads.
const maxLine = 64 << 20

// New returns a running Child. opts nil means the defaults.
func New(opts *Options) *Child {
	if opts == nil {
		opts = &Options{}
	}
	c := &Child{
		id:         opts.ID,
		stopStatus: opts.StopStatus,
		lines:      make(chan string, 1<<16),
		exited:     make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	if c.id == "" {
		c.id = "mem"
	}
	if c.stopStatus == nil {
		c.stopStatus = errors.New("stopped")
	}
	if opts.Paused {
		c.resume = make(chan struct{})
	}
	c.inR, c.inW = io.Pipe()
	c.outR, c.outW = io.Pipe()
	// The pump ends when the child exits (Exit closes inR) or the bridge
	// closes stdin.
	c.pump.Add(1)
	go func() {
		defer c.pump.Done()
		defer close(c.lines)
		if c.resume != nil {
			select {
			case <-c.resume:
			case <-c.exited:
				return
			}
		}
		sc := bufio.NewScanner(c.inR)
		sc.Buffer(nil, maxLine)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	return c
}

func (c *Child) ID() string            { return c.id }
func (c *Child) Stdin() io.WriteCloser { return c.inW }
func (c *Child) Stdout() io.Reader     { return c.outR }
func (c *Child) Wait() error           { <-c.exited; return c.status }

// Stop ends the child with Options.StopStatus.
func (c *Child) Stop(context.Context) error {
	c.stopOnce.Do(func() { close(c.stopped) })
	c.Exit(c.stopStatus)
	return nil
}

// Stopped is closed once Stop was called.
func (c *Child) Stopped() <-chan struct{} { return c.stopped }

// Exited is closed once the child has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Resume starts reading stdin, for a child started Paused.
func (c *Child) Resume() {
	if c.resume != nil {
		c.resumeOnce.Do(func() { close(c.resume) })
	}
}

// CloseStdout closes the child's stdout while it goes on running: a
// server that can answer nothing more but has not exited.
func (c *Child) CloseStdout() { c.outW.Close() }

// Exit ends the child: its pipes close, as the kernel would close them,
// and Wait returns status. Only the first call counts.
func (c *Child) Exit(status error) {
	c.exitOnce.Do(func() {
		c.status = status
		c.inR.CloseWithError(io.ErrClosedPipe)
		c.outW.Close()
		close(c.exited)
	})
	c.pump.Wait()
}

// Lines are the lines the bridge wrote to the child's stdin, in order;
// closed when stdin ends. A test outside synctest reads it in a select
// with a bound of its own.
func (c *Child) Lines() <-chan string { return c.lines }

// Read returns the next line the bridge wrote to the child's stdin, and
// fails the test if stdin ended first. It waits as long as it takes.
func (c *Child) Read(t testing.TB) string {
	t.Helper()
	line, ok := <-c.lines
	if !ok {
		t.Fatal("the child's stdin ended")
	}
	return line
}

// Write writes data to the child's stdout as it is.
func (c *Child) Write(t testing.TB, data string) {
	t.Helper()
	if _, err := io.WriteString(c.outW, data); err != nil {
		t.Fatalf("writing the child's stdout: %v", err)
	}
}

// Say writes one line to the child's stdout.
func (c *Child) Say(t testing.TB, line string) {
	t.Helper()
	c.Write(t, line+"\n")
}

// Serve answers every request the child reads with an empty result, on a
// goroutine of its own that ends with stdin: the child is a server that
// does nothing, for tests of what surrounds it. Call it once, and read
// nothing else of the child.
func (c *Child) Serve() {
	go func() {
		for line := range c.lines {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(line), &m) == nil && m.ID != nil {
				// An error means the child exited: the loop ends with stdin.
				_, _ = io.WriteString(c.outW, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{}}`+"\n")
			}
		}
	}()
}

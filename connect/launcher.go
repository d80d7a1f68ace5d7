package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// Launcher runs Run in process as a stdio MCP server: each Launch returns
// a sandbox.Process whose stdin and stdout are io.Pipes to a Run against
// the remote of Options, so that what starts stdio children (a session
// registry, a pool, an aggregate's member) reaches a remote server (issue
// 31, "remote members").
//
// The remote's credentials are the Options' own (Token, Header, OAuth),
// from the configuration: nothing of the launch's context, and so
// nothing of the client whose session launches it, reaches the remote
// (issue 31: "The client's own Authorization never reaches a remote
// member").
type Launcher struct {
	opts Options
	seq  atomic.Int64
}

// NewLauncher checks opts as Run would and returns the launcher; opts is
// copied.
func NewLauncher(opts *Options) (*Launcher, error) {
	if opts == nil || opts.URL == "" {
		return nil, errors.New("a remote member needs a URL")
	}
	switch opts.Transport {
	case "", TransportAuto, TransportStreamable, TransportSSE:
	default:
		return nil, fmt.Errorf("transport %q: want auto, streamable or sse", opts.Transport)
	}
	return &Launcher{opts: *opts}, nil
}

// Launch starts one forwarder. ctx bounds nothing after Launch returns:
// the forwarder runs until its stdin is closed or it is stopped.
func (l *Launcher) Launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: session %s: %w", sandbox.ErrLaunch, sessionID, err)
	}
	p := &remote{id: "remote " + l.opts.URL + " #" + strconv.FormatInt(l.seq.Add(1), 10), done: make(chan struct{})}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	var runCtx context.Context
	runCtx, p.cancel = context.WithCancel(context.Background())
	o := l.opts
	if o.Logger != nil {
		o.Logger = o.Logger.With("session", sessionID)
	}
	go func() {
		err := Run(runCtx, p.inR, p.outW, &o)
		// Run may leave its reader blocked on stdin: closing it ends that.
		p.inR.CloseWithError(io.ErrClosedPipe)
		p.outW.Close()
		p.cancel()
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// remote is one forwarder, as a sandbox.Process.
type remote struct {
	id     string
	inR    *io.PipeReader
	inW    *io.PipeWriter
	outR   *io.PipeReader
	outW   *io.PipeWriter
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{} // closed when Run has returned; err set before
	err    error
}

func (p *remote) ID() string            { return p.id }
func (p *remote) Stdin() io.WriteCloser { return p.inW }
func (p *remote) Stdout() io.Reader     { return p.outR }

// Wait returns what Run returned: nil once stdin ended and the remote
// session was ended (DELETE), else why the remote failed.
func (p *remote) Wait() error {
	<-p.done
	if p.err != nil && !errors.Is(p.err, context.Canceled) {
		return &sandbox.ExitError{Code: 1, Stderr: []string{p.err.Error()}}
	}
	return nil
}

// Stop closes stdin, which ends the remote session (DELETE) and Run;
// if ctx ends first, Run is cancelled.
func (p *remote) Stop(ctx context.Context) error {
	p.once.Do(func() { p.inW.Close() })
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.cancel()
		<-p.done
		return ctx.Err()
	}
}

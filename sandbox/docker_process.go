package sandbox

// A running container: its stdio, its exit, and Stop.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// errStopped is what the demultiplexer gets when Stop cut the output off
// (readers of Stdout get io.EOF).
var errStopped = errors.New("sandbox: the MCP server's container was stopped")

// dockerProcess is one session's container. Its goroutines, and who ends
// them:
//   - the stderr reader (Launch): ends when the demultiplexer closes the
//     stderr pipe.
//   - the demultiplexer (Launch): ends when the attach stream ends (the
//     container's output is over) or is closed, or when stdoutR is closed;
//     closes both pipe writers, then outputDone once the stderr reader has
//     returned.
//   - waiter: ends once the container has exited, its output is drained,
//     it is inspected and removed; closes exited, done, then removed.
//   - stopper (the first Stop): ends once removed is closed, or life is
//     cancelled.
//
// The client's own ContainerWait goroutine ends with waiter's receive, or
// with life.
type dockerProcess struct {
	d         *Docker
	id        string
	sessionID string
	egressTag string // the container's tag at the egress proxy, "" without one
	logger    *slog.Logger
	stderr    *stderrLogger

	att     client.HijackedResponse
	conn    io.Closer // att.Conn
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter

	// life bounds every background API call of this container; cancelled
	// only when the container is removed or the launcher gives up (abort).
	life   context.Context
	cancel context.CancelFunc

	stdinOnce sync.Once
	stdinErr  error

	outputDone chan struct{} // closed by the demultiplexer once stdout and stderr are drained
	exited     chan struct{} // closed by waiter once the engine reported the exit
	done       chan struct{} // closed by waiter once err is set
	err        error         // Wait's result
	removed    chan struct{} // closed by waiter once the container is removed (or given up on)
	removeErr  error

	stopOnce  sync.Once
	hurryOnce sync.Once
	// killed is set when Stop's escalation sent SIGKILL: a 137 is then ours,
	// not the kernel's out-of-memory kill.
	killed atomic.Bool
	hurry  chan struct{} // closed when a Stop caller's ctx ended: kill at once
}

// ID returns "container " and the container's short ID.
func (p *dockerProcess) ID() string { return "container " + shortID(p.id) }

func (p *dockerProcess) Stdin() io.WriteCloser { return dockerStdin{p} }

// Stdout returns the server's stdout. The caller must keep reading it: the
// engine sends stdout and stderr on one stream, so an unread stdout also
// holds back stderr (Stop cuts it off after StopGrace).
func (p *dockerProcess) Stdout() io.Reader { return dockerStdout{p.stdoutR} }

// oomSettle bounds how long a container that died of SIGKILL is watched
// for the engine's late record of an out-of-memory kill, in oomSettleTries
// inspections. A second was not always enough while a whole test suite ran
// beside the engine (CI here, twice in one day); only a SIGKILL that Stop
// did not send waits this long, and only until the record appears.
const (
	oomSettle      = 3 * time.Second
	oomSettleTries = 15
)

// Wait returns once the container has exited and its output is drained.
// The result is nil for status 0, else an *ExitError whose Code is the
// status of the container's init: a server killed by signal N shows as
// 128+N (137 for SIGKILL, 143 for SIGTERM), and Signal stays empty, since
// the engine does not tell that from an exit with that status. OOMKilled is
// set if the kernel killed a process of the container for exceeding Memory
// (read from the engine after the exit, before the container is removed).
func (p *dockerProcess) Wait() error {
	<-p.done
	return p.err
}

// dockerStdout turns the end of the output that Stop cut off into io.EOF,
// as for a local child: the caller asked for the end of the output.
type dockerStdout struct{ r *io.PipeReader }

func (s dockerStdout) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if errors.Is(err, io.ErrClosedPipe) {
		err = io.EOF
	}
	return n, err
}

type dockerStdin struct{ p *dockerProcess }

func (s dockerStdin) Write(b []byte) (int, error) { return s.p.att.Conn.Write(b) }

// SetWriteDeadline bounds the writes that follow (see localStdin's).
func (s dockerStdin) SetWriteDeadline(t time.Time) error { return s.p.att.Conn.SetWriteDeadline(t) }

// Close half-closes the attach connection; with StdinOnce, the engine then
// closes the server's stdin.
func (s dockerStdin) Close() error { return s.p.closeStdin() }

func (p *dockerProcess) closeStdin() error {
	p.stdinOnce.Do(func() {
		if _, ok := p.att.Conn.(client.CloseWriter); !ok {
			// Not reachable with unix or TCP (TLS or not) connections.
			p.stdinErr = fmt.Errorf("closing the stdin of %s: the connection to the engine cannot be half-closed", p.ID())
			return
		}
		p.stdinErr = p.att.CloseWrite()
	})
	return p.stdinErr
}

// waiter is the only goroutine that receives the wait result, inspects and
// removes the container.
func (p *dockerProcess) waiter(wait client.ContainerWaitResult) {
	defer p.d.wg.Done()
	defer p.cancel()
	status := int64(-1)
	var werr error
	select {
	case res := <-wait.Result:
		status = res.StatusCode
		if res.Error != nil && res.Error.Message != "" {
			werr = errors.New(res.Error.Message)
		}
	case werr = <-wait.Error:
	}
	close(p.exited)
	if status < 0 {
		// The launcher is aborting, or we lost track of the container (the
		// engine restarted): end it rather than leave it unwatched.
		if p.life.Err() != nil {
			p.logger.Warn("the Docker launcher is closing in a hurry; killing and removing the container")
		} else {
			p.logger.Error("lost track of the MCP server's container; killing and removing it", "error", werr)
		}
		p.removeErr = p.remove()
	}
	<-p.outputDone

	oom := false
	// The engine handles the kernel's OOM event and the exit event apart,
	// and under load records the OOM after the exit: a container killed
	// by SIGKILL (137) that does not say OOMKilled yet is asked again, a
	// few times within oomSettle, before its status is taken as final.
	for try := 0; status >= 0; try++ {
		ctx, cancel := context.WithTimeout(p.life, dockerAPITimeout)
		res, err := p.d.cli.ContainerInspect(ctx, p.id, client.ContainerInspectOptions{})
		cancel()
		switch {
		case cerrdefs.IsNotFound(err):
			p.logger.Warn("the exited container was removed by someone else (another bridge's RemoveLeftovers?); an out-of-memory kill would go unreported")
		case err != nil:
			p.logger.Warn("cannot inspect the exited container; an out-of-memory kill would go unreported", "error", err)
		case res.Container.State != nil:
			oom = res.Container.State.OOMKilled
		}
		if oom || err != nil || status != 137 || p.killed.Load() || try >= oomSettleTries || p.life.Err() != nil {
			break
		}
		time.Sleep(oomSettle / oomSettleTries)
	}
	switch {
	case status < 0:
		p.err = fmt.Errorf("waiting for the MCP server (%s) of session %s: %w", p.ID(), p.sessionID, werr)
	case status != 0:
		p.err = &ExitError{Code: int(status), OOMKilled: oom, Stderr: p.stderr.lines()}
	case oom:
		p.logger.Warn("a process in the container was killed for exceeding its memory limit", "memory", p.d.opts.Memory)
	}
	if p.err != nil {
		p.logger.Info("MCP server container exited", "error", p.err)
	} else {
		p.logger.Info("MCP server container exited", "status", 0)
	}
	close(p.done)

	if status >= 0 {
		p.removeErr = p.remove()
	}
	if p.removeErr != nil {
		p.logger.Warn("cannot remove the container; RemoveLeftovers will", "error", p.removeErr)
	}
	p.conn.Close()
	if p.egressTag != "" {
		p.d.egress.del(p.egressTag)
	}
	// removed before untrack: Close either sees p tracked, or removed.
	close(p.removed)
	p.d.untrack(p)
}

func (p *dockerProcess) remove() error {
	// Not bound by life: the container must go even while the launcher
	// aborts, if the engine still answers.
	ctx, cancel := context.WithTimeout(context.Background(), dockerAPITimeout)
	defer cancel()
	return p.d.removeContainer(ctx, p.id)
}

// Stop ends the container: close stdin, wait StopGrace, SIGTERM to its
// init, wait StopGrace, SIGKILL (see escalation), cut its output off if
// nobody drains it within StopGrace, and remove it. The escalation runs once,
// in a goroutine of its own, whatever the callers' contexts; each caller
// waits for it or for its ctx. A caller whose ctx ends first makes the
// escalation kill the container at once, so a container is never left
// running because its stopper gave up.
func (p *dockerProcess) Stop(ctx context.Context) error {
	p.startStop()
	select {
	case <-p.removed:
		return p.removeErr
	case <-ctx.Done():
	}
	p.hurryOnce.Do(func() { close(p.hurry) })
	select {
	case <-p.removed:
		return p.removeErr
	default:
	}
	return fmt.Errorf("stopping the MCP server (%s) of session %s: %w; it is being killed and removed", p.ID(), p.sessionID, context.Cause(ctx))
}

// startStop starts the stopper once, unless the container is already
// removed. Close calls it for every tracked process before waiting for wg,
// so the stopper's Add can never race with that Wait.
func (p *dockerProcess) startStop() {
	select {
	case <-p.removed:
		return
	default:
	}
	p.stopOnce.Do(func() {
		p.d.wg.Add(1)
		go p.stopper()
	})
}

func (p *dockerProcess) stopper() {
	defer p.d.wg.Done()
	grace := p.d.opts.StopGrace
	e := escalation{
		grace:      grace,
		exited:     p.exited,
		hurry:      p.hurry,
		logger:     p.logger,
		closeStdin: p.closeStdin,
		// The container's init (HostConfig.Init) forwards the signal to
		// the server. Not ContainerStop: it would run an escalation of its
		// own, in whole seconds, that a hurrying caller cannot cut short.
		terminate: func() { p.signal("TERM") },
		kill:      p.kill,
	}
	e.run()
	// The container has exited, or is being killed. If nobody reads stdout,
	// the demultiplexer is stuck and the waiter with it: cut the output.
	if !p.waitFor(p.done, grace) {
		p.logger.Warn("MCP server output not drained after it was stopped; discarding the rest", "grace", grace)
		p.stdoutR.CloseWithError(errStopped)
		p.conn.Close()
	}
	select {
	case <-p.removed:
	case <-p.life.Done():
	}
	// After Stop, Stdout returns io.EOF.
	p.stdoutR.CloseWithError(errStopped)
}

// waitFor reports whether ch was closed within d. It returns false at once
// if a Stop caller gave up or the launcher aborts.
func (p *dockerProcess) waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-p.hurry:
	case <-p.life.Done():
	case <-t.C:
	}
	select { // closed meanwhile counts too
	case <-ch:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the container's processes; the waiter then sees the
// exit and removes it.
func (p *dockerProcess) kill() {
	p.killed.Store(true)
	p.signal("KILL")
}

// signal sends sig to the container's init.
func (p *dockerProcess) signal(sig string) {
	ctx, cancel := context.WithTimeout(p.life, dockerAPITimeout)
	defer cancel()
	_, err := p.d.cli.ContainerKill(ctx, p.id, client.ContainerKillOptions{Signal: sig})
	switch {
	case err == nil, cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err): // conflict: not running any more
	case p.life.Err() != nil: // aborting: the waiter force-removes it
	default:
		p.logger.Warn("cannot signal the container", "signal", "SIG"+sig, "error", err)
	}
}

// abort gives up on the container at once: the launcher is closing and its
// ctx has ended. API calls are cancelled and the output is cut off, so every
// goroutine of p ends promptly.
func (p *dockerProcess) abort() {
	p.hurryOnce.Do(func() { close(p.hurry) })
	p.cancel()
	p.stdoutR.CloseWithError(errStopped)
	p.conn.Close()
}

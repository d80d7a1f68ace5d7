package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
)

// Spares is a Launcher that keeps children started ahead of sessions
// (bridge --warm N), so that a new session does not wait for a process or a
// container to launch: Launch hands out a spare that is already running and
// starts a replacement in the background. It works over any Launcher.
//
// Session IDs: a spare is launched before its session exists, so the inner
// launcher gets a placeholder ID, "warm-<n>", and everything it logs about
// that child (its stderr lines, its exit) carries session=warm-<n> for the
// child's whole life. At hand-out the pool logs the mapping once ("warm MCP
// server handed to a session", with session=<ID> warm=warm-<n>), and the
// handed-out Process's ID names both ("pid 1234, started ahead as warm-7"),
// so the session's own log lines lead to the child's. A container keeps the
// placeholder in its session label.
//
// Spares that die: each spare is watched (a goroutine waits on it). One
// that exits before any session took it is removed from the pool, stopped
// (which releases it, e.g. removes its container) and logged, but not
// replaced at once: a server that cannot stay up would otherwise be
// restarted in a loop. The next Launch refills the pool; a failed
// background launch is likewise logged and retried at the next Launch. A
// spare that dies in the instant between its exit and its watcher noticing
// may still be handed out: its session then ends as for any child that
// exits.
//
// When the pool is empty (more sessions start at once than it holds, or its
// launches failed), Launch starts a child itself with the real session ID,
// as the inner launcher alone would.
//
// Spares is safe for concurrent use. Close stops the spares.
type Spares struct {
	inner  Launcher
	n      int
	logger *slog.Logger

	// ctx is the context of background launches; Close cancels it, so a
	// launcher that honours it gives up a launch in progress.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	spares   []*spare // oldest first; a spare leaves it when handed out, dead or closed
	starting int      // background launches in progress
	seq      uint64   // numbers placeholder IDs
	closed   bool
	hits     uint64 // Launches served by a spare (Stats)
	misses   uint64 // Launches that found the pool empty (Stats)

	// launches counts background launches; Close waits for them. Watchers
	// are not counted: one ends when its child exits, and the child of a
	// handed-out spare belongs to its session, which stops it.
	launches  sync.WaitGroup
	closeErr  error         // the first Close's result, set before closeDone is closed
	closeDone chan struct{} // closed when the first Close returns
}

// spare is a child started ahead.
type spare struct {
	proc Process
	name string // the placeholder session ID, "warm-<n>"
}

var _ Launcher = (*Spares)(nil)

// NewSpares returns a Spares that keeps n children of inner started ahead, and
// starts them now, in the background. With n <= 0 it keeps none: Launch
// calls inner for every session. logger nil means slog.Default().
func NewSpares(inner Launcher, n int, logger *slog.Logger) *Spares {
	if logger == nil {
		logger = slog.Default()
	}
	p := &Spares{
		inner:     inner,
		n:         max(n, 0),
		logger:    logger,
		closeDone: make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.Lock()
	p.refillLocked()
	p.mu.Unlock()
	return p
}

// Launch hands out a spare for sessionID, or starts a child if none is
// ready, and refills the pool in the background.
func (p *Spares) Launch(ctx context.Context, sessionID string) (Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w for session %s: the warm pool is closed (the bridge is shutting down)", ErrLaunch, sessionID)
	}
	var s *spare
	if len(p.spares) > 0 {
		s = p.spares[0]
		p.spares[0] = nil
		p.spares = p.spares[1:]
	}
	if s != nil {
		p.hits++
	} else {
		p.misses++
	}
	p.refillLocked()
	p.mu.Unlock()

	if s == nil {
		return p.inner.Launch(ctx, sessionID)
	}
	id := s.proc.ID()
	p.logger.Info("warm MCP server handed to a session", "session", sessionID, "warm", s.name, "server", id)
	return &pooledProcess{Process: s.proc, id: id + ", started ahead as " + s.name}, nil
}

// Stats counts the Launches served by a spare (hits) and those that found
// the pool empty and started a child themselves (misses), for metrics.
func (p *Spares) Stats() (hits, misses uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits, p.misses
}

// refillLocked starts background launches until the spares and the
// launches in progress number n.
func (p *Spares) refillLocked() {
	for !p.closed && len(p.spares)+p.starting < p.n {
		p.starting++
		p.seq++
		name := "warm-" + strconv.FormatUint(p.seq, 10)
		p.launches.Add(1)
		go p.launch(name)
	}
}

// launch starts one spare. It is counted in p.launches.
func (p *Spares) launch(name string) {
	defer p.launches.Done()
	proc, err := p.inner.Launch(p.ctx, name)
	p.mu.Lock()
	p.starting--
	closed := p.closed
	if err == nil && !closed {
		s := &spare{proc: proc, name: name}
		p.spares = append(p.spares, s)
		p.mu.Unlock()
		// Owned by s's child: ends when it exits (see Spares).
		go p.watch(s)
		return
	}
	p.mu.Unlock()
	switch {
	case err != nil && !closed:
		p.logger.Warn("cannot start a warm MCP server; sessions start cold until the next attempt, at the next session",
			"warm", name, "err", err)
	case err == nil: // closed meanwhile: Close waits for this stop
		if err := proc.Stop(context.Background()); err != nil {
			p.logger.Error("stopping a warm MCP server at close", "warm", name, "server", proc.ID(), "err", err)
		}
	}
}

// watch waits for a spare's child to exit, and discards the spare if it
// was still in the pool.
func (p *Spares) watch(s *spare) {
	werr := s.proc.Wait()
	p.mu.Lock()
	i := slices.Index(p.spares, s)
	if i >= 0 {
		p.spares = slices.Delete(p.spares, i, i+1)
	}
	p.mu.Unlock()
	if i < 0 {
		return // handed out (its session sees the exit) or being closed
	}
	if werr == nil {
		werr = errors.New("exit status 0")
	}
	p.logger.Warn("a warm MCP server exited before any session used it; the pool starts another at the next session",
		"warm", s.name, "server", s.proc.ID(), "err", werr)
	if err := s.proc.Stop(context.Background()); err != nil {
		p.logger.Error("releasing a warm MCP server that exited", "warm", s.name, "server", s.proc.ID(), "err", err)
	}
}

// Close stops the spares and refuses later launches. It waits for the
// spares to stop and for background launches in progress (whose children it
// also stops), or for ctx. Children already handed out belong to their
// sessions and are not touched. Close may be called more than once; later
// calls wait for the first and return its result.
func (p *Spares) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		select {
		case <-p.closeDone:
			return p.closeErr
		case <-ctx.Done():
			return fmt.Errorf("closing the warm pool: %w", ctx.Err())
		}
	}
	p.closed = true
	spares := p.spares
	p.spares = nil
	p.mu.Unlock()
	defer close(p.closeDone)
	p.cancel()

	errs := make([]error, len(spares))
	var wg sync.WaitGroup
	for i, s := range spares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.proc.Stop(ctx); err != nil {
				errs[i] = fmt.Errorf("stopping warm MCP server %s (%s): %w", s.name, s.proc.ID(), err)
			}
		}()
	}
	wg.Wait()
	done := make(chan struct{})
	go func() {
		// Ends when the launches in progress have returned, even after ctx
		// ended: each stops what it started, so none is left running.
		p.launches.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("warm MCP servers still starting at close: %w; they are stopped as soon as they are up", ctx.Err()))
	}
	p.closeErr = errors.Join(errs...)
	return p.closeErr
}

// pooledProcess is a handed-out spare: its ID also names its placeholder.
type pooledProcess struct {
	Process
	id string
}

func (p *pooledProcess) ID() string { return p.id }

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultStopGrace is how long Stop waits after closing stdin before it sends
// SIGTERM, and again after SIGTERM before SIGKILL.
const DefaultStopGrace = 5 * time.Second

// LocalOptions configure a Local launcher. The zero value of each field
// means the documented default.
type LocalOptions struct {
	// Command is the stdio MCP server to run, looked up in PATH if it has no
	// path separator. It is required: Launch fails without it.
	Command string
	// Args are the arguments after Command (not including Command itself).
	Args []string
	// Env holds "NAME=VALUE" entries set in the child's environment (see
	// ParseEnv), on top of the variables of the bridge's environment named
	// in DefaultEnvAllow; a later entry wins. Nothing else of the bridge's
	// environment reaches the child, and no BRIDGE_* variable ever does,
	// even when listed here. Nil adds nothing.
	Env []string
	// Supervisor is the argv that runs the supervisor, the bridge binary in
	// its supervisor mode: {os.Executable(), SuperviseArg}; the descriptor
	// of its socket is appended. One supervisor runs the servers of every
	// Local with the same argv (see supervise.go). With it, every process
	// the server starts ends with the server's session, and with the bridge
	// if the bridge dies (kill -9, a crash). If nil, the server is the bridge's direct child: its group
	// is killed when it exits and the kernel kills it if the bridge dies,
	// but what it started in another group, or what outlives it when the
	// bridge dies, keeps running.
	Supervisor []string
	// Dir is the child's working directory. If empty, the child runs in the
	// bridge's working directory.
	Dir string
	// StopGrace is how long Stop waits after closing stdin before sending
	// SIGTERM to the child's process group, and again after SIGTERM before
	// SIGKILL. It also bounds how long Wait keeps reading stderr after the
	// child exited, in case a process that escaped the group still holds it.
	// If zero or negative, DefaultStopGrace is used.
	StopGrace time.Duration
	// StderrLineBytes bounds one logged stderr line; the rest of a longer
	// line is discarded. If zero or negative, DefaultStderrLineBytes is used.
	StderrLineBytes int
	// StderrTailLines is how many of the last stderr lines an ExitError
	// carries. If zero or negative, DefaultStderrTailLines is used.
	StderrTailLines int
	// StderrRate bounds how many stderr lines per session reach the log;
	// see StderrRate for its zero value.
	StderrRate StderrRate
	// Logger receives the child's stderr lines and its lifecycle events,
	// with the attributes session=<session ID> and pid=<pid>.
	// If nil, slog.Default() at the time of Launch is used.
	Logger *slog.Logger
}

// Local launches each session's MCP server as a local child process in its
// own process group, so that stopping it also ends whatever it started.
//
// A Local is safe for concurrent use. Each running child costs three pipe
// descriptors (released by Stop), two goroutines (without a supervisor, one
// of them waits on a pidfd, or holds an OS thread in waitid where pidfds
// are missing) and, during Stop, a third.
//
// Without a supervisor (LocalOptions.Supervisor), a process that leaves the
// child's group (setsid, setpgid) escapes the group signals; Wait then stops
// reading stderr after StopGrace, and Stop closes stdout, so the bridge never
// hangs on it. With one, the server is the supervisor's child, not the
// bridge's, and the supervisor ends everything of its session (see
// supervise.go); Stop's signals go through it.
//
// The server's environment is scrubbed: see DefaultEnvAllow and
// LocalOptions.Env.
type Local struct {
	opts LocalOptions // a private copy: the caller may reuse its struct

	// With a supervisor: the one shared by every Local of the same
	// Supervisor argv (supervisor_conn.go), held from the first Launch
	// until Close.
	mu     sync.Mutex
	sup    *supervisorConn
	closed bool

	refused     []string // names in opts.Env that are never passed (BRIDGE_*)
	refusedOnce sync.Once
}

// Close releases the supervisor, which ends once the servers it runs have
// exited, unless another Local holds it. Launch still works after Close
// (each supervised server then holds the supervisor itself, until it
// exits). Call it once no more sessions start. Without Close, the
// supervisor ends with the bridge.
func (l *Local) Close() {
	l.mu.Lock()
	sup := l.sup
	l.sup = nil
	l.closed = true
	l.mu.Unlock()
	if sup != nil {
		sup.release()
	}
}

var _ Launcher = (*Local)(nil)

// NewLocal returns a launcher for opts. A nil opts is the zero LocalOptions
// (which has no Command, so Launch will fail until one is given).
func NewLocal(opts *LocalOptions) *Local {
	l := &Local{}
	if opts != nil {
		l.opts = *opts
		l.opts.Args = slices.Clone(opts.Args)
		l.opts.Env = slices.Clone(opts.Env)
		l.opts.Supervisor = slices.Clone(opts.Supervisor)
	}
	for _, kv := range l.opts.Env {
		if name, _, _ := strings.Cut(kv, "="); checkEnvName(name) != nil {
			l.refused = append(l.refused, name)
		}
	}
	if l.opts.StopGrace <= 0 {
		l.opts.StopGrace = DefaultStopGrace
	}
	if l.opts.StderrLineBytes <= 0 {
		l.opts.StderrLineBytes = DefaultStderrLineBytes
	}
	if l.opts.StderrTailLines <= 0 {
		l.opts.StderrTailLines = DefaultStderrTailLines
	}
	return l
}

// Launch starts the command for sessionID.
//
// ctx only bounds the launch itself: the child outlives it and runs until it
// exits or Stop is called (a request's context ending must not kill the
// session's server).
func (l *Local) Launch(ctx context.Context, sessionID string) (Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, err)
	}
	if l.opts.Command == "" {
		return nil, fmt.Errorf("%w for session %s: no command given; pass the MCP server's command and arguments after --", ErrLaunch, sessionID)
	}
	logger := l.opts.Logger
	if logger == nil {
		logger = slog.Default()
	}

	if len(l.refused) > 0 {
		l.refusedOnce.Do(func() {
			logger.Warn("these variables are never passed to a server and were left out", "names", l.refused)
		})
	}
	supervised := len(l.opts.Supervisor) > 0
	env := launchEnv(ctx)
	var c *startedChild
	var err error
	if supervised {
		c, err = l.startSupervised(ctx, sessionID, env, logger)
	} else {
		c, err = l.start(sessionID, exec.Command(l.opts.Command, l.opts.Args...), env)
	}
	if err != nil {
		return nil, err
	}
	stdinW, stdoutR, stderrR := c.stdinW, c.stdoutR, c.stderrR

	pid := c.pid
	logger = logger.With("session", sessionID, "pid", pid)
	if supervised {
		logger = logger.With("supervisor", c.sup.conn.cmd.Process.Pid)
	}
	p := &localProcess{
		cmd:        c.cmd,
		sup:        c.sup,
		pid:        pid,
		logger:     logger,
		grace:      l.opts.StopGrace,
		after:      time.After,
		stdin:      &localStdin{f: stdinW},
		stdout:     &localStdout{f: stdoutR},
		stderrR:    stderrR,
		stderr:     newStderrLogger(logger, l.opts.StderrLineBytes, l.opts.StderrTailLines).withRate(l.opts.StderrRate),
		stderrDone: make(chan struct{}),
		exited:     make(chan struct{}),
		done:       make(chan struct{}),
		hurry:      make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	if !supervised {
		p.pidfd = openPidfd(pid)
	}
	logger.Info("MCP server started", "command", l.opts.Command, "supervised", supervised)
	// Owned by p: the stderr reader ends at EOF, or when wait closes
	// stderrR; wait ends once the child is reaped and stderr drained.
	go func() {
		defer close(p.stderrDone)
		p.stderr.run(stderrR)
	}()
	go p.wait()
	return p, nil
}

// startedChild is a child started by start (cmd) or by the supervisor
// (sup), with the parent's ends of its stdio pipes.
type startedChild struct {
	cmd                      *exec.Cmd // nil under a supervisor
	sup                      *supervisedServer
	pid                      int
	stdinW, stdoutR, stderrR *os.File
}

// supervisedServer is a server started by the supervisor, which holds a
// reference to it until the server's exit is received.
type supervisedServer struct {
	conn   *supervisorConn
	id     uint64
	exited <-chan supEvent
}

// start starts cmd with fresh stdio pipes, the server's environment and
// working directory, in its own process group.
func (l *Local) start(sessionID string, cmd *exec.Cmd, env []string) (*startedChild, error) {
	cmd.Env = serverEnv(os.Environ(), append(slices.Clip(l.opts.Env), env...))
	cmd.Dir = l.opts.Dir
	// Its own process group (pgid = its pid), so signals reach everything it
	// started and nothing of the bridge's group. Pdeathsig: the kernel
	// SIGKILLs the child if the bridge dies without stopping it (kill -9, a
	// crash), so a server that ignores the end of its stdin cannot outlive
	// the bridge as an orphan. (The signal follows the death of the thread
	// that started the child; Go keeps its threads for the life of the
	// process unless a goroutine locked to one exits, which never happens
	// here.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	// Our own pipes rather than cmd.StdinPipe/StdoutPipe: those are closed by
	// cmd.Wait, which would cut the caller's read of stdout short ("it is
	// incorrect to call Wait before all reads from the pipe have completed").
	// With *os.File values, exec passes the child's ends straight through and
	// starts no copying goroutines; the parent's ends stay ours to close.
	ps, err := newStdioPipes()
	if err != nil {
		return nil, l.startError(sessionID, err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ps.child[0], ps.child[1], ps.child[2]
	if err := cmd.Start(); err != nil {
		ps.closeAll()
		return nil, l.startError(sessionID, err)
	}
	// The child has its copies; ours of its ends must go, or stdout and
	// stderr would never reach EOF.
	ps.closeChild()
	return &startedChild{cmd: cmd, pid: cmd.Process.Pid, stdinW: ps.parent[0], stdoutR: ps.parent[1], stderrR: ps.parent[2]}, nil
}

func (l *Local) startError(sessionID string, err error) error {
	return fmt.Errorf("%w for session %s: starting %q: %w (check that the command after -- exists and is executable, and that its directory and environment are valid)",
		ErrLaunch, sessionID, l.opts.Command, err)
}

// stdioPipes are a child's stdin, stdout and stderr pipes: the child's
// ends (stdin's read end, the others' write ends) and the parent's.
type stdioPipes struct {
	child, parent [3]*os.File
}

func newStdioPipes() (*stdioPipes, error) {
	ps := &stdioPipes{}
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			ps.closeAll()
			return nil, err
		}
		if i == 0 {
			ps.child[i], ps.parent[i] = r, w
		} else {
			ps.child[i], ps.parent[i] = w, r
		}
	}
	return ps, nil
}

func (ps *stdioPipes) closeChild() {
	for _, f := range ps.child {
		if f != nil {
			f.Close()
		}
	}
}

func (ps *stdioPipes) closeAll() {
	ps.closeChild()
	for _, f := range ps.parent {
		if f != nil {
			f.Close()
		}
	}
}

// startSupervised asks the supervisor to start the server, with fresh
// stdio pipes, the server's environment and working directory.
func (l *Local) startSupervised(ctx context.Context, sessionID string, env []string, logger *slog.Logger) (*startedChild, error) {
	// The path is resolved here, as exec.Command would, so that a missing
	// command fails Launch with a clear error rather than in the supervisor.
	path, err := exec.LookPath(l.opts.Command)
	if err != nil {
		return nil, fmt.Errorf("%w for session %s: starting %q: %w (check that the command after -- exists and is executable)",
			ErrLaunch, sessionID, l.opts.Command, err)
	}
	sup, err := l.supervisor(logger)
	if err != nil {
		return nil, fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, err)
	}
	ps, err := newStdioPipes()
	if err != nil {
		sup.release()
		return nil, l.startError(sessionID, err)
	}
	req := supRequest{
		Path: path,
		Argv: append([]string{l.opts.Command}, l.opts.Args...),
		Env:  serverEnv(os.Environ(), append(slices.Clip(l.opts.Env), env...)),
		Dir:  l.opts.Dir,
		Mark: ownerMark(),
	}
	id, pid, exited, err := sup.startServer(ctx, req, ps.child)
	ps.closeChild() // the supervisor's server has its copies
	if err != nil {
		ps.closeAll()
		sup.release()
		return nil, l.startError(sessionID, err)
	}
	return &startedChild{
		sup: &supervisedServer{conn: sup, id: id, exited: exited},
		pid: pid, stdinW: ps.parent[0], stdoutR: ps.parent[1], stderrR: ps.parent[2],
	}, nil
}

// supervisor returns the supervisor with a reference for one server: the
// Local's own, acquired on first use, is kept until Close.
func (l *Local) supervisor(logger *slog.Logger) (*supervisorConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sup != nil && !l.sup.isGone() {
		l.sup.acquire()
		return l.sup, nil
	}
	if l.sup != nil { // it died: hold the next one
		old := l.sup
		l.sup = nil
		defer old.release()
	}
	s, err := acquireSupervisor(l.opts.Supervisor, logger)
	if err != nil {
		return nil, err
	}
	if !l.closed {
		l.sup = s
		s.acquire()
	}
	return s, nil
}

// localProcess is a running local child. Its goroutines, and who ends them:
//   - the stderr reader (Launch): ends at EOF on stderr, or when wait closes
//     stderrR; closes stderrDone.
//   - wait: ends once the child is reaped and the stderr reader returned;
//     closes exited, then done.
//   - stop (the first Stop): ends once done is closed; closes stopped.
type localProcess struct {
	cmd *exec.Cmd // nil if supervised
	// sup: the server is the supervisor's child, which kills its group
	// when it exits and takes "term" and "kill" for the group signals (see
	// supervise.go); nil if the server is our child.
	sup *supervisedServer
	pid int // also the process group ID (Setpgid)
	// pidfd is a pidfd of pid for wait (awaitExit) if the server is our
	// child, else nil; wait closes it.
	pidfd  *os.File
	logger *slog.Logger
	grace  time.Duration
	// after starts Stop's grace periods. Tests replace it (before Stop) to
	// decide when a period ends instead of racing the clock with real
	// processes. time.After does not leak: an unreferenced timer is collected.
	after func(time.Duration) <-chan time.Time

	stdin   *localStdin
	stdout  *localStdout
	stderrR *os.File
	stderr  *stderrLogger

	// mu orders group signals against reaping: while the leader is not
	// reaped, even as a zombie, the kernel keeps its pid (our pgid) from
	// being reused, so kill(-pgid) can only reach our group.
	mu     sync.Mutex
	reaped bool

	stderrDone chan struct{} // closed by the stderr reader when it returns
	exited     chan struct{} // closed by wait once the leader is reaped
	done       chan struct{} // closed by wait once err is set and stderr drained
	err        error         // Wait's result, written before done is closed

	stopOnce  sync.Once
	hurryOnce sync.Once
	hurry     chan struct{} // closed when a Stop caller's ctx ended: skip to SIGKILL
	stopped   chan struct{} // closed by stop when the child is gone and fds released
}

func (p *localProcess) ID() string            { return fmt.Sprintf("pid %d", p.pid) }
func (p *localProcess) Stdin() io.WriteCloser { return p.stdin }
func (p *localProcess) Stdout() io.Reader     { return p.stdout }

// Wait returns once the child has exited, everything left in its process
// group has been killed, and its stderr has been drained. Whatever the child
// wrote to stdout stays readable from Stdout after Wait returns, until Stop.
func (p *localProcess) Wait() error {
	<-p.done
	return p.err
}

// wait is the only caller of cmd.Wait.
func (p *localProcess) wait() {
	// Wait for the leader to exit without reaping it (WNOWAIT): as a zombie
	// it still holds the group ID, so the SIGKILL below cannot hit an
	// unrelated group that reused the number. Killing the rest of the group
	// here means nothing the server started outlives it, whether it exited
	// on its own or was stopped: its session is over either way.
	if p.sup != nil {
		p.waitSupervised()
		return
	}
	awaitExit(p.pidfd)
	var info unix.Siginfo
	var err error
	for {
		err = unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	var werr error
	if err != nil {
		// Should not happen. Without knowing that the leader exited, a
		// group kill could cut a running server short: skip it, and reap
		// without holding mu, so that Stop can still signal the group.
		p.logger.Warn("cannot watch the MCP server's exit; processes it started may survive it", "error", err)
		werr = p.cmd.Wait()
		p.mu.Lock()
		p.reaped = true
		p.mu.Unlock()
	} else {
		p.mu.Lock()
		if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.logger.Warn("cannot kill the MCP server's process group", "error", err)
		}
		werr = p.cmd.Wait() // returns at once: the leader is a zombie
		p.reaped = true
		p.mu.Unlock()
	}
	close(p.exited)
	p.finish(func() error { return p.exitError(werr) })
}

// waitSupervised is wait for a server under the supervisor, which reports
// its exit once its group and its session's orphans are killed.
func (p *localProcess) waitSupervised() {
	ev := <-p.sup.exited
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	close(p.exited)
	p.sup.conn.release()
	p.finish(func() error { return p.statusError(syscall.WaitStatus(ev.Status)) })
}

// finish drains stderr, sets Wait's error (exitErr, called once stderr is
// drained, for its last lines) and closes done.
func (p *localProcess) finish(exitErr func() error) {
	// With the group dead, stderr reaches EOF at once unless a process that
	// left the group (setsid) still holds it: bound the wait for that case.
	t := time.NewTimer(p.grace)
	select {
	case <-p.stderrDone:
	case <-t.C:
		p.logger.Warn("stderr still open after the MCP server exited; a process outside its group holds it; closing it")
		p.stderrR.Close() // unblocks the reader's Read
		<-p.stderrDone
	}
	t.Stop()
	p.stderrR.Close()

	p.err = exitErr()
	if p.err != nil {
		p.logger.Info("MCP server exited", "error", p.err)
	} else {
		p.logger.Info("MCP server exited", "status", 0)
	}
	close(p.done)
}

// exitError turns cmd.Wait's result into Wait's.
func (p *localProcess) exitError(werr error) error {
	if werr == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		return fmt.Errorf("waiting for the MCP server (%s): %w", p.ID(), werr)
	}
	e := &ExitError{Code: ee.ExitCode(), Stderr: p.stderr.lines()}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = ws.Signal().String()
	}
	return e
}

// statusError is exitError for a wait status received from the supervisor.
func (p *localProcess) statusError(ws syscall.WaitStatus) error {
	if ws.Exited() && ws.ExitStatus() == 0 {
		return nil
	}
	e := &ExitError{Code: -1, Stderr: p.stderr.lines()} // -1, as exec.ExitError.ExitCode says for a signal
	if ws.Exited() {
		e.Code = ws.ExitStatus()
	}
	if ws.Signaled() {
		e.Signal = ws.Signal().String()
	}
	return e
}

// Stop ends the child (see escalation): close stdin, wait StopGrace, SIGTERM the group, wait
// StopGrace, SIGKILL the group. The escalation runs once, in a goroutine of
// its own, whatever the callers' contexts; each caller waits for it or for
// its ctx. A caller whose ctx ends first makes the escalation skip straight
// to SIGKILL, so a child is never left running because its stopper gave up.
// After Stop, Stdin is closed and Stdout returns io.EOF.
func (p *localProcess) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { go p.stop() })
	select {
	case <-p.stopped:
		return nil
	case <-ctx.Done():
	}
	p.hurryOnce.Do(func() { close(p.hurry) })
	select {
	case <-p.stopped: // also gone: don't report a failure
		return nil
	default:
	}
	return fmt.Errorf("stopping the MCP server (%s): %w; it was sent SIGKILL and should be gone shortly", p.ID(), context.Cause(ctx))
}

func (p *localProcess) stop() {
	defer close(p.stopped)
	e := escalation{
		grace:      p.grace,
		exited:     p.exited,
		hurry:      p.hurry,
		logger:     p.logger,
		after:      p.after,
		closeStdin: p.stdin.Close,
		terminate:  func() { p.signalGroup(syscall.SIGTERM) }, // the whole process group
		kill:       func() { p.signalGroup(syscall.SIGKILL) },
	}
	e.run()
	// Once the leader is reaped, wait has already killed the rest of the
	// group; done follows when stderr is drained.
	<-p.done
	p.stdout.close()
}

// signalGroup sends sig to the child's whole process group, unless the
// leader was already reaped (then wait has killed the group, and the group
// ID may no longer be ours).
func (p *localProcess) signalGroup(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return
	}
	if p.sup != nil {
		// The supervisor reaps the server: it alone can signal its group
		// safely, and reach its session's orphans.
		if err := p.sup.conn.signal(p.sup.id, sig == syscall.SIGKILL); err != nil {
			p.logger.Warn("cannot ask the supervisor to signal the MCP server", "signal", sig.String(), "error", err)
		}
		return
	}
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		// The group is gone though the leader is not reaped: it moved itself
		// to another group (setpgid). Signal it alone, so that Stop still
		// ends it; what it started elsewhere is beyond our reach.
		err = p.cmd.Process.Signal(sig)
		if errors.Is(err, os.ErrProcessDone) {
			err = nil
		}
	}
	if err != nil {
		p.logger.Warn("cannot signal the MCP server's process group", "signal", sig.String(), "error", err)
	}
}

// localStdin makes Close idempotent: the caller and Stop may both close it.
// Closing also unblocks a Write stuck on a full pipe.
type localStdin struct {
	f    *os.File
	once sync.Once
	err  error
}

func (s *localStdin) Write(b []byte) (int, error) { return s.f.Write(b) }

// SetWriteDeadline bounds the writes that follow (the pipe is in the
// runtime's poller): peer.Conn.SendBy gives up waiting for a child that
// stopped reading.
func (s *localStdin) SetWriteDeadline(t time.Time) error { return s.f.SetWriteDeadline(t) }

func (s *localStdin) Close() error {
	s.once.Do(func() { s.err = s.f.Close() })
	return s.err
}

// localStdout is the parent's end of the child's stdout. cmd.Wait never
// touches it; Stop closes it to release the descriptor, after which reads
// return io.EOF: the caller asked for the end of the output.
type localStdout struct {
	f *os.File
}

func (s *localStdout) Read(b []byte) (int, error) {
	n, err := s.f.Read(b)
	if err != nil && errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

// close is called once, by stop.
func (s *localStdout) close() { s.f.Close() }

// openPidfd opens a pidfd of the process pid, a child not yet reaped, for
// awaitExit, or returns nil where pidfds are missing. It is opened as the
// process starts rather than by the goroutine that waits, so that every
// descriptor of a session is open once Launch returns (the connection
// limit keeps descriptors for them).
func openPidfd(pid int) *os.File {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	// A non-blocking descriptor is registered with the poller by NewFile.
	return os.NewFile(uintptr(fd), "pidfd")
}

// awaitExit returns once the process of the pidfd f (nil: none) has
// exited, or when it cannot tell, and closes f. It waits on a pidfd in the network
// poller: a blocking waitid would hold an OS thread per session for the
// session's whole life (1,000 idle sessions were 1,000 threads, 21 KiB of
// bridge RSS each, measured with bridge-bench). Where pidfds are missing
// (Linux before 5.10), it returns at once and the caller's waitid blocks a thread as
// before. The pid cannot be reused meanwhile: the child is ours, and
// unreaped.
func awaitExit(f *os.File) {
	if f == nil {
		return
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd becomes readable when its process exits. RawConn.Read calls
	// the function, and again each time the poller reports the descriptor
	// readable, until it returns true. The function must look for itself:
	// Read first resets the descriptor's readiness, and the poller is
	// edge-triggered, so an exit it reported before (a child that exited
	// at once: the pidfd was registered at start) would never be reported
	// again, and the wait would last for ever with the child a zombie.
	_ = rc.Read(func(fd uintptr) bool { return exited(int(fd)) })
}

// exited reports whether the pidfd fd is readable, its process exited, or
// it cannot tell (then the caller's waitid blocks instead).
func exited(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0
	}
}

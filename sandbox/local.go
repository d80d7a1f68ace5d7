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
	"strconv"
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
	// its supervisor mode: {os.Executable(), SuperviseArg}. The server's
	// path and argv are appended. With it, every process the server starts
	// ends with the server, and with the bridge if the bridge dies (kill -9,
	// a crash). If nil, the server is the bridge's direct child: its group
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
// descriptors (released by Stop), two goroutines (one of them holding an OS
// thread in waitid, as exec.Cmd.Wait would) and, during Stop, a third.
//
// Without a supervisor (LocalOptions.Supervisor), a process that leaves the
// child's group (setsid, setpgid) escapes the group signals; Wait then stops
// reading stderr after StopGrace, and Stop closes stdout, so the bridge never
// hangs on it. With one, the supervisor ends every descendant of the server
// (see supervise.go); then the child is the supervisor, alone in its group.
//
// The server's environment is scrubbed: see DefaultEnvAllow and
// LocalOptions.Env.
type Local struct {
	opts LocalOptions // a private copy: the caller may reuse its struct

	// With a supervisor, one is kept started ahead (startSpare). A spare
	// that is never used ends with the bridge (its lifeline), having
	// started nothing.
	mu        sync.Mutex
	spare     *startedChild
	refilling chan struct{} // closed when the spare being started is ready; nil if none is
	closed    bool          // no more spares (Close)

	refused     []string // names in opts.Env that are never passed (BRIDGE_*)
	refusedOnce sync.Once
}

// Close ends the spare supervisor, if one is ready, and keeps any more from
// being started. Launch still works (each supervisor is then started when
// its session asks). Call it once no more sessions start. Without Close, a
// spare ends with the bridge, having started nothing.
func (l *Local) Close() {
	l.mu.Lock()
	l.closed = true
	refilling := l.refilling
	l.mu.Unlock()
	if refilling != nil {
		<-refilling
	}
	l.mu.Lock()
	c := l.spare
	l.spare = nil
	l.mu.Unlock()
	if c != nil {
		c.close() // end of file on its go pipe: it exits, starting nothing
		c.cmd.Wait()
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
	switch {
	case supervised && len(env) > 0:
		// Its own supervisor, with the session's variables: a spare was
		// started before anyone knew whose child it would be.
		var err error
		if c, err = l.startSpare(sessionID, env); err != nil {
			return nil, err
		}
		_, err = c.goW.Write([]byte{1})
		c.goW.Close()
		c.goW = nil
		if err != nil {
			c.close()
			c.cmd.Process.Kill()
			c.cmd.Wait()
			return nil, fmt.Errorf("%w for session %s: the supervisor exited before it could start the server", ErrLaunch, sessionID)
		}
	case supervised:
		var err error
		if c, err = l.takeSpare(sessionID); err != nil {
			return nil, err
		}
		l.refill()
	default:
		var err error
		if c, err = l.start(sessionID, exec.Command(l.opts.Command, l.opts.Args...), env); err != nil {
			return nil, err
		}
	}
	cmd, stdinW, stdoutR, stderrR := c.cmd, c.stdinW, c.stdoutR, c.stderrR

	pid := cmd.Process.Pid
	logger = logger.With("session", sessionID, "pid", pid)
	p := &localProcess{
		cmd:        cmd,
		pid:        pid,
		logger:     logger,
		grace:      l.opts.StopGrace,
		after:      time.After,
		stdin:      &localStdin{f: stdinW},
		stdout:     &localStdout{f: stdoutR},
		stderrR:    stderrR,
		supervised: supervised,
		stderr:     newStderrLogger(logger, l.opts.StderrLineBytes, l.opts.StderrTailLines).withRate(l.opts.StderrRate),
		stderrDone: make(chan struct{}),
		exited:     make(chan struct{}),
		done:       make(chan struct{}),
		hurry:      make(chan struct{}),
		stopped:    make(chan struct{}),
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

// startedChild is a child started by start, with the parent's ends of its
// stdio pipes.
type startedChild struct {
	cmd                      *exec.Cmd
	stdinW, stdoutR, stderrR *os.File
	goW                      *os.File // a spare supervisor's go pipe; nil otherwise
}

// close releases the parent's ends, for a child that will not be used.
func (c *startedChild) close() {
	for _, f := range []*os.File{c.stdinW, c.stdoutR, c.stderrR, c.goW} {
		if f != nil {
			f.Close()
		}
	}
}

// start starts cmd with fresh stdio pipes, the server's environment and
// working directory, in its own process group.
func (l *Local) start(sessionID string, cmd *exec.Cmd, env []string, extra ...*os.File) (*startedChild, error) {
	supervised := len(l.opts.Supervisor) > 0
	cmd.Env = serverEnv(os.Environ(), append(slices.Clip(l.opts.Env), env...))
	cmd.Dir = l.opts.Dir
	cmd.ExtraFiles = extra
	// Its own process group (pgid = its pid), so signals reach everything it
	// started and nothing of the bridge's group. Pdeathsig: the kernel
	// SIGKILLs the child if the bridge dies without stopping it (kill -9, a
	// crash), so a server that ignores the end of its stdin cannot outlive
	// the bridge as an orphan. (The signal follows the death of the thread
	// that started the child; Go keeps its threads for the life of the
	// process unless a goroutine locked to one exits, which never happens
	// here.)
	//
	// A supervisor gets no parent-death signal: SIGKILL would leave it no
	// time to end the server's descendants. It watches the lifeline instead,
	// and its group holds only itself (it puts the server in another).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if supervised {
		cmd.SysProcAttr.Pdeathsig = 0
	}

	// Our own pipes rather than cmd.StdinPipe/StdoutPipe: those are closed by
	// cmd.Wait, which would cut the caller's read of stdout short ("it is
	// incorrect to call Wait before all reads from the pipe have completed").
	// With *os.File values, exec passes the child's ends straight through and
	// starts no copying goroutines; the parent's ends stay ours to close.
	var files []*os.File // every end, closed on a failed start
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	fail := func(err error) (*startedChild, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("%w for session %s: starting %q: %w (check that the command after -- exists and is executable, and that its directory and environment are valid)",
			ErrLaunch, sessionID, l.opts.Command, err)
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		return fail(err)
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return fail(err)
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		return fail(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	// The child has its copies; ours of its ends must go, or stdout and
	// stderr would never reach EOF.
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	return &startedChild{cmd: cmd, stdinW: stdinW, stdoutR: stdoutR, stderrR: stderrR}, nil
}

// startSpare starts a supervisor that waits, before it starts the server,
// for a byte on its go pipe (fd 4, goFD). Its Go start-up, 10 to 20 ms on a
// loaded machine, is thus paid before a session asks for it; the server
// itself starts only when a session does, as without a supervisor.
func (l *Local) startSpare(sessionID string, env []string) (*startedChild, error) {
	path, err := exec.LookPath(l.opts.Command)
	if err != nil {
		return nil, fmt.Errorf("%w for session %s: starting %q: %w (check that the command after -- exists and is executable)",
			ErrLaunch, sessionID, l.opts.Command, err)
	}
	lr, err := lifeline()
	if err != nil {
		return nil, fmt.Errorf("%w for session %s: creating the supervisor's lifeline: %w", ErrLaunch, sessionID, err)
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, err)
	}
	defer goR.Close() // the supervisor has its copy
	// The path is resolved here, as exec.Command would, so that a missing
	// command fails Launch with a clear error rather than the supervisor.
	args := append(slices.Clone(l.opts.Supervisor[1:]), strconv.Itoa(lifelineFD), strconv.Itoa(goFD), path, l.opts.Command)
	c, err := l.start(sessionID, exec.Command(l.opts.Supervisor[0], append(args, l.opts.Args...)...), env, lr, goR)
	if err != nil {
		goW.Close()
		return nil, err
	}
	c.goW = goW
	return c, nil
}

// takeSpare returns the spare supervisor, told to start the server, or a
// new one if there is none or it is gone.
func (l *Local) takeSpare(sessionID string) (*startedChild, error) {
	l.mu.Lock()
	c, refilling := l.spare, l.refilling
	l.spare = nil
	l.mu.Unlock()
	if c == nil && refilling != nil {
		// A spare is on its way: waiting for it is never slower than
		// starting another beside it, which would compete for the CPU.
		<-refilling
		l.mu.Lock()
		c = l.spare
		l.spare = nil
		l.mu.Unlock()
	}
	for range 2 {
		if c == nil {
			var err error
			if c, err = l.startSpare(sessionID, nil); err != nil {
				return nil, err
			}
		}
		_, err := c.goW.Write([]byte{1})
		c.goW.Close()
		c.goW = nil
		if err == nil {
			return c, nil
		}
		// The spare died (EPIPE): reap it, and start another.
		c.close()
		c.cmd.Process.Kill()
		c.cmd.Wait()
		c = nil
	}
	return nil, fmt.Errorf("%w for session %s: the supervisor exited before it could start the server", ErrLaunch, sessionID)
}

// refill starts a spare supervisor in the background if there is none.
// The goroutine ends once the spare is started.
func (l *Local) refill() {
	l.mu.Lock()
	if l.spare != nil || l.refilling != nil || l.closed {
		l.mu.Unlock()
		return
	}
	done := make(chan struct{})
	l.refilling = done
	l.mu.Unlock()
	go func() {
		c, err := l.startSpare("(spare)", nil)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.refilling = nil
		if err == nil {
			if l.spare != nil { // cannot happen: one refill at a time
				c.close()
			} else {
				l.spare = c
			}
		}
		close(done)
	}()
}

// localProcess is a running local child. Its goroutines, and who ends them:
//   - the stderr reader (Launch): ends at EOF on stderr, or when wait closes
//     stderrR; closes stderrDone.
//   - wait: ends once the child is reaped and the stderr reader returned;
//     closes exited, then done.
//   - stop (the first Stop): ends once done is closed; closes stopped.
type localProcess struct {
	cmd *exec.Cmd
	pid int // also the process group ID (Setpgid)
	// supervised: pid is the supervisor's, alone in its group; it forwards
	// SIGTERM to the server's group and takes supervisorKillSignal for
	// SIGKILL (see supervise.go).
	supervised bool
	logger     *slog.Logger
	grace      time.Duration
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
	awaitExit(p.pid)
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

	p.err = p.exitError(werr)
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
	if p.supervised && sig == syscall.SIGKILL {
		sig = supervisorKillSignal
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

// awaitExit returns once the process pid, a child not yet reaped, has
// exited, or when it cannot tell. It waits on a pidfd in the network
// poller: a blocking waitid would hold an OS thread per session for the
// session's whole life (1,000 idle sessions were 1,000 threads, 21 KiB of
// bridge RSS each, measured with bridge-bench). Where pidfds are missing
// (Linux before 5.10), it returns at once and the caller's waitid blocks a thread as
// before. The pid cannot be reused meanwhile: the child is ours, and
// unreaped.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	// A non-blocking descriptor is registered with the poller by NewFile.
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd becomes readable when its process exits. RawConn.Read calls
	// the function, and again each time the poller reports the descriptor
	// readable, until it returns true.
	polled := false
	_ = rc.Read(func(uintptr) bool {
		done := polled
		polled = true
		return done
	})
}

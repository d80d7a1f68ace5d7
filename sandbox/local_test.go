package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// The test binary plays the MCP server: TestMain runs child mode childEnv
// names instead of the tests.
const (
	childEnv     = "MCP_BRIDGE_SANDBOX_TEST_CHILD"
	childSizeEnv = "MCP_BRIDGE_SANDBOX_TEST_SIZE"
	childValEnv  = "MCP_BRIDGE_SANDBOX_TEST_VALUE"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == SuperviseArg {
		Supervise(os.Args[2:])
	}
	if mode := os.Getenv(childEnv); mode != "" {
		os.Unsetenv(childEnv)
		run := children[mode]
		if run == nil {
			fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
			os.Exit(2)
		}
		run()
		os.Exit(0)
	}
	// Grandchildren orphaned by a test's child are re-parented to this
	// process rather than to PID 1, so a test can reap them and see how they
	// died, instead of waiting on a PID 1 that may reap late or never.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "cannot become a child subreaper: %v\n", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// children are the child modes. Each prints "ready" on stdout once its
// signal handling is in place, where a test needs to know.
var children = map[string]func(){
	// A well-behaved stdio server: echoes lines, exits at stdin EOF.
	"echo": func() {
		r := bufio.NewReader(os.Stdin)
		for {
			line, err := r.ReadBytes('\n')
			os.Stdout.Write(line)
			if err != nil {
				return
			}
		}
	},
	// Survives stdin EOF and SIGTERM: only SIGKILL ends it.
	"ignore-term": func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		go func() {
			for range c {
				fmt.Fprintln(os.Stderr, "ignoring SIGTERM")
			}
		}()
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		blockForever()
	},
	// Survives stdin EOF, exits with status 0 on SIGTERM: a nil Wait shows
	// SIGTERM (and not SIGKILL) ended it.
	"term-exits": func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		go io.Copy(io.Discard, os.Stdin)
		fmt.Println("ready")
		<-c
	},
	// Floods stderr: first lines far over any bound, then, for each stdin
	// line, a large write with no newline before echoing the line, so the
	// echo depends on stderr being drained; meanwhile a goroutine writes
	// more without newline. Exits at stdin EOF.
	"flood": func() {
		big := bytes.Repeat([]byte("x"), 100<<10)
		for i := range 12 {
			fmt.Fprintf(os.Stderr, "huge line %d %s\n", i, big)
		}
		go func() {
			for {
				os.Stderr.Write(big)
			}
		}()
		r := bufio.NewReader(os.Stdin)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			os.Stderr.Write(big)
			os.Stdout.Write(line)
		}
	},
	// Writes stderr lines and exits with status 3 at once, likely before
	// the bridge read them all.
	"exit3": func() {
		w := bufio.NewWriter(os.Stderr)
		for i := range exit3Lines {
			fmt.Fprintf(w, "stderr line %d\n", i)
		}
		w.Flush()
		os.Exit(3)
	},
	// Writes childSizeEnv bytes of a known pattern to stdout and exits.
	"bigout": func() {
		n, _ := strconv.Atoi(os.Getenv(childSizeEnv))
		os.Stdout.Write(pattern(n))
	},
	// Prints its working directory and childValEnv, and exits.
	"printenv": func() {
		wd, _ := os.Getwd()
		fmt.Printf("%s\n%s\n", wd, os.Getenv(childValEnv))
	},
	// Starts a grandchild ("sleeper") that ignores SIGTERM and holds this
	// child's stdout and stderr, prints "ready <grandchild pid>" once the
	// grandchild is ready, then exits with status 0.
	"spawn-exit": func() { spawnSleeper("sleeper") },
	// Like spawn-exit, but then stays, ignoring stdin EOF; SIGTERM kills it.
	"spawn-stay": func() {
		spawnSleeper("sleeper")
		io.Copy(io.Discard, os.Stdin)
		blockForever()
	},
	// Ignores stdin EOF and SIGTERM, with a grandchild ("sleeper-term") that
	// reports SIGTERM on the bridge's stdout and exits with status 0.
	"spawn-term": func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM) // a handler: not inherited, unlike SIG_IGN
		go func() {
			for range c {
			}
		}()
		spawnSleeper("sleeper-term")
		io.Copy(io.Discard, os.Stdin)
		blockForever()
	},
	"sleeper": func() {
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		blockForever()
	},
	"sleeper-term": func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		os.NewFile(3, "bridge stdout").WriteString("grandchild got SIGTERM\n")
	},
}

const exit3Lines = 2000

// blockForever keeps a child alive until a signal ends it. A sleeping loop
// rather than select{}: with no timer pending, the runtime would call that a
// deadlock and exit.
func blockForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func spawnSleeper(mode string) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{os.Stdout} // holds the bridge's stdout pipe too
	out, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		panic(fmt.Sprintf("sleeper said %q, %v", line, err))
	}
	fmt.Printf("ready %d\n", cmd.Process.Pid)
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// testChild is a launched child with a line reader on its stdout.
type testChild struct {
	p   *localProcess
	out *bufio.Reader
	log *logRecorder
}

// launch starts child mode with opts (nil: defaults with a short grace) and
// stops it at the end of the test.
func launch(t testing.TB, mode string, opts *LocalOptions) *testChild {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var o LocalOptions
	if opts != nil {
		o = *opts
	}
	o.Command = exe
	// Later entries win: the test's own variables, then the mode. A race
	// build sleeps a second at exit by default (atexit_sleep_ms): skip it, or
	// every child would take a second to end.
	env := append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	o.Env = append(append(env, o.Env...), childEnv+"="+mode)
	if o.StopGrace == 0 {
		o.StopGrace = 100 * time.Millisecond
	}
	rec := newLogRecorder()
	o.Logger = slog.New(rec)
	l := NewLocal(&o)
	t.Cleanup(l.Close)
	proc, err := l.Launch(t.Context(), "sess-"+mode)
	if err != nil {
		t.Fatal(err)
	}
	p := proc.(*localProcess)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return &testChild{p: p, out: bufio.NewReader(p.Stdout()), log: rec}
}

// failAfter bounds waits that only a bug can make long, so that the bug
// fails the test instead of hanging it until the binary's timeout. It is no
// timing goal: nothing here needs more than a small part of it.
const failAfter = time.Minute

// bounded returns a context that ends failAfter from now.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// wait is c.p.Wait, bounded by failAfter.
func (c *testChild) wait(t testing.TB) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- c.p.Wait() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(failAfter):
		t.Fatalf("Wait still blocked after %v", failAfter)
		return nil
	}
}

func (c *testChild) readLine(t testing.TB) string {
	t.Helper()
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's stdout: %q, %v", line, err)
	}
	return strings.TrimSuffix(line, "\n")
}

func (c *testChild) write(t testing.TB, s string) {
	t.Helper()
	if _, err := io.WriteString(c.p.Stdin(), s); err != nil {
		t.Fatalf("writing the child's stdin: %v", err)
	}
}

func wantExitError(t *testing.T, err error) *ExitError {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Wait = %v, want an *ExitError", err)
	}
	return ee
}

func TestLocalEcho(t *testing.T) {
	c := launch(t, "echo", nil)
	if got, want := c.p.ID(), fmt.Sprintf("pid %d", c.p.cmd.Process.Pid); got != want {
		t.Errorf("ID() = %q, want %q", got, want)
	}
	for i := range 100 {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i)
		c.write(t, msg+"\n")
		if got := c.readLine(t); got != msg {
			t.Fatalf("echo %d = %q, want %q", i, got, msg)
		}
	}
	if err := c.p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(t); err != nil {
		t.Fatalf("Wait after stdin EOF = %v, want nil", err)
	}
	if _, err := c.out.ReadByte(); err != io.EOF {
		t.Errorf("stdout after exit: %v, want io.EOF", err)
	}
	// Wait is repeatable, from any goroutine.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := c.p.Wait(); err != nil {
				t.Errorf("Wait again = %v", err)
			}
		})
	}
	wg.Wait()
}

// The child may write all its output and exit before the caller read it:
// Wait must not take that output away (as cmd.StdoutPipe's would).
func TestLocalStdoutOutlivesWait(t *testing.T) {
	t.Run("Wait first", func(t *testing.T) {
		const n = 16 << 10 // fits in the pipe: the child exits unread
		c := launch(t, "bigout", &LocalOptions{Env: []string{childSizeEnv + "=" + strconv.Itoa(n)}})
		if err := c.wait(t); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		got, err := io.ReadAll(c.out)
		if err != nil || !bytes.Equal(got, pattern(n)) {
			t.Fatalf("read %d bytes, %v; want the %d bytes written", len(got), err, n)
		}
	})
	t.Run("Wait while reading", func(t *testing.T) {
		const n = 4 << 20
		c := launch(t, "bigout", &LocalOptions{Env: []string{childSizeEnv + "=" + strconv.Itoa(n)}})
		waited := make(chan error, 1)
		go func() { waited <- c.p.Wait() }()
		got, err := io.ReadAll(c.out)
		if err != nil || !bytes.Equal(got, pattern(n)) {
			t.Fatalf("read %d bytes, %v; want the %d bytes written", len(got), err, n)
		}
		if err := <-waited; err != nil {
			t.Fatalf("Wait = %v", err)
		}
	})
}

func TestLocalEnvAndDir(t *testing.T) {
	dir := t.TempDir()
	c := launch(t, "printenv", &LocalOptions{Dir: dir, Env: []string{childValEnv + "=given"}})
	if got := c.readLine(t); got != dir {
		t.Errorf("working directory %q, want %q", got, dir)
	}
	if got := c.readLine(t); got != "given" {
		t.Errorf("%s = %q, want %q", childValEnv, got, "given")
	}
}

func TestLocalExitStatus(t *testing.T) {
	// No rate limit: every line must be logged here.
	c := launch(t, "exit3", &LocalOptions{StderrRate: StderrRate{LinesPerSecond: -1}})
	ee := wantExitError(t, c.wait(t))
	var all []string
	for i := range exit3Lines {
		all = append(all, fmt.Sprintf("stderr line %d", i))
	}
	// Wait returns only once stderr is drained: the tail is the last lines.
	want := &ExitError{Code: 3, Stderr: all[exit3Lines-DefaultStderrTailLines:]}
	if ee.Code != want.Code || ee.Signal != "" || ee.OOMKilled || !slices.Equal(ee.Stderr, want.Stderr) {
		t.Errorf("Wait = %+v, want %+v", ee, want)
	}
	if msg := ee.Error(); !strings.Contains(msg, "status 3") || !strings.Contains(msg, all[exit3Lines-1]) {
		t.Errorf("error message %q lacks the status or the stderr tail", msg)
	}
	// Every stderr line is logged with the session and pid.
	var logged []string
	for _, e := range c.log.all() {
		if e.msg != "server stderr" {
			continue
		}
		logged = append(logged, e.attrs["line"])
		if e.attrs["session"] != "sess-exit3" || e.attrs["pid"] != strconv.Itoa(c.p.pid) {
			t.Fatalf("stderr record attributes %v, want session=sess-exit3 pid=%d", e.attrs, c.p.pid)
		}
	}
	if !slices.Equal(logged, all) {
		t.Errorf("logged %d stderr lines, want the %d written, in order", len(logged), len(all))
	}
}

// The bridge keeps draining a flooding stderr while stdout traffic goes on,
// and keeps only bounded lines and a bounded tail.
func TestLocalStderrFlood(t *testing.T) {
	const maxLine, tail = 1000, 4
	c := launch(t, "flood", &LocalOptions{StderrLineBytes: maxLine, StderrTailLines: tail})
	for i := range 20 {
		msg := fmt.Sprintf("message %d", i)
		c.write(t, msg+"\n")
		if got := c.readLine(t); got != msg {
			t.Fatalf("echo %d = %q, want %q", i, got, msg)
		}
		if kept := c.p.stderr.lines(); len(kept) > tail {
			t.Fatalf("stderr tail holds %d lines, bound %d", len(kept), tail)
		}
	}
	c.p.Stdin().Close()
	if err := c.wait(t); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	logged := c.log.stderrLines()
	// 12 huge lines, then one unending line cut at the bound at EOF.
	if len(logged) != 13 {
		t.Fatalf("logged %d stderr lines, want 13", len(logged))
	}
	for i, line := range logged {
		if len(line) > maxLine+len(truncatedMarker) || !strings.HasSuffix(line, truncatedMarker) {
			t.Errorf("logged line %d: %d bytes, want at most %d ending in the truncation marker", i, len(line), maxLine+len(truncatedMarker))
		}
	}
	if kept := c.p.stderr.lines(); !slices.Equal(kept, logged[len(logged)-tail:]) {
		t.Errorf("stderr tail is not the last %d logged lines", tail)
	}
}

// manualGrace makes c's Stop grace periods end only when the test sends on
// the returned channel: which step ends a child must not depend on how fast
// a loaded machine runs it.
func (c *testChild) manualGrace() chan<- time.Time {
	ch := make(chan time.Time)
	c.p.after = func(time.Duration) <-chan time.Time { return ch }
	return ch
}

func TestLocalStop(t *testing.T) {
	tests := []struct {
		name   string
		mode   string
		graces int    // grace periods the test ends; -1: real 100ms timers
		signal string // how Wait says the child ended: "" for status 0
	}{
		{name: "exits on stdin EOF", mode: "echo", graces: 0},
		{name: "exits on SIGTERM", mode: "term-exits", graces: 1},
		{name: "needs SIGKILL", mode: "ignore-term", graces: 2, signal: "killed"},
		// Real timers: only their expiry can end this child, so the outcome
		// does not depend on the machine's speed.
		{name: "needs SIGKILL, real timers", mode: "ignore-term", graces: -1, signal: "killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := launch(t, tt.mode, nil)
			if tt.mode != "echo" {
				if got := c.readLine(t); got != "ready" {
					t.Fatalf("child said %q, want ready", got)
				}
			}
			var grace chan<- time.Time
			if tt.graces >= 0 {
				grace = c.manualGrace()
			}
			stopped := make(chan error, 1)
			go func() { stopped <- c.p.Stop(bounded(t)) }()
			for range tt.graces {
				grace <- time.Now()
			}
			if err := <-stopped; err != nil {
				t.Fatalf("Stop = %v", err)
			}
			select {
			case <-c.p.done:
			default:
				t.Fatal("Stop returned before the child was gone")
			}
			err := c.wait(t)
			if tt.signal == "" {
				if err != nil {
					t.Fatalf("Wait = %v, want nil", err)
				}
			} else if ee := wantExitError(t, err); ee.Signal != tt.signal || ee.Code != -1 {
				t.Fatalf("Wait = %+v, want killed by signal %q", ee, tt.signal)
			}
			// Stop released the pipes: stdout ends, stdin refuses.
			if _, err := io.ReadAll(c.out); err != nil {
				t.Errorf("reading stdout after Stop: %v, want io.EOF", err)
			}
			if _, err := c.p.Stdin().Write([]byte("x\n")); err == nil {
				t.Error("writing stdin after Stop succeeded")
			}
			if err := c.p.Stop(bounded(t)); err != nil {
				t.Errorf("second Stop = %v", err)
			}
		})
	}
}

func TestLocalStopConcurrent(t *testing.T) {
	c := launch(t, "term-exits", nil)
	c.readLine(t)
	grace := c.manualGrace()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if err := c.p.Stop(bounded(t)); err != nil {
				t.Errorf("Stop = %v", err)
			}
			// Every caller returns only once the child is gone.
			select {
			case <-c.p.done:
			default:
				t.Error("Stop returned before the child was gone")
			}
		})
	}
	grace <- time.Now() // one escalation for all callers: one SIGTERM
	wg.Wait()
	if err := c.wait(t); err != nil {
		t.Fatalf("Wait = %v, want nil (SIGTERM handled)", err)
	}
}

// A Stop whose ctx ends returns at once and makes the escalation jump to
// SIGKILL rather than sit out the grace periods.
func TestLocalStopContextDone(t *testing.T) {
	c := launch(t, "ignore-term", &LocalOptions{StopGrace: time.Hour})
	c.readLine(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.p.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with a cancelled ctx = %v, want context.Canceled", err)
	}
	if ee := wantExitError(t, c.wait(t)); ee.Signal != "killed" {
		t.Fatalf("Wait = %+v, want killed", ee)
	}
	if err := c.p.Stop(bounded(t)); err != nil {
		t.Errorf("Stop after the child is gone = %v", err)
	}
}

// Nothing the child started survives it, whether it exits on its own or is
// stopped: the whole process group is signalled, and killed at the end.
func TestLocalGrandchild(t *testing.T) {
	tests := []struct {
		mode       string
		leader     string         // how Wait says the child ended: "" for status 0
		grandchild syscall.Signal // the signal that ended the grandchild; 0: not checked
	}{
		// Exits by itself: the grandchild is killed even before Stop.
		{mode: "spawn-exit", grandchild: syscall.SIGKILL},
		// SIGTERM ends the leader; the grandchild ignores it, and is killed.
		{mode: "spawn-stay", leader: "terminated", grandchild: syscall.SIGKILL},
		// SIGTERM reaches the grandchild too (it says so on stdout); the
		// leader ignores it and is killed. The grandchild's own end is not
		// checked: the group SIGKILL may catch it while it exits.
		{mode: "spawn-term", leader: "killed"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			c := launch(t, tt.mode, nil)
			f := strings.Fields(c.readLine(t))
			if len(f) != 2 || f[0] != "ready" {
				t.Fatalf("child said %q", f)
			}
			gpid, _ := strconv.Atoi(f[1])
			pgid := c.p.pid
			// The grandchild is re-parented to this test process (a
			// subreaper), which reaps it below. Should the test fail first,
			// don't leave it behind.
			reaped := false
			t.Cleanup(func() {
				if !reaped {
					syscall.Kill(gpid, syscall.SIGKILL)
					syscall.Wait4(gpid, nil, 0, nil)
				}
			})
			// If the grandchild survives, the reads and the reaping below
			// block: report it and kill it rather than hang until the test
			// binary's timeout.
			deadline := time.AfterFunc(failAfter, func() {
				t.Errorf("grandchild %d or its parent still alive after %v; killing them", gpid, failAfter)
				syscall.Kill(gpid, syscall.SIGKILL)
				syscall.Kill(-pgid, syscall.SIGKILL)
			})
			defer deadline.Stop()
			if got, err := syscall.Getpgid(gpid); err != nil || got != pgid {
				t.Fatalf("grandchild %d in group %d (%v), want %d", gpid, got, err, pgid)
			}

			switch tt.mode {
			case "spawn-exit":
				if err := c.wait(t); err != nil {
					t.Fatalf("Wait = %v", err)
				}
				// The grandchild holds stdout: EOF means it is gone, even
				// before anyone called Stop.
				if _, err := io.ReadAll(c.out); err != nil {
					t.Fatal(err)
				}
				if err := c.p.Stop(bounded(t)); err != nil {
					t.Fatalf("Stop = %v", err)
				}
			case "spawn-stay":
				// One grace period only: the leader must die of SIGTERM
				// however long the machine takes to run its handler.
				grace := c.manualGrace()
				stopped := make(chan error, 1)
				go func() { stopped <- c.p.Stop(bounded(t)) }()
				grace <- time.Now()
				if err := <-stopped; err != nil {
					t.Fatalf("Stop = %v", err)
				}
			case "spawn-term":
				grace := c.manualGrace()
				stopped := make(chan error, 1)
				go func() { stopped <- c.p.Stop(bounded(t)) }()
				grace <- time.Now() // stdin closed, nobody exited: SIGTERM
				if got := c.readLine(t); got != "grandchild got SIGTERM" {
					t.Errorf("after SIGTERM, stdout said %q", got)
				}
				grace <- time.Now() // the leader ignored it: SIGKILL
				if err := <-stopped; err != nil {
					t.Fatalf("Stop = %v", err)
				}
			}
			err := c.wait(t)
			if tt.leader == "" {
				if err != nil {
					t.Errorf("Wait = %v, want nil", err)
				}
			} else if ee := wantExitError(t, err); ee.Signal != tt.leader {
				t.Errorf("Wait = %+v, want killed by signal %q", ee, tt.leader)
			}

			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(gpid, &ws, 0, nil); err != nil {
				t.Fatalf("reaping grandchild %d: %v", gpid, err)
			}
			reaped = true
			if tt.grandchild != 0 && (!ws.Signaled() || ws.Signal() != tt.grandchild) {
				t.Errorf("grandchild ended with %#x, want signal %v", ws, tt.grandchild)
			}
			if err := syscall.Kill(-pgid, 0); err != syscall.ESRCH {
				t.Errorf("kill(-%d, 0) = %v, want ESRCH: the group still has processes", pgid, err)
			}
		})
	}
}

func TestLocalLaunchErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts *LocalOptions
		want string // in the message
	}{
		{"missing", &LocalOptions{Command: "mcp-bridge-test-no-such-command"}, `"mcp-bridge-test-no-such-command"`},
		{"not executable", &LocalOptions{Command: notExec}, "permission denied"},
		{"no directory", &LocalOptions{Command: exe, Dir: filepath.Join(dir, "missing")}, "no such file"},
		{"no command", nil, "no command given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewLocal(tt.opts).Launch(t.Context(), "sess-1")
			if err == nil {
				p.Stop(context.Background())
				t.Fatal("Launch succeeded")
			}
			if !errors.Is(err, ErrLaunch) {
				t.Errorf("error %v does not wrap ErrLaunch", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.Contains(msg, "sess-1") || !strings.Contains(msg, "after --") {
				t.Errorf("error %q lacks %q, the session or what to do", msg, tt.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := NewLocal(&LocalOptions{Command: exe}).Launch(ctx, "sess-1"); !errors.Is(err, ErrLaunch) || !errors.Is(err, context.Canceled) {
		t.Errorf("Launch with a cancelled ctx = %v, want ErrLaunch and context.Canceled", err)
	}
}

func TestNewLocalDefaults(t *testing.T) {
	args, env := []string{"a"}, []string{"K=v"}
	l := NewLocal(&LocalOptions{Command: "x", Args: args, Env: env})
	args[0], env[0] = "changed", "changed"
	if l.opts.StopGrace != DefaultStopGrace || l.opts.StderrLineBytes != DefaultStderrLineBytes || l.opts.StderrTailLines != DefaultStderrTailLines {
		t.Errorf("defaults not applied: %+v", l.opts)
	}
	if l.opts.Args[0] != "a" || l.opts.Env[0] != "K=v" {
		t.Errorf("options alias the caller's slices: %+v", l.opts)
	}
	if NewLocal(nil).opts.Env != nil || NewLocal(&LocalOptions{Env: []string{}}).opts.Env == nil {
		t.Error("nil Env (inherit) and empty Env (empty environment) must stay distinct")
	}
}

// BenchmarkLocalRoundTrip measures one line written to a local child's stdin
// and read back from its stdout: the floor for the bridge's stdio path.
func BenchmarkLocalRoundTrip(b *testing.B) {
	c := launch(b, "echo", nil)
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	stdin := c.p.Stdin()
	for b.Loop() {
		if _, err := stdin.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := c.out.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
}

// A running child costs the bridge no OS thread: its exit is awaited in
// the poller (a pidfd), not by a blocking waitid. Without that, each of
// these children would hold a thread until it exits.
func TestLocalWaitHoldsNoThread(t *testing.T) {
	const n = 32
	before := osThreads(t)
	for i := range n {
		c := launch(t, "echo", nil)
		// A round trip: the child runs, and its waiter has long started.
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i)
		c.write(t, msg+"\n")
		if got := c.readLine(t); got != msg {
			t.Fatalf("echo = %q, want %q", got, msg)
		}
	}
	if grew := osThreads(t) - before; grew >= n/2 {
		t.Fatalf("%d running children added %d OS threads to the process", n, grew)
	}
}

func osThreads(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

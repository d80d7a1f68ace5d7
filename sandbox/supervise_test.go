package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-bridge/mcp-bridge/internal/proctest"
)

func init() {
	// Starts two grandchildren that ignore SIGTERM, one in its own group
	// and one in a new session (setsid), prints "ready <pid> <pid>", then
	// exits at stdin EOF ("spawn2-exit") or stays, ignoring stdin EOF and
	// SIGTERM ("spawn2-stay").
	children["spawn2-exit"] = func() {
		spawnTwo()
		io.Copy(io.Discard, os.Stdin)
	}
	children["spawn2-stay"] = func() {
		// Ignored before "ready": a Stop that follows it at once must
		// find the leader needing SIGKILL, not end it with SIGTERM. (The
		// grandchildren inherit SIG_IGN; they ignore SIGTERM anyway.)
		signal.Ignore(syscall.SIGTERM)
		spawnTwo()
		io.Copy(io.Discard, os.Stdin)
		blockForever()
	}
}

func spawnTwo() {
	var pids []string
	for _, setsid := range []bool{false, true} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=sleeper")
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
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
		pids = append(pids, strconv.Itoa(cmd.Process.Pid))
	}
	fmt.Printf("ready %s\n", strings.Join(pids, " "))
}

// waitGone returns once process pid has exited, or fails the test after
// bound (proctest.WaitGone).
func waitGone(t testing.TB, pid int, bound time.Duration) {
	t.Helper()
	proctest.WaitGone(t, pid, bound, "after its server ended", nil)
}

// With a supervisor, nothing the server started outlives it: neither a
// grandchild in another group nor one in another session, whether the
// server exits on its own or is stopped.
func TestLocalSupervisedEndsDescendants(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"spawn2-exit", "spawn2-stay"} {
		t.Run(mode, func(t *testing.T) {
			c := launch(t, mode, &LocalOptions{Supervisor: []string{exe, SuperviseArg}})
			f := strings.Fields(c.readLine(t))
			if len(f) != 3 || f[0] != "ready" {
				t.Fatalf("child said %q", f)
			}
			var pids []int
			for _, s := range f[1:] {
				pid, _ := strconv.Atoi(s)
				pids = append(pids, pid)
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			}
			if sid, _ := unix.Getsid(pids[1]); sid != pids[1] {
				t.Fatalf("the setsid grandchild %d is in session %d", pids[1], sid)
			}
			var want string // how Wait describes the server's end
			if mode == "spawn2-exit" {
				c.p.Stdin().Close()
			} else {
				grace := c.manualGrace()
				stopped := make(chan error, 1)
				go func() { stopped <- c.p.Stop(bounded(t)) }()
				grace <- time.Now() // stdin closed: SIGTERM, ignored
				grace <- time.Now() // SIGKILL, through the supervisor
				if err := <-stopped; err != nil {
					t.Fatalf("Stop = %v", err)
				}
				want = "killed"
			}
			err := c.wait(t)
			if want == "" && err != nil {
				t.Errorf("Wait = %v, want nil", err)
			}
			if want != "" {
				if ee := wantExitError(t, err); ee.Signal != want {
					t.Errorf("Wait = %+v, want killed by signal %q", ee, want)
				}
			}
			for _, pid := range pids {
				waitGone(t, pid, 30*time.Second)
			}
		})
	}
}

// parentOf returns the parent pid of pid, from /proc/<pid>/stat.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// One supervisor serves every server of a bridge: its start-up (the whole
// bridge binary's initialization) is paid once, not per session.
func TestLocalSupervisorShared(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var parents []int
	for range 3 { // three Locals, as for three servers of a config file
		c := launch(t, "echo", &LocalOptions{Supervisor: []string{exe, SuperviseArg}})
		c.write(t, "hi\n")
		if got := c.readLine(t); got != "hi" {
			t.Fatalf("the server echoed %q", got)
		}
		parents = append(parents, parentOf(t, c.p.pid))
	}
	if parents[0] == os.Getpid() || parents[1] != parents[0] || parents[2] != parents[0] {
		t.Fatalf("the servers' parents are %v (the test is %d), want one supervisor for all", parents, os.Getpid())
	}
}

// The shared supervisor tells sessions apart: when one server exits, what
// it started dies, and what another session's server started does not,
// though both were re-parented to the supervisor.
func TestLocalSupervisedSessionsApart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts := &LocalOptions{Supervisor: []string{exe, SuperviseArg}}
	grandchildren := func(c *testChild) []int {
		f := strings.Fields(c.readLine(t))
		if len(f) != 3 || f[0] != "ready" {
			t.Fatalf("child said %q", f)
		}
		var pids []int
		for _, s := range f[1:] {
			pid, _ := strconv.Atoi(s)
			pids = append(pids, pid)
			t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		}
		return pids
	}
	a := launch(t, "spawn2-exit", opts)
	b := launch(t, "spawn2-exit", opts)
	pa, pb := grandchildren(a), grandchildren(b)
	a.p.Stdin().Close()
	if err := a.wait(t); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
	for _, pid := range pa {
		waitGone(t, pid, 30*time.Second)
	}
	for _, pid := range pb { // Wait returned once a's were killed
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("%d of the other session is gone (%v) after the first server exited", pid, err)
		}
	}
	b.p.Stdin().Close()
	if err := b.wait(t); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
	for _, pid := range pb {
		waitGone(t, pid, 30*time.Second)
	}
}

// A supervisor killed with SIGKILL takes its servers with it (their
// parent-death signal); their sessions see them killed, and the next
// session gets a new supervisor.
func TestLocalSupervisorKilled(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts := &LocalOptions{Supervisor: []string{exe, SuperviseArg}}
	a := launch(t, "echo", opts)
	sup := parentOf(t, a.p.pid)
	if sup == os.Getpid() {
		t.Fatalf("the server %d is the test's child, not the supervisor's", a.p.pid)
	}
	syscall.Kill(sup, syscall.SIGKILL)
	if ee := wantExitError(t, a.wait(t)); ee.Signal != "killed" {
		t.Errorf("Wait = %+v, want killed by signal \"killed\"", ee)
	}
	b := launch(t, "echo", opts)
	b.write(t, "hi\n")
	if got := b.readLine(t); got != "hi" {
		t.Fatalf("the server echoed %q", got)
	}
	if got := parentOf(t, b.p.pid); got == sup || got == os.Getpid() {
		t.Fatalf("the new server's parent is %d (the killed supervisor was %d, the test is %d)", got, sup, os.Getpid())
	}
}

// sigIgn returns the SigIgn mask of a /proc/<pid>/status image.
func sigIgn(t *testing.T, status string) uint64 {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no SigIgn in %q", status)
	return 0
}

// A supervised server gets the signal dispositions the bridge gives its
// children, not the supervisor's: the supervisor drops SIGTERM, SIGINT and
// SIGHUP (they are for the bridge), but a server that inherited SIGTERM
// ignored would not end at Stop's SIGTERM (exec keeps an ignored signal
// ignored). The bridge catches all three (shutdown, reload), which also
// undoes their being ignored when it was started so ("If the program was
// started with SIGHUP or SIGINT ignored, and Notify is called for either
// signal, a signal handler will be installed for that signal and it will
// no longer be ignored", os/signal), and exec resets a caught signal to
// its default: its children ignore none of them, however the bridge was
// started. (This test's own process catches none of them: under nohup it
// ignores SIGHUP, which is no measure of what the bridge passes on.)
func TestLocalSupervisedSignalDispositions(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	l := NewLocal(&LocalOptions{
		Command:    sh,
		Args:       []string{"-c", "exec cat /proc/self/status"},
		Supervisor: []string{exe, SuperviseArg},
		Logger:     slog.New(newLogRecorder()),
	})
	defer l.Close()
	p, err := l.Launch(t.Context(), "sess-sigign")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(bounded(t))
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	const mask = 1<<(syscall.SIGTERM-1) | 1<<(syscall.SIGINT-1) | 1<<(syscall.SIGHUP-1)
	if got := sigIgn(t, string(out)) & mask; got != 0 {
		t.Errorf("the server ignores signals %#x of SIGTERM, SIGINT, SIGHUP; want none ignored", got)
	}
}

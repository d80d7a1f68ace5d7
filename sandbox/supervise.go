package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor (issue 13, item 3). The kernel's parent-death signal
// reaches only a process's direct child: npx → node, uvx → python, a browser
// started by a server all outlived a kill -9 of the bridge. So each local
// server runs under a tiny supervisor, the bridge binary itself re-executed
// in a hidden mode (LocalOptions.Supervisor, argv[1] == SuperviseArg):
//
//   - it becomes a child subreaper (PR_SET_CHILD_SUBREAPER), so every
//     process the server starts stays its descendant even when its parent
//     exits or it calls setsid: it can find them all through
//     /proc/<pid>/task/*/children;
//   - it starts the server in a process group of its own, with the stdio
//     descriptors it inherited from the bridge passed straight through (no
//     copying; it closes its own copies of stdin and stdout), and with a
//     parent-death signal of SIGKILL;
//   - SIGTERM is forwarded to the server's group; SIGUSR1 (KillSignal) kills
//     every descendant at once;
//   - when the server exits, or when the bridge dies (end of file on the
//     lifeline, a pipe whose write end only the bridge holds), it kills every
//     descendant left and reaps them, then exits with the server's status,
//     re-raising a terminating signal so that the bridge still sees "killed
//     by signal".
//
// If the supervisor itself is killed with SIGKILL (kill -9 of it, the OOM
// killer), the server dies with it (parent-death signal) but its own
// children would be orphaned: every process carries OwnerEnv in its
// environment, and KillLocalLeftovers, run by a restarted bridge, ends the
// processes whose bridge no longer exists.

// SuperviseArg, as the first argument of the bridge binary, selects the
// supervisor mode: main calls Supervise(os.Args[2:]) before anything else.
const SuperviseArg = "__mcp-bridge-supervise"

// supervisorKillSignal asks the supervisor to kill the server and all its
// descendants at once: Stop's last step, which SIGKILL would not do (the
// supervisor could not clean up after itself).
const supervisorKillSignal = syscall.SIGUSR1

// lifelineFD is the descriptor of the lifeline's read end in the supervisor
// (the first of exec.Cmd.ExtraFiles).
const lifelineFD = 3

// goFD is the descriptor of the go pipe in a spare supervisor: it starts the
// server once it reads a byte there, and exits without starting it at end
// of file.
const goFD = 4

var (
	lifelineOnce sync.Once
	lifelineR    *os.File // passed to every supervisor; never closed
	lifelineW    *os.File // held, never written, never closed: its end is the bridge's death
	lifelineErr  error
)

// lifeline returns the read end of the process-wide lifeline pipe. Both
// ends stay open for the bridge's life (two descriptors in all, whatever the
// number of sessions); the kernel closes the write end when the bridge dies,
// however it dies, and every supervisor then reads end of file.
func lifeline() (*os.File, error) {
	lifelineOnce.Do(func() {
		lifelineR, lifelineW, lifelineErr = os.Pipe()
	})
	return lifelineR, lifelineErr
}

// Supervise runs the supervisor and never returns. args are the lifeline's
// descriptor ("3", or "-" for none), the go pipe's ("4", or "-" to start at
// once), the server's executable path, then its whole argv (argv[0] first).
// The descriptors are named rather than assumed: a supervisor started by
// hand may inherit unrelated descriptors 3 and 4.
func Supervise(args []string) {
	if len(args) < 4 || args[0] != strconv.Itoa(lifelineFD) && args[0] != "-" || args[1] != strconv.Itoa(goFD) && args[1] != "-" {
		fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: want %d|- %d|- PATH ARGV0 [ARGS...], got %q\n", lifelineFD, goFD, args)
		os.Exit(126)
	}
	hasLifeline, hasGo := args[0] != "-", args[1] != "-"
	args = args[2:]
	// The parent-death signal of the server follows the thread that forks
	// it: keep the main goroutine on one thread for the whole process.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		// Without it, orphans go to init; the server still dies with us.
		fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: cannot become a child subreaper: %v; processes the server starts may outlive it\n", err)
	}
	// The lifeline was inherited without close-on-exec: the server must not
	// hold it (it would keep it open after the bridge's death, harmlessly,
	// but it is not the server's).
	if hasLifeline {
		unix.CloseOnExec(lifelineFD)
	}

	if hasGo {
		// A spare: wait until a session needs the server. The bridge may
		// die meanwhile: then the go pipe's write end closes too.
		var b [1]byte
		if n, _ := os.NewFile(goFD, "go").Read(b[:]); n != 1 {
			os.Exit(0)
		}
		unix.Close(goFD)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, supervisorKillSignal, syscall.SIGINT, syscall.SIGHUP)

	pid, err := syscall.ForkExec(args[0], args[1:], &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting %q: %v\n", args[1], err)
		os.Exit(127)
	}
	// Our copies of stdin and stdout must go, or the bridge would not see
	// the end of the server's output when the server exits. /dev/null keeps
	// the numbers from being reused by a later open.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		unix.Dup2(int(null.Fd()), 0)
		unix.Dup2(int(null.Fd()), 1)
		null.Close()
	}

	if hasLifeline {
		go func() {
			// Returns when the bridge dies (end of file; it never writes).
			io.Copy(io.Discard, os.NewFile(lifelineFD, "lifeline"))
			killDescendants()
		}()
	}
	go func() {
		for s := range sigs {
			switch s {
			case syscall.SIGTERM:
				syscall.Kill(-pid, syscall.SIGTERM)
			case supervisorKillSignal:
				killDescendants()
			}
			// SIGINT, SIGHUP: ignored; they are for the bridge's group.
		}
	}()

	var status syscall.WaitStatus
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// ECHILD cannot happen before the server is reaped.
			fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: waiting for the server: %v\n", err)
			os.Exit(126)
		}
		if wpid == pid {
			status = ws
			break
		}
		// An orphan re-parented to us: reaped, nothing more.
	}
	// The server is gone: so must be everything it started. Each pass kills
	// every descendant it finds; a process forked meanwhile is found by the
	// next pass, once its killed parent has been reaped (by us: orphans are
	// re-parented to us).
	for {
		killDescendants()
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD: nothing left
			break
		}
	}
	switch {
	case status.Exited():
		os.Exit(status.ExitStatus())
	case status.Signaled():
		sig := status.Signal()
		signal.Reset()
		signal.Ignore(syscall.SIGINT, syscall.SIGHUP) // not ours to die of, if sent now
		syscall.Kill(os.Getpid(), sig)
		// A signal the Go runtime keeps for itself (SIGSEGV, SIGPIPE...)
		// may not kill us: exit as a shell would report it.
		time.Sleep(time.Second)
		os.Exit(128 + int(sig))
	}
	os.Exit(126)
}

// killDescendants sends SIGKILL to every descendant of this process.
func killDescendants() {
	for _, pid := range descendants(os.Getpid()) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// descendants lists the descendants of pid, children first, from
// /proc/<pid>/task/*/children (or, where the kernel lacks that file, from
// the parent field of every /proc/<pid>/stat).
func descendants(root int) []int {
	var out []int
	seen := map[int]bool{root: true}
	queue := []int{root}
	var byParent map[int][]int // the fallback, built once
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		kids, ok := childrenFromTasks(p)
		if !ok {
			if byParent == nil {
				byParent = parentMap()
			}
			kids = byParent[p]
		}
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
				queue = append(queue, k)
			}
		}
	}
	return out
}

// childrenFromTasks reads /proc/<pid>/task/*/children; ok is false where
// the kernel has no such file (CONFIG_PROC_CHILDREN off). A process that
// is gone has no children: ok is true then.
func childrenFromTasks(pid int) ([]int, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, true
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat(dir + "/" + t.Name()); serr == nil {
					return nil, false // the task exists, the file does not
				}
			}
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out, true
}

// parentMap maps each process to its children, from /proc/*/stat.
func parentMap() map[int][]int {
	m := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			m[ppid] = append(m[ppid], pid)
		}
	}
	return m
}

package sandbox

import (
	"bufio"
	"fmt"
	"io"
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
		spawnTwo()
		signal.Ignore(syscall.SIGTERM) // the leader needs SIGKILL
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
// server exits on its own or is stopped (issue 13, item 3).
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

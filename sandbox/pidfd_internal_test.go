package sandbox

import (
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAwaitExitOfChildExitedBefore: a child that exits before awaitExit
// starts waiting (its pidfd was registered with the poller at start, and
// the poller may already have reported it readable) is seen exited, not
// waited for for ever as a zombie. Such a stall held a removed aggregate
// member's Stop, and with it the aggregate's Close.
func TestAwaitExitOfChildExitedBefore(t *testing.T) {
	for i := range 20 {
		cmd := exec.Command("true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f := openPidfd(cmd.Process.Pid)
		if f == nil {
			t.Skip("no pidfds on this kernel")
		}
		// Exited, not reaped (WNOWAIT).
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
			t.Fatal(err)
		}
		// Let the poller run and see the descriptor readable before
		// awaitExit starts: what a child that exits at once leads to. The
		// test stays right whether or not it has by then.
		for range 10 {
			runtime.Gosched()
		}
		done := make(chan struct{})
		go func() { awaitExit(f); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: awaitExit still waits 10 s after its child (pid %d) exited", i, cmd.Process.Pid)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// Package proctest holds what tests of processes share: waiting, without
// sleeping, for a process that is not the test's child to exit.
package proctest

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// WaitGone returns once process pid has exited (it may stay a zombie), or
// kills it and fails the test after bound, saying what should have ended it
// (why, e.g. "after the bridge was killed") and its state (state may be
// nil). It waits on a pidfd, which becomes readable when the process exits,
// whoever its parent is.
func WaitGone(t testing.TB, pid int, bound time.Duration, why string, state func(pid int) string) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(bound.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		}
		if n == 0 {
			st := ""
			if state != nil {
				st = " (state " + state(pid) + ")"
			}
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d%s still alive %v %s", pid, st, bound, why)
		}
		return
	}
}

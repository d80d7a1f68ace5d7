package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// sessionFDs counts this process's descriptors that belong to the process
// pid: the ends of pipes whose other end is pid's stdin, stdout or
// stderr, and the pidfds of pid (their fdinfo names it).
func sessionFDs(t *testing.T, pid int) int {
	t.Helper()
	theirs := map[string]bool{}
	for fd := range 3 {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); err == nil && strings.HasPrefix(l, "pipe:") {
			theirs[l] = true
		}
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, e := range entries {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		switch {
		case err != nil:
		case theirs[l]:
			n++
		case l == "anon_inode:[pidfd]":
			if pidfdOf(e.Name()) == pid {
				n++
			}
		}
	}
	return n
}

// pidfdOf is the process a pidfd of this process refers to, from its
// fdinfo ("Pid:"), or 0.
func pidfdOf(fd string) int {
	f, err := os.Open("/proc/self/fdinfo/" + fd)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pid:"); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			return pid
		}
	}
	return 0
}

// The connection limit keeps bridge.FDPerSession descriptors for each session's
// server: at least what a local server holds in the bridge, under the
// shared supervisor and without it (5.14 on average were held once, 4
// were kept, and sessions 133 to 150 of 150 got 503 below the connection
// limit). Each descriptor is attributed to its server, so that other tests
// opening and closing descriptors meanwhile do not count.
func TestDescriptorsPerSession(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, supervisor := range [][]string{{exe, sandbox.SuperviseArg}, nil} {
		l := sandbox.NewLocal(&sandbox.LocalOptions{
			Command:    "sleep",
			Args:       []string{"1000"},
			Supervisor: supervisor,
			StopGrace:  100 * time.Millisecond,
			Logger:     slog.New(slog.DiscardHandler),
		})
		var procs []sandbox.Process
		stop := func() {
			for _, p := range procs {
				p.Stop(context.Background())
			}
			l.Close()
		}
		for range 4 {
			p, err := l.Launch(t.Context(), "s")
			if err != nil {
				stop()
				t.Fatal(err)
			}
			procs = append(procs, p)
		}
		// Every descriptor of a session is open once Launch returned.
		most := 0
		for _, p := range procs {
			pid, err := strconv.Atoi(strings.TrimPrefix(p.ID(), "pid "))
			if err != nil {
				stop()
				t.Fatalf("process ID %q", p.ID())
			}
			most = max(most, sessionFDs(t, pid))
		}
		stop()
		t.Logf("supervised %t: a local session holds %d descriptors in the bridge; bridge.FDPerSession is %d", supervisor != nil, most, bridge.FDPerSession)
		if most > bridge.FDPerSession {
			t.Fatalf("supervised %t: a local session holds %d descriptors in the bridge, more than the %d bridge.FDPerSession keeps for it", supervisor != nil, most, bridge.FDPerSession)
		}
	}
}

package sandbox

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// OwnerEnv is set in the environment of every local server (and its
// supervisor), and inherited by whatever it starts, to
// "<boot ID>/<bridge pid>/<bridge start time>": the bridge process that owns
// it; under a supervisor, each server's value ends in "/<its number>",
// which tells the supervisor whose session an orphan is. It is not a
// secret. KillLocalLeftovers finds by it the processes of a bridge that no
// longer exists. A process that clears its environment before
// exec escapes the mark (and only the mark: the supervisor still ends it
// with the bridge).
const OwnerEnv = "MCP_BRIDGE_OWNER"

var ownerMarkOnce = sync.OnceValue(func() string {
	pid := os.Getpid()
	return bootID() + "/" + strconv.Itoa(pid) + "/" + processStart(pid)
})

// ownerMark is this process's OwnerEnv value.
func ownerMark() string { return ownerMarkOnce() }

// KillLocalLeftovers kills the local servers, and everything they started,
// left by a bridge process that no longer exists on this host: those whose
// supervisor died with it (kill -9 of both, the OOM killer). It reads
// OwnerEnv from /proc/<pid>/environ, so it sees only the processes it may
// read, those of the bridge's user (root: all), which are also the only ones
// it could kill. It returns how many processes it killed.
//
// Processes of a live bridge, this one included, are left alone, whichever
// bridge binary started them.
func KillLocalLeftovers() (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	boot := bootID()
	self := os.Getpid()
	alive := map[string]bool{} // owner "pid/start" → still running
	killed := 0
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or not ours
		}
		mark := ownerOf(env)
		if mark == "" {
			continue
		}
		// "<boot>/<pid>/<start>", and "/<server number>" under a
		// supervisor (supervise.go).
		parts := strings.Split(mark, "/")
		if len(parts) != 3 && len(parts) != 4 || parts[0] != boot || boot == "" {
			// Another boot cannot have left a process running; an
			// unknown boot ID leaves nothing to compare.
			continue
		}
		key := parts[1] + "/" + parts[2]
		ok, seen := alive[key]
		if !seen {
			if owner, err := strconv.Atoi(parts[1]); err == nil {
				ok = processStart(owner) == parts[2]
			}
			alive[key] = ok
		}
		if ok {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		} else if !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// ownerOf returns the OwnerEnv value in a /proc/<pid>/environ image.
func ownerOf(environ []byte) string {
	prefix := []byte(OwnerEnv + "=")
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v)
		}
	}
	return ""
}

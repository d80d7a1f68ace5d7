package main

import (
	"log/slog"
	"syscall"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// Descriptors the connection limit leaves to everything but connections.
const (
	// fdBase is for the bridge itself: the listener, log files, the Docker
	// socket, the runtime's own descriptors.
	fdBase = 64
	// fdPerSession is for one session's server: the bridge's ends of its
	// stdin, stdout and stderr pipes, and, for an unsupervised local
	// server (the bridge's own child), its pidfd and the one the Go runtime
	// keeps in os.Process (5 then; 3 under the shared supervisor, whose
	// socket is in fdBase; measured by TestDescriptorsPerSession; 4 were
	// kept once, and sessions 133 to 150 of 150 got 503 below the
	// connection limit), or the attached stream and API connections of its
	// container; and one to spare.
	fdPerSession = 6
)

// connectionLimit is the --max-connections in effect: the one configured
// (negative: none), lowered so that connections leave descriptors for the
// servers of --max-sessions sessions (near the limit, initialize
// failed with "502 pipe2: too many open files"). A connection beyond it
// gets a 503 while the bridge still has descriptors to spare.
//
// The Go runtime has already raised the soft RLIMIT_NOFILE to the hard
// limit at start-up (and restores the original for children), so the
// limit read here is the one to plan with.
func connectionLimit(configured, maxSessions int, logger *slog.Logger) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 { // unlimited, in effect
		return configured
	}
	limit := int(lim.Cur)
	avail := limit - fdBase - fdPerSession*maxSessions
	if avail < limit/4 {
		avail = limit / 4
		logger.Warn("the open-file limit cannot hold the servers of --max-sessions sessions as well as connections",
			"open_file_limit", limit, "max_sessions", maxSessions,
			"hint", "raise the hard open-file limit (ulimit -Hn, or the service's LimitNOFILE) or lower --max-sessions; initialize gets 503 when descriptors run out")
	}
	if configured == 0 {
		configured = bridge.DefaultMaxConnections
	}
	if configured < 0 || configured > avail {
		logger.Info("connections limited by the open-file limit, keeping descriptors for the servers' pipes",
			"max_connections", avail, "open_file_limit", limit, "max_sessions", maxSessions)
		return avail
	}
	logger.Debug("open-file limit", "open_file_limit", limit, "max_connections", configured)
	return configured
}

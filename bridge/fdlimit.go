package bridge

import (
	"log/slog"
	"syscall"
)

// Descriptors the connection limit leaves to everything but connections.
const (
	// FDBase is for the bridge itself: the listener, log files, the Docker
	// socket, the runtime's own descriptors.
	FDBase = 64
	// FDPerSession is for one session's server: the bridge's ends of its
	// stdin, stdout and stderr pipes, and, for an unsupervised local
	// server (the bridge's own child), its pidfd and the one the Go runtime
	// keeps in os.Process (5 then; 3 under the shared supervisor, whose
	// socket is in FDBase; measured by cmd/bridge's
	// TestDescriptorsPerSession; 4 were kept once, and sessions 133 to 150
	// of 150 got 503 below the connection limit), or the attached stream
	// and API connections of its container; and one to spare.
	FDPerSession = 6
)

// ConnectionLimit is the MaxConnections to give LimitListener: configured
// (zero: DefaultMaxConnections; negative: none), lowered so that
// connections leave descriptors for the servers of at most servers
// sessions (near the limit, initialize failed with "502 pipe2: too many
// open files"). A connection beyond it gets a 503 while the bridge still
// has descriptors to spare. It returns configured unchanged when the
// open-file limit is unknown or unlimited.
//
// The Go runtime has already raised the soft RLIMIT_NOFILE to the hard
// limit at start-up (and restores the original for children), so the
// limit read here is the one to plan with.
func ConnectionLimit(configured, servers int, logger *slog.Logger) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 { // unlimited, in effect
		return configured
	}
	limit := int(lim.Cur)
	avail := limit - FDBase - FDPerSession*servers
	if avail < limit/4 {
		avail = limit / 4
		logger.Warn("the open-file limit cannot hold the servers of --max-sessions sessions as well as connections",
			"open_file_limit", limit, "max_sessions", servers,
			"hint", "raise the hard open-file limit (ulimit -Hn, or the service's LimitNOFILE) or lower --max-sessions; initialize gets 503 when descriptors run out")
	}
	if configured == 0 {
		configured = DefaultMaxConnections
	}
	if configured < 0 || configured > avail {
		logger.Info("connections limited by the open-file limit, keeping descriptors for the servers' pipes",
			"max_connections", avail, "open_file_limit", limit, "max_sessions", servers)
		return avail
	}
	logger.Debug("open-file limit", "open_file_limit", limit, "max_connections", configured)
	return configured
}

package main

import (
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// connectionLimit is the --max-connections in effect: the one configured
// (negative: none), lowered so that connections leave descriptors for the
// servers of maxSessions sessions (bridge.ConnectionLimit).
func connectionLimit(configured, maxSessions int, logger *slog.Logger) int {
	return bridge.ConnectionLimit(configured, maxSessions, logger)
}

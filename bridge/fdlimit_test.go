package bridge_test

import (
	"log/slog"
	"syscall"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// The connection limit leaves FDBase descriptors to the bridge and
// FDPerSession to each server, and never less than a quarter of the
// open-file limit to connections.
func TestConnectionLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		t.Skip("no open-file limit to plan with")
	}
	limit := int(lim.Cur)
	logger := slog.New(slog.DiscardHandler)
	servers := (limit/2 - bridge.FDBase) / bridge.FDPerSession // leaves about half to connections
	avail := limit - bridge.FDBase - bridge.FDPerSession*servers
	for _, tc := range []struct {
		name                string
		configured, servers int
		want                int
	}{
		{"none configured", -1, servers, avail},
		{"default", 0, servers, min(bridge.DefaultMaxConnections, avail)},
		{"below what is left", 3, servers, 3},
		{"above what is left", avail + 1, servers, avail},
		{"too many servers: a quarter stays", -1, limit, limit / 4},
	} {
		if got := bridge.ConnectionLimit(tc.configured, tc.servers, logger); got != tc.want {
			t.Errorf("%s: ConnectionLimit(%d, %d) = %d with an open-file limit of %d, want %d", tc.name, tc.configured, tc.servers, got, limit, tc.want)
		}
	}
}

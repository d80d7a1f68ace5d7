package bridge_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// After an MRTR round, a legacy child's progress for the parked call
// reaches the TypeScript SDK 2.4 client under the retry's progress token,
// which is the one it knows.
func TestStatelessProgressAfterRound(t *testing.T) {
	peers := npmPeers(t)
	b, _ := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{})
	got := tsClient(t, peers, b.URL, "mrtr-progress")
	t.Logf("the TS client saw %v", got)
	if !strings.Contains(fmt.Sprint(got["elicit"]), "accept") {
		t.Fatalf("the call: %v", got)
	}
	if errs := fmt.Sprint(got["errors"]); strings.Contains(errs, "unknown token") {
		t.Errorf("progress with the first leg's token: %s", errs)
	}
	// The client counts one more of its own (it heard 1 when the
	// child's three were dropped as unknown).
	if n, _ := got["progress"].(float64); n < 3 {
		t.Errorf("the client heard %v progress notifications, want the child's 3", got["progress"])
	}
}

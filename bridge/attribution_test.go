package bridge_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/pool"
)

// npm server-everything sends roots/list from a timer 350 ms after
// initialized, with no request behind it. A call started on that fresh
// child did not cause it, and is not asked for roots: the bridge answers
// what a child asks in its first moments itself.
func TestStatelessUnsolicitedChildRequest(t *testing.T) {
	peers := npmPeers(t)
	server := []string{filepath.Join(peers, "node22"), filepath.Join(peers, "node_modules/.bin/mcp-server-everything")}
	// A settle time well beyond the server's 350 ms, so that a loaded
	// machine cannot make its timer fire after it (the default is 500 ms).
	b, _ := startStatelessCommand(t, server, pool.Options{Era: pool.EraLegacy, Settle: 2 * time.Second})
	got := tsClient(t, peers, b.URL, "long-op")
	t.Logf("the TS client saw %v", got)
	if !strings.Contains(fmt.Sprint(got["op"]), "completed") {
		t.Fatalf("the call: %v", got)
	}
	if asked := fmt.Sprint(got["asked"]); strings.Contains(asked, "roots") {
		t.Fatalf("the client was asked for roots during a call that never asked: %v", asked)
	}
}

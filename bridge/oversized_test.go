package bridge_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// A 10 MiB result passes at the default --max-message-bytes, as it does
// through supergateway, which has no limit.
func TestTenMiBResultAtDefaults(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	cs := connect(t, b.URL, nil)
	if got := callText(t, cs, "big", map[string]any{"n": 10 << 20}); len(got) != 10<<20 {
		t.Fatalf("a 10 MiB result came back as %d bytes", len(got))
	}
}

// In front of a stateless client, an answer over the limit fails its call
// with an error naming the limit and the flag; the pool's child (its only
// one: Max 1) goes on.
func TestStatelessOversizedAnswer(t *testing.T) {
	b, p := startStateless(t, pool.Options{Max: 1, Peer: peer.Options{MaxMessageBytes: 1 << 20}}, bridge.Options{})
	cs := sdkClient(t, b.URL)
	before := callText(t, cs, "pid", nil)
	_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "big", Arguments: map[string]any{"n": 10 << 20}})
	if err == nil || !strings.Contains(err.Error(), "--max-message-bytes") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("an answer over the limit: %v", err)
	}
	if after := callText(t, cs, "pid", nil); after != before {
		t.Fatalf("the child changed: pid %s, then %s", before, after)
	}
	if s := p.Stats(); s.Children != 1 {
		t.Fatalf("stats %+v", s)
	}
}

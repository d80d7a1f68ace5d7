package bridge_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/pool"
)

// A child's request without params (npm server-everything's roots/list)
// reaches the Go SDK client with "params":{}: without it, the client
// fails to decode the request and the whole call, in
// an InputRequiredResult (2026-07-28) and on a session's stream (2025).
func TestChildRequestWithoutParams(t *testing.T) {
	peers := npmPeers(t)
	server := []string{filepath.Join(peers, "node22"), filepath.Join(peers, "node_modules/.bin/mcp-server-everything")}
	check := func(t *testing.T, cs *mcp.ClientSession) {
		t.Helper()
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "get-roots-list"})
		if err != nil {
			t.Fatalf("get-roots-list: %v", err)
		}
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		if got := strings.Join(texts, " "); !strings.Contains(got, "file:///work") {
			t.Fatalf("get-roots-list: %q, want the client's root in it", got)
		}
	}
	t.Run("2026-07-28", func(t *testing.T) {
		b, _ := startStatelessCommand(t, server, pool.Options{Era: pool.EraLegacy})
		check(t, sdkClient(t, b.URL))
	})
	t.Run("2025", func(t *testing.T) {
		b := startBridge(t, bridgeConfig{command: server})
		c := mcp.NewClient(&mcp.Implementation{Name: "roots", Version: "1"}, nil)
		c.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
		cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		check(t, cs)
	})
}

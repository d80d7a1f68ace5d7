package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A group that a reload removes: once it has drained, its gauges
// (mcp_bridge_aggregate_members_down, _member_children, sessions_active
// under its path) are gone from /metrics, as a removed server's are,
// while /mcp's stay.
func TestConfigFileAggregateRemovedGroupGauges(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	servers := fmt.Sprintf(`"mcpServers": {"a": {"command": %q}, "b": {"command": %q}}`, helloBin, helloBin)
	b := startConfigBridge(t, bridgeBin, `{`+servers+`, "groups": {"g": {"servers": ["a", "b"]}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/groups/g/mcp"}, "2025-11-25")
	if err := echoAs(ctx, cs, "a__echo", "in the group"); err != nil {
		t.Fatal(err)
	}
	gauges := []string{"mcp_bridge_aggregate_members_down", "mcp_bridge_aggregate_member_children", "mcp_bridge_sessions_active"}
	fams := scrapeFamilies(t, b.base+"/metrics")
	for _, g := range gauges {
		for _, path := range []string{"/groups/g/mcp", "/mcp"} {
			if _, ok := metricValue(fams, g, "server", path); !ok {
				t.Fatalf("no %s{server=%q} while the group is served", g, path)
			}
		}
	}
	cs.Close()

	b.rewrite(t, `{`+servers+`}`)
	b.waitLog(t, "configuration reloaded")
	b.waitRecord(t, "the group drained", func(rec map[string]any) bool {
		return rec["msg"] == "aggregate drained" && rec["path"] == "/groups/g/mcp"
	})
	fams = scrapeFamilies(t, b.base+"/metrics")
	for _, g := range gauges {
		if v, ok := metricValue(fams, g, "server", "/groups/g/mcp"); ok {
			t.Errorf("%s{server=\"/groups/g/mcp\"} = %v after the group was removed and drained, want no series", g, v)
		}
		if _, ok := metricValue(fams, g, "server", "/mcp"); !ok {
			t.Errorf("no %s{server=\"/mcp\"} after the group was removed", g)
		}
	}
}

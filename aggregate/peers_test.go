package aggregate_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// npmPeers returns MCP_PEERS_DIR (node22 and node_modules with the
// TypeScript SDK clients and npm server-everything), or skips.
func npmPeers(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Node peers")
	}
	dir := os.Getenv("MCP_PEERS_DIR")
	if dir == "" {
		t.Skip("MCP_PEERS_DIR is not set: set it to a directory holding node22 and node_modules with the npm peers")
	}
	if _, err := os.Stat(filepath.Join(dir, "node22")); err != nil {
		t.Skipf("no node22 in MCP_PEERS_DIR=%s", dir)
	}
	return dir
}

// The TypeScript SDK clients, 1.x in a 2025-11-25 session and 2.x in
// 2026-07-28, against an aggregate of the Go test server, the Go SDK's
// everything-server and npm server-everything: prefixed names, routing,
// elicitation and sampling from members.
func TestTypeScriptClients(t *testing.T) {
	peers := npmPeers(t)
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members = append(o.Members, aggregate.Member{Name: "npm", Launcher: sandbox.NewLocal(&sandbox.LocalOptions{
			Command: filepath.Join(peers, "node22"), Args: []string{filepath.Join(peers, "node_modules/.bin/mcp-server-everything")},
			Logger: o.Logger})})
	})
	script, err := os.ReadFile("testdata/ts-aggregate-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's directory.
	dst := filepath.Join(peers, "ts-aggregate-client.mjs")
	if err := os.WriteFile(dst, script, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dst) })
	for _, tc := range []struct{ mode, version string }{{"v1", "2025-11-25"}, {"v2", "2026-07-28"}} {
		t.Run(tc.mode, func(t *testing.T) {
			out, err := exec.CommandContext(ctxT(t), filepath.Join(peers, "node22"), dst, f.url, tc.mode).Output()
			var got struct {
				Version, Echo, Elicit, Sample, Npm, Error string
				Tools, Asked                              []string
			}
			if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
				t.Fatalf("TS client: %v\n%s", err, out)
			}
			if got.Version != tc.version && got.Version != "unknown" {
				t.Errorf("negotiated %s, want %s", got.Version, tc.version)
			}
			for _, name := range []string{"test__echo", "every__test_sampling", "npm__echo"} {
				if !slices.Contains(got.Tools, name) {
					t.Errorf("tools/list lacks %s: %v", name, got.Tools)
				}
			}
			if got.Echo != "from-ts" || got.Elicit != "accept" || got.Sample == "" || got.Npm == "" {
				t.Errorf("answers: %+v", got)
			}
			if !slices.Contains(got.Asked, "elicitation") || !slices.Contains(got.Asked, "sampling") {
				t.Errorf("the client was asked %v, want elicitation and sampling", got.Asked)
			}
		})
	}
}

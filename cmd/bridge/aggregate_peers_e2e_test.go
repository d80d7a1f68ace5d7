package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// npmPeersDir is MCP_PEERS_DIR (node22 and node_modules with the
// TypeScript SDK clients and npm server-everything), or skips.
func npmPeersDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MCP_PEERS_DIR")
	if dir == "" {
		t.Skip("MCP_PEERS_DIR is not set: set it to a directory holding node22 and node_modules with the npm peers")
	}
	if _, err := os.Stat(filepath.Join(dir, "node22")); err != nil {
		t.Skipf("no node22 in MCP_PEERS_DIR=%s", dir)
	}
	return dir
}

// The TypeScript SDK clients through the binary: 1.x in a 2025-11-25
// session and 2.x in revision 2026-07-28, against /mcp aggregating
// examples/hello, the Go SDK's everything-server, npm server-everything
// and a remote member (another bridge binary, reached with the
// configuration's token only): each lists every member's tools under its prefix and
// calls one of each, and the everything-server's elicitation and sampling
// reach the client through the aggregate (in 2026-07-28, as rounds of a
// multi-round-trip call).
func TestConfigFileAggregateTypeScriptClients(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	peers := npmPeersDir(t)
	node := filepath.Join(peers, "node22")
	const memberToken = "ts-aggregate-remote-member-token-0123"
	remoteURL, rec := remoteMember(t, bridgeBin, helloBin, memberToken)
	t.Setenv("AGG_TS_MEMBER_TOKEN", memberToken)
	file := fmt.Sprintf(`{"mcpServers": {"hello": {"command": %q}, "every": {"command": %q}, "npm": {"command": %q, "args": [%q]},
		"far": {"url": %q, "type": "http", "headers": {"Authorization": "Bearer ${AGG_TS_MEMBER_TOKEN}"}}}}`,
		helloBin, childtest.EverythingServer(t), node, filepath.Join(peers, "node_modules/.bin/mcp-server-everything"), remoteURL)
	b := startConfigBridge(t, bridgeBin, file)
	script, err := os.ReadFile("testdata/ts-aggregate-binary.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's directory.
	dst, err := os.CreateTemp(peers, "ts-aggregate-binary-*.mjs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dst.Name()) })
	if _, err := dst.Write(script); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	for _, tc := range []struct{ mode, version string }{{"v1", "2025-11-25"}, {"v2", "2026-07-28"}} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, node, dst.Name(), b.base+"/mcp", tc.mode).Output()
			var got struct {
				Version, Hello, Every, Elicit, Sample, Npm, Far, Error string
				Tools, Asked                                           []string
			}
			if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
				t.Fatalf("TS client: %v\n%s", err, out)
			}
			if got.Version != tc.version && got.Version != "unknown" {
				t.Errorf("negotiated %s, want %s", got.Version, tc.version)
			}
			for _, name := range []string{"hello__echo", "every__test_simple_text", "every__test_elicitation", "npm__echo", "far__echo"} {
				if !slices.Contains(got.Tools, name) {
					t.Errorf("tools/list lacks %s: %v", name, got.Tools)
				}
			}
			for _, name := range got.Tools {
				if !strings.HasPrefix(name, "hello__") && !strings.HasPrefix(name, "every__") && !strings.HasPrefix(name, "npm__") && !strings.HasPrefix(name, "far__") {
					t.Errorf("tools/list has %s, without a member's prefix", name)
				}
			}
			if !strings.Contains(got.Hello, "from-ts") || got.Every == "" || !strings.Contains(got.Npm, "from-npm") || !strings.Contains(got.Far, "from-far") {
				t.Errorf("answers: %+v", got)
			}
			if !strings.Contains(got.Elicit, "action=accept") || !strings.Contains(got.Elicit, "ts-user") || !strings.Contains(got.Sample, "ts-sampled") {
				t.Errorf("elicitation and sampling answers: %q, %q", got.Elicit, got.Sample)
			}
			if !slices.Contains(got.Asked, "elicitation") || !slices.Contains(got.Asked, "sampling") {
				t.Errorf("the client was asked %v, want elicitation and sampling", got.Asked)
			}
		})
	}
	seen := rec.auths()
	if len(seen) == 0 {
		t.Fatal("the remote member got no request")
	}
	for _, a := range seen {
		if a != "Bearer "+memberToken {
			t.Fatalf("the remote member got Authorization %q, want only the configuration's token", a)
		}
	}
}

// The Go SDK client through the binary: a tool of the everything-server,
// a member of /mcp, that asks the client for input mid-call: in a 2025
// session the member's elicitation/create reaches the client through the
// aggregate; in revision 2026-07-28 it comes back as a round of a
// multi-round-trip call (the SDK answers it and retries), several times in
// a row.
func TestConfigFileAggregateElicitation(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	file := fmt.Sprintf(`{"mcpServers": {"hello": {"command": %q}, "every": {"command": %q}}}`, helloBin, childtest.EverythingServer(t))
	b := startConfigBridge(t, bridgeBin, file)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			var asked atomic.Int32
			client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					n := asked.Add(1)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": fmt.Sprint("hopper-", n)}}, nil
				},
			})
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if v := cs.InitializeResult().ProtocolVersion; v != version {
				t.Fatalf("negotiated %q, want %q", v, version)
			}
			for i := 1; i <= 3; i++ {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "every__test_elicitation", Arguments: map[string]any{"message": "who?"}})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				text := res.Content[0].(*mcp.TextContent).Text
				if want := fmt.Sprint("hopper-", i); res.IsError || !strings.Contains(text, "action=accept") || !strings.Contains(text, want) {
					t.Fatalf("call %d answered %q (error %v), want the elicitation's answer %s", i, text, res.IsError, want)
				}
			}
			if n := asked.Load(); n != 3 {
				t.Fatalf("the client was asked %d times, want 3", n)
			}
			if err := echoAs(ctx, cs, "hello__echo", "after "+version); err != nil {
				t.Fatal(err)
			}
		})
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The aggregates' bounds are keys of the file: the top-level "aggregate"
// sets every aggregate's (maxChildrenPerSession 1: a session of /mcp that
// called a's tool gets -32603 naming the bound when it calls b's), and a
// group's own key wins over it (the group's session calls both). A
// reload that changes the bound rebuilds /mcp with the new one.
func TestConfigFileAggregateBounds(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	servers := fmt.Sprintf(`"a": {"command": %q}, "b": {"command": %q}`, helloBin, helloBin)
	file := func(perSession int) string {
		return fmt.Sprintf(`{"mcpServers": {%s}, "aggregate": {"maxChildrenPerSession": %d, "idleTimeout": "never"},
			"groups": {"pair": {"servers": ["a", "b"], "maxChildrenPerSession": 2, "failClosed": true}}}`, servers, perSession)
	}
	b := startConfigBridge(t, bridgeBin, file(1))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	bound := func(t *testing.T, path string) {
		t.Helper()
		cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + path}, "2025-11-25")
		if err := echoAs(ctx, cs, "a__echo", "first member"); err != nil {
			t.Fatal(err)
		}
		err := echoAs(ctx, cs, "b__echo", "second member")
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != -32603 || !strings.Contains(rpcErr.Message, "already runs 1 member servers, the aggregate's bound per session") {
			t.Fatalf("%s: a second member's call with maxChildrenPerSession 1: %v, want error -32603 naming the bound", path, err)
		}
	}
	unbound := func(t *testing.T, path string) {
		t.Helper()
		cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + path}, "2025-11-25")
		for _, tool := range []string{"a__echo", "b__echo"} {
			if err := echoAs(ctx, cs, tool, "both members"); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
	t.Run("aggregate", func(t *testing.T) { bound(t, "/mcp") })
	t.Run("group overrides", func(t *testing.T) { unbound(t, "/groups/pair/mcp") })

	b.rewrite(t, file(2))
	b.waitLog(t, "configuration reloaded")
	t.Run("reloaded", func(t *testing.T) { unbound(t, "/mcp") })
}

// Bad bounds: the binary refuses to start, naming the file, the key and
// what it wants.
func TestConfigFileAggregateBoundsErrors(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	dir := t.TempDir()
	servers := fmt.Sprintf(`"mcpServers": {"a": {"command": %q}}`, helloBin)
	for _, c := range []struct{ name, file, want string }{
		{"zero", `{` + servers + `, "aggregate": {"maxChildren": 0}}`,
			`config F: key "aggregate": maxChildren: want a whole number, 1 or more`},
		{"unknown", `{` + servers + `, "aggregate": {"maxChildrn": 3}}`,
			`config F: key "aggregate": maxChildrn: unknown key; it takes maxChildren, maxChildrenPerSession, idleTimeout, failClosed`},
		{"duration", `{` + servers + `, "groups": {"g": {"servers": ["a"], "idleTimeout": "5"}}}`,
			`config F: group "g": key "idleTimeout": want a duration such as 30s, 5m or 1h, or "never"`},
		{"bool", `{` + servers + `, "groups": {"g": {"servers": ["a"], "failClosed": "yes"}}}`,
			`config F: group "g": key "failClosed": want true or false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".json")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bridgeBin, "--config", path).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; output:\n%s", err, out)
			}
			want := "bridge: " + strings.Replace(c.want, "config F", "config "+path, 1) + "\n"
			if !strings.HasPrefix(string(out), want) {
				t.Fatalf("output\n%s\nwant it to start with\n%s", out, want)
			}
		})
	}
}

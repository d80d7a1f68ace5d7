package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A remote member of "type": "sse" (another bridge binary, over its
// legacy HTTP+SSE endpoint) whose credentials come from a file
// ("headerFiles"): /mcp lists and calls it in a 2025 session and in
// revision 2026-07-28, and every request it gets carries the file's
// Authorization, never the client's.
func TestConfigFileAggregateRemoteSSEHeaderFile(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	remoteURL, rec := remoteMember(t, bridgeBin, helloBin, "file-token")
	sseURL, ok := strings.CutSuffix(remoteURL, "/mcp")
	if !ok {
		t.Fatalf("the remote bridge serves %s, not at /mcp", remoteURL)
	}
	sseURL += "/sse"
	dir := t.TempDir()
	cred := filepath.Join(dir, "far-auth")
	if err := os.WriteFile(cred, []byte("Bearer file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("client-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf(`{"mcpServers": {"a": {"command": %q},
		"far": {"url": %q, "type": "sse", "headerFiles": {"Authorization": %q}}}}`, helloBin, sseURL, cred)
	b := startConfigBridge(t, bridgeBin, file, "--auth-token-file", tokens)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	client := &http.Client{Transport: bearerTransport{"client-token"}}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp", HTTPClient: client}, version)
			want := []string{"a__count", "a__countdown", "a__echo", "far__count", "far__countdown", "far__echo"}
			if got := toolNames(t, ctx, cs); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("/mcp tools/list: %v, want %v", got, want)
			}
			if err := echoAs(ctx, cs, "far__echo", "over sse "+version); err != nil {
				t.Fatal(err)
			}
		})
	}
	seen := rec.auths()
	if len(seen) == 0 {
		t.Fatal("the remote member got no request")
	}
	for _, a := range seen {
		if a != "Bearer file-token" {
			t.Fatalf("the remote member got Authorization %q, want the file's only", a)
		}
	}
}

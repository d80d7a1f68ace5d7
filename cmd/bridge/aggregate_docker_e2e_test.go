package main

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A member sandboxed in Docker (per-server keys) beside a local one in
// /mcp: calls route to each, in a 2025 session and in revision
// 2026-07-28, the Docker member's in containers; once the bridge stops
// (SIGTERM), no container of its instance is left.
func TestConfigFileAggregateDockerMember(t *testing.T) {
	d := setupDockerE2E(t)
	_, helloBin := buildBinaries(t)
	inst := "e2e-" + dockertest.RandomSuffix()
	b := startConfigBridge(t, d.bridge, fmt.Sprintf(`{
		"bridge": {"instance": %q, "stop-grace": "2s"},
		"mcpServers": {
			"local": {"command": %q},
			"boxed": {"sandbox": "docker", "image": %q, "pull": "never", "sandbox-memory": "128m"}
		}}`, inst, helloBin, d.image))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want := []string{"boxed__count", "boxed__countdown", "boxed__echo", "local__count", "local__countdown", "local__echo"}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, version)
		if got := toolNames(t, ctx, cs); !slices.Equal(got, want) {
			t.Fatalf("%s: tools/list: %v, want %v", version, got, want)
		}
		for _, tool := range []string{"boxed__echo", "local__echo"} {
			if err := echoAs(ctx, cs, tool, "via "+version); err != nil {
				t.Fatalf("%s: %v", version, err)
			}
		}
	}
	// The catalog server of boxed, and the member servers the sessions
	// started to call it (the 2025 session's, the 2026-07-28 pool's).
	if n := d.containers(t, inst); n < 2 {
		t.Fatalf("%d containers of the instance, want the Docker member's catalog server and those its calls started", n)
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("bridge exit: %v", err)
	}
	if n := d.containers(t, inst); n != 0 {
		t.Fatalf("%d containers of the instance left after the bridge stopped", n)
	}
}

package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Issue 26: a SIGHUP to a one-command bridge (nothing to reload) must not
// end it: the session open before it still works after it.
func TestSIGHUPKeepsOneCommandBridge(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	b := startLoggedBridge(t, bridgeBin, "--", helloBin)
	cs := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.url})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := echo(ctx, cs, "before"); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	b.waitLog(t, "SIGHUP: nothing to reload (reloads --config, --tls-cert and --tls-key when given)")
	if err := echo(ctx, cs, "after"); err != nil {
		t.Fatalf("the session open before SIGHUP: %v", err)
	}
}

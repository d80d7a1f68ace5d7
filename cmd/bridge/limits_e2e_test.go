package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// --request-timeout holds for the Go SDK v1.8 client, which speaks
// revision 2026-07-28 (stateless calls): a call longer than it gets
// -32001, as a session's does. Before, the pool never heard of it and the
// call ran to its end.
func TestRequestTimeoutStateless(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	b := startLoggedBridge(t, bridgeBin, "--request-timeout", "500ms", "--", helloBin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "timeout", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28 (stateless calls)", v)
	}
	// countdown from 20 runs two seconds, without progress (no token).
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"from": 20}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32001 {
		t.Fatalf("a 2 s call with --request-timeout 500ms: %v, want error -32001", err)
	}
}

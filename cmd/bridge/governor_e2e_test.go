package main

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The GOMAXPROCS governor counts revision 2026-07-28 (stateless) calls as
// it counts a session's requests: with no load it drops to one P after
// procs.Hold, and two stateless calls in flight at once raise it again
// (it logs each change at debug level). Before, it heard of sessions only,
// and under stateless-only load stayed on one P.
func TestGovernorCountsStatelessCalls(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("the governor is off with one CPU")
	}
	t.Setenv("GOMAXPROCS", "") // the operator's choice turns it off
	bridgeBin, helloBin := buildBinaries(t)
	b := startLoggedBridge(t, bridgeBin, "--log-level", "debug", "--", helloBin)
	// No load: one P.
	b.waitLog(t, "GOMAXPROCS changed with the load")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	progressed := map[string]chan struct{}{"a": make(chan struct{}, 100), "b": make(chan struct{}, 100)}
	client := mcp.NewClient(&mcp.Implementation{Name: "governor", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if tok, ok := r.Params.ProgressToken.(string); ok && progressed[tok] != nil {
				progressed[tok] <- struct{}{}
			}
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28 (stateless calls)", v)
	}
	calls := make(chan error, 2)
	call := func(tok string) {
		p := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"from": 20}}
		p.SetProgressToken(tok)
		_, err := cs.CallTool(ctx, p)
		calls <- err
	}
	// Two calls in flight at once: the second starts once the first
	// reported progress, and runs two seconds, as the first does.
	go call("a")
	<-progressed["a"]
	go call("b")
	<-progressed["b"]
	b.waitLog(t, "GOMAXPROCS changed with the load")
	for range 2 {
		if err := <-calls; err != nil {
			t.Fatal(err)
		}
	}
}

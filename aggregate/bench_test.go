package aggregate_test

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// serve serves the children of l at an endpoint, in both eras.
func serve(b *testing.B, l sandbox.Launcher, release func() error) string {
	b.Helper()
	lg := quiet()
	e, err := endpoint.New(&endpoint.Options{
		Session: &session.Options{Launcher: session.LauncherOf(l), Logger: lg},
		Pool: &pool.Options{
			Launch: func(ctx context.Context, name string) (peer.Process, error) { return l.Launch(ctx, name) },
			Era:    pool.EraLegacy, OtherVersions: bridge.SessionVersions(), Logger: lg,
		},
		Handler: &bridge.Options{Path: "/mcp", Logger: lg},
		Release: release,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	b.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			b.Error(err)
		}
	})
	return srv.URL + "/mcp"
}

// BenchmarkCall compares a tool call through an aggregate of one member
// with the same call on the member's own endpoint, in the same run, in
// both eras: the ratio is the aggregate's cost.
func BenchmarkCall(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: quiet()})
	agg, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "test", Launcher: local}}, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	paths := []struct{ name, url, tool string }{
		{"own", serve(b, local, nil), "echo"},
		{"aggregate", serve(b, agg.Launcher(), func() error { return agg.Close(context.Background()) }), "test__echo"},
	}
	for _, version := range versions {
		for _, p := range paths {
			b.Run(version+"/"+p.name, func(b *testing.B) {
				ctx := context.Background()
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
					Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
				if err != nil {
					b.Fatal(err)
				}
				defer cs.Close()
				params := &mcp.CallToolParams{Name: p.tool, Arguments: map[string]any{"text": "hello"}}
				if _, err := cs.CallTool(ctx, params); err != nil { // the member child starts
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					res, err := cs.CallTool(ctx, params)
					if err != nil || res.IsError {
						b.Fatal(err, res)
					}
				}
			})
		}
	}
}

// BenchmarkFiftySessions opens 50 sessions of an aggregate of two
// members, each listing everything and calling one member's tool, and
// reports the processes started: one child of the called member per
// session, none of the other, plus one catalog child per member
// (MetaMCP#162: a naive aggregate starts every member for each session).
func BenchmarkFiftySessions(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		test := &counting{l: sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: quiet()})}
		every := &counting{l: sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: quiet()})}
		agg, err := aggregate.New(&aggregate.Options{Members: []aggregate.Member{{Name: "test", Launcher: test}, {Name: "other", Launcher: every}}, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		url := serve(b, agg.Launcher(), func() error { return agg.Close(context.Background()) })
		ctx := context.Background()
		var sessions []*mcp.ClientSession
		for range 50 {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
				Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				b.Fatal(err)
			}
			sessions = append(sessions, cs)
			if _, err := cs.ListTools(ctx, nil); err != nil {
				b.Fatal(err)
			}
			if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__echo", Arguments: map[string]any{"text": "x"}}); err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
		for _, cs := range sessions {
			cs.Close()
		}
		b.ReportMetric(float64(len(test.runs)), "test-processes")
		b.ReportMetric(float64(len(every.runs)), "other-processes")
	}
}

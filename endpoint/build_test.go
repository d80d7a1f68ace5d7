package endpoint_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// serverOptions are a server's options on test children.
func serverOptions(t *testing.T, name string) *endpoint.ServerOptions {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &endpoint.ServerOptions{
		Name:            name,
		Local:           sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), childEnv+"=1")},
		Unsupervised:    true, // the test binary is no supervisor
		StopGrace:       2 * time.Second,
		ChildEra:        pool.EraLegacy,
		PoolMax:         pool.DefaultMax,
		RequestStateTTL: pool.DefaultStateTTL,
		AuditLog:        filepath.Join(t.TempDir(), "audit.log"),
	}
}

// shared is what the servers of a test share: metrics, one log budget,
// a logger into the test's log.
func shared(t *testing.T) *endpoint.Shared {
	return &endpoint.Shared{
		Metrics:   metrics.New(),
		LogBudget: session.NewLogBudget(session.DefaultLogMaxTotalBytes),
		Logger:    slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

var versions = []string{"2025-11-25", "2026-07-28"}

// The one-command form, built by Build: a call in flight at shutdown
// (Drain, WaitIdle within the grace, Close) gets its answer, in either
// era, and Close releases what Build made (the audit log has the call).
func TestBuildShutdown(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			sh := shared(t)
			o := serverOptions(t, "")
			set := endpoint.NewSet(&endpoint.SetOptions{One: true, Grace: time.Minute, StopBudget: 30 * time.Second, Logger: sh.Logger})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := set.Apply(ctx, []endpoint.Member{{Build: func(ctx context.Context) (*endpoint.Endpoint, error) {
				return endpoint.Build(ctx, sh, o, bridge.DefaultPath)
			}}}); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(set)
			defer srv.Close()
			c, done := startCallIn(t, ctx, srv.URL+bridge.DefaultPath, v)
			set.Drain()
			done0, cancel0 := context.WithCancel(ctx)
			cancel0()
			if set.WaitIdle(done0) == nil {
				t.Fatal("WaitIdle returns with a call in flight")
			}
			c.Close()
			if err := set.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if err := set.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the call in flight at shutdown: %v, want its answer", err)
			}
			data, err := os.ReadFile(o.AuditLog)
			if err != nil || !strings.Contains(string(data), `"tool":"wait"`) {
				t.Fatalf("audit log (%v):\n%s", err, data)
			}
		})
	}
}

// A reload that removes a server built by Build (Apply without it)
// drains it: a call in flight on it completes within the grace, in either
// era; new sessions get 404 and new stateless calls 503 with Retry-After
// meanwhile; the server kept is not rebuilt; the removed one's gauges go.
func TestBuildReloadRemovesServer(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			sh := shared(t)
			forgotten := make(chan string, 1)
			set := endpoint.NewSet(&endpoint.SetOptions{
				Edge:       sh.HandlerOptions(bridge.Options{Path: bridge.DefaultPath}),
				Grace:      time.Minute,
				StopBudget: 30 * time.Second,
				Forget:     func(name string) { sh.Forget(name); forgotten <- name },
				Logger:     sh.Logger,
			})
			srv := httptest.NewServer(set)
			t.Cleanup(func() {
				srv.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := set.Close(ctx); err != nil {
					t.Error(err)
				}
			})
			builds := map[string]int{}
			member := func(name string) endpoint.Member {
				return endpoint.Member{Name: name, Key: "1", Build: func(ctx context.Context) (*endpoint.Endpoint, error) {
					builds[name]++
					return endpoint.Build(ctx, sh, serverOptions(t, name), bridge.ServerPath(name))
				}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := set.Apply(ctx, []endpoint.Member{member("a"), member("b")}); err != nil {
				t.Fatal(err)
			}
			url := srv.URL + bridge.ServerPath("a")
			c, done := startCallIn(t, ctx, url, v)
			ch, err := set.Apply(ctx, []endpoint.Member{member("b")})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ch.Removed, []string{"a"}) || !slices.Equal(ch.Unchanged, []string{"b"}) || builds["b"] != 1 {
				t.Fatalf("changes %+v, builds %v: want a removed, b kept", ch, builds)
			}
			if resp := post(t, url, newCall); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("a new call to the removed server: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			c.Close()
			if err := <-done; err != nil {
				t.Fatalf("the call in flight at the reload: %v, want its answer", err)
			}
			if name := <-forgotten; name != "a" {
				t.Fatalf("forgot %q, want a", name)
			}
			if resp := post(t, url, newCall); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("a call to the drained server: %d, want 404", resp.StatusCode)
			}
		})
	}
}

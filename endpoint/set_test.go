package endpoint_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
)

// A reload that removes a server (Apply without it) drains it: a
// 2026-07-28 call in flight on it completes within the grace, new calls
// to it get 503 with Retry-After, the servers kept are not rebuilt, and
// once drained the removed server is forgotten and its path unknown.
func TestSetReloadRemovesServer(t *testing.T) {
	forgotten := make(chan string, 1)
	set := endpoint.NewSet(&endpoint.SetOptions{
		Edge:       &bridge.Options{Path: bridge.DefaultPath},
		Grace:      time.Minute,
		StopBudget: 30 * time.Second,
		Forget:     func(name string) { forgotten <- name },
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
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
	member := func(name, key string) endpoint.Member {
		return endpoint.Member{Name: name, Key: key, Build: func(context.Context) (*endpoint.Endpoint, error) {
			builds[name]++
			return build(t, bridge.ServerPath(name), nil), nil
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := set.Apply(ctx, []endpoint.Member{member("a", "1"), member("b", "1")}); err != nil {
		t.Fatal(err)
	}
	url := srv.URL + bridge.ServerPath("a")
	c, done := startCall(t, ctx, url)
	ch, err := set.Apply(ctx, []endpoint.Member{member("b", "1")})
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
}

// The one-command form is a set of one at /mcp: a 2026-07-28 call in
// flight at shutdown (Drain, WaitIdle within the grace, Close) gets its
// answer.
func TestSetOfOneShutdown(t *testing.T) {
	set := endpoint.NewSet(&endpoint.SetOptions{One: true, Grace: time.Minute, StopBudget: 30 * time.Second})
	if _, err := set.Apply(context.Background(), []endpoint.Member{{Build: func(context.Context) (*endpoint.Endpoint, error) {
		return build(t, bridge.DefaultPath, nil), nil
	}}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(set)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, done := startCall(t, ctx, srv.URL+bridge.DefaultPath)
	set.Drain()
	done0, cancel0 := context.WithCancel(ctx)
	cancel0()
	if set.WaitIdle(done0) == nil {
		t.Fatal("WaitIdle returns with a 2026-07-28 call in flight")
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
}

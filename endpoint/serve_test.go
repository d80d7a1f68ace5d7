package endpoint_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
)

// onMessage is a slog handler that tells when a record with msg is logged.
type onMessage struct {
	slog.Handler
	msg  string
	seen chan struct{}
}

func (h onMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		close(h.seen)
	}
	return h.Handler.Handle(ctx, r)
}

// serveOne serves a set of one (the one-command form) on a listener with
// Serve until the returned cancel; shuttingDown is closed once the
// shutdown has begun, and served carries what Serve returned.
func serveOne(t *testing.T, grace time.Duration) (url string, cancel func(), shuttingDown <-chan struct{}, served <-chan error, set *endpoint.Set) {
	set = endpoint.NewSet(&endpoint.SetOptions{One: true, Grace: grace, StopBudget: 30 * time.Second})
	if _, err := set.Apply(context.Background(), []endpoint.Member{{Build: func(context.Context) (*endpoint.Endpoint, error) {
		return build(t, bridge.DefaultPath, nil), nil
	}}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan struct{})
	logger := slog.New(onMessage{slog.NewTextHandler(testWriter{t}, nil), "shutting down", seen})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- endpoint.Serve(ctx, ln, set, &endpoint.ServeOptions{Grace: grace, StopBudget: 30 * time.Second, Logger: logger})
	}()
	return "http://" + ln.Addr().String() + bridge.DefaultPath, cancel, seen, done, set
}

// Serve's shutdown order: once it begins, a 2025 session's call and a
// 2026-07-28 call in flight still get their answers within the grace,
// then every server stops, the listener is closed and Serve returns nil.
func TestServeShutdownWaitsForCallsInFlight(t *testing.T) {
	url, cancel, shuttingDown, served, set := serveOne(t, time.Minute)
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	c25, done25 := startCallIn(t, ctx, url, "2025-11-25")
	c26, done26 := startCall(t, ctx, url)
	cancel()
	<-shuttingDown
	c25.Close()
	c26.Close()
	if err := <-done25; err != nil {
		t.Errorf("the 2025 session's call in flight at shutdown: %v, want its answer", err)
	}
	if err := <-done26; err != nil {
		t.Errorf("the 2026-07-28 call in flight at shutdown: %v, want its answer", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := set.Apply(ctx, nil); err == nil {
		t.Error("the front end is still open after Serve returned")
	}
	if c, err := net.Dial("tcp", url[len("http://"):len(url)-len(bridge.DefaultPath)]); err == nil {
		c.Close()
		t.Error("the listener still accepts after Serve returned")
	}
}

// A call still in flight when the grace is over gets an error instead of
// holding the shutdown: Serve ends the sessions and returns.
func TestServeShutdownEndsCallsAfterGrace(t *testing.T) {
	url, cancel, shuttingDown, served, _ := serveOne(t, 0)
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	c, done := startCallIn(t, ctx, url, "2025-11-25")
	defer c.Close()
	cancel()
	<-shuttingDown
	if err := <-done; err == nil {
		t.Error("a call in flight past the grace got an answer; want an error")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

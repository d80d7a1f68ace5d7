package pool

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// A call that is still taking a child (its child starting) when its
// server is retired is waited for, not aborted: WaitIdle counts it, and
// Close after WaitIdle leaves it its answer. Once retired, the pool
// refuses new calls with ErrClosed (503 with Retry-After at the front
// end), so the drain ends.
func TestRetireWaitsForCallTakingChild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), childEnv+"=1"), StopGrace: 2 * time.Second})
	launching, release := make(chan struct{}), make(chan struct{})
	p, err := New(&Options{Era: EraLegacy, Launch: func(ctx context.Context, name string) (peer.Process, error) {
		close(launching)
		<-release
		return local.Launch(ctx, name)
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		ans []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		ans, err := p.Serve(ctx, request(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`), func([]byte) error { return nil })
		done <- result{ans, err}
	}()
	// The call is starting its child: nothing is in flight on a child yet.
	<-launching
	p.Retire()
	close(release)
	if err := p.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !strings.Contains(string(r.ans), `"hi"`) {
		t.Fatalf("the call in flight at retire: %s %v, want its answer", r.ans, r.err)
	}
}

// Once retired, a pool takes no new call: ErrClosed, which the front end
// answers 503 with Retry-After.
func TestRetireRefusesNewCalls(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy})
	p.Retire()
	_, err := p.Serve(context.Background(), request(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`), func([]byte) error { return nil })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("a call after Retire: %v, want ErrClosed", err)
	}
	if s := p.Stats(); s.Children != 0 || s.Starting != 0 {
		t.Fatalf("after a refused call: %+v, want no child started", s)
	}
}

package peer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// launchChild starts the test binary as a Go SDK stdio server.
func launchChild(t *testing.T) sandbox.Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:   exe,
		Env:       append(os.Environ(), testserver.Env+"=1"),
		StopGrace: 2 * time.Second,
		Logger:    slog.New(slog.DiscardHandler),
	})
	proc, err := l.Launch(context.Background(), "peer-test")
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// TestRealChildShared: the bridge initializes a real Go SDK server itself,
// then eight clients that all number their requests 1, 2, 3 with the same
// progress token call it concurrently; each gets exactly its own answers and
// its own progress, with its own ids, and the server sees no collision (the
// SDK would refuse a duplicate id in flight).
func TestRealChildShared(t *testing.T) {
	proc := launchChild(t)
	router := &clientRouter{got: map[string][]string{}, ended: make(chan error, 1)}
	conn := peer.New(proc, router, &peer.Options{Logger: slog.New(slog.DiscardHandler)})
	defer conn.Close(context.Background())
	ctx := context.Background()

	res, err := conn.Initialize(ctx, map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "peer-test", "version": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), `"`+testserver.Name+`"`) || conn.ProtocolVersion() != "2025-06-18" {
		t.Fatalf("initialize: %s, version %q", res, conn.ProtocolVersion())
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	const clients, calls = 8, 3
	router.wg.Add(clients * calls)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			origin := client(fmt.Sprintf("client-%d", c))
			for i := 1; i <= calls; i++ {
				msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s/%d","n":2},"_meta":{"progressToken":"tok"}}}`, i, origin, i)
				env, err := jsonrpc.Parse([]byte(msg))
				if err != nil {
					t.Error(err)
					return
				}
				if err := conn.Send(origin, jsonrpc.Message{Data: []byte(msg), Env: env}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	router.wg.Wait()

	router.mu.Lock()
	defer router.mu.Unlock()
	for c := range clients {
		origin := fmt.Sprintf("client-%d", c)
		got := router.got[origin]
		var answers, progress int
		for _, data := range got {
			var m struct {
				ID     json.RawMessage
				Params struct{ ProgressToken json.RawMessage }
				Result struct{ Content []struct{ Text string } }
			}
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatal(err)
			}
			if m.ID == nil {
				progress++
				if string(m.Params.ProgressToken) != `"tok"` {
					t.Errorf("%s got progress with token %s", origin, m.Params.ProgressToken)
				}
				continue
			}
			answers++
			if want := origin + "/" + string(m.ID); len(m.Result.Content) != 1 || m.Result.Content[0].Text != want {
				t.Errorf("%s got %s, want the answer %q for id %s", origin, data, want, m.ID)
			}
		}
		if answers != calls || progress != 2*calls {
			t.Errorf("%s got %d answers and %d progress notifications, want %d and %d: %q", origin, answers, progress, calls, 2*calls, got)
		}
	}
	if len(router.got) != clients {
		t.Errorf("messages went to %d origins, want %d", len(router.got), clients)
	}
}

// clientRouter collects what each client gets; wg counts answers.
type clientRouter struct {
	mu    sync.Mutex
	got   map[string][]string
	wg    sync.WaitGroup
	ended chan error
}

func (r *clientRouter) Route(m *peer.Message) {
	origin, _ := m.Origin.(client)
	r.mu.Lock()
	r.got[string(origin)] = append(r.got[string(origin)], string(m.Data))
	r.mu.Unlock()
	if m.Env.Kind == jsonrpc.KindResponse {
		r.wg.Done()
	}
}

func (r *clientRouter) Ended(err error) { r.ended <- err }

// TestRealChildExit: Close stops a real child; the Router is told it
// exited, after which Send and Call fail with ErrClosed.
func TestRealChildExit(t *testing.T) {
	proc := launchChild(t)
	router := &clientRouter{got: map[string][]string{}, ended: make(chan error, 1)}
	conn := peer.New(proc, router, &peer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err := conn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-router.ended; !errors.Is(err, peer.ErrExited) {
		t.Fatalf("Ended(%v), want ErrExited", err)
	}
	if _, err := conn.Call(context.Background(), "ping", nil); !errors.Is(err, peer.ErrClosed) {
		t.Fatalf("Call after the end: %v", err)
	}
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	env, _ := jsonrpc.Parse(msg)
	if err := conn.Send(client("a"), jsonrpc.Message{Data: msg, Env: env}); !errors.Is(err, peer.ErrClosed) {
		t.Fatalf("Send after the end: %v", err)
	}
}

// A sandbox.Process is a peer.Process.
var _ peer.Process = sandbox.Process(nil)

// TestOwnCallWhileStopping: a request of the bridge's own (a pin
// enforcer's list after list_changed) that races the end of a session
// finds stdin closed by Stop while the child still runs; it fails with
// ErrClosed, which callers ignore, not with the write error ("file already
// closed", which the pin enforcer logged at WARN at every DELETE).
// The child tells when its stdin has ended, so the race is hit every
// time.
func TestOwnCallWhileStopping(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "linger")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	l := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:   exe,
		Env:       append(os.Environ(), childEnv+"=linger", lingerFIFOEnv+"="+fifo),
		StopGrace: time.Minute, // the child is let go through the FIFO, well before
		Logger:    slog.New(slog.DiscardHandler),
	})
	proc, err := l.Launch(context.Background(), "peer-test")
	if err != nil {
		t.Fatal(err)
	}
	router := &notedRouter{note: make(chan string, 1), ended: make(chan error, 1)}
	conn := peer.New(proc, router, &peer.Options{Logger: slog.New(slog.DiscardHandler)})
	if _, err := conn.Initialize(context.Background(), map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "peer-test", "version": "1"},
	}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- conn.Close(context.Background()) }()
	if got := <-router.note; !strings.Contains(got, "stdin closed") {
		t.Fatalf("the child said %s", got)
	}
	_, callErr := conn.Call(context.Background(), "tools/list", nil)
	// Let the child go.
	if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
		f.Close()
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-router.ended
	if !errors.Is(callErr, peer.ErrClosed) {
		t.Fatalf("a call of the bridge's own while the child stops: %v, want ErrClosed", callErr)
	}
}

// notedRouter hands on the child's notifications.
type notedRouter struct {
	note  chan string
	ended chan error
}

func (r *notedRouter) Route(m *peer.Message) {
	if m.Env.Kind == jsonrpc.KindNotification {
		r.note <- string(m.Data)
	}
}

func (r *notedRouter) Ended(err error) { r.ended <- err }

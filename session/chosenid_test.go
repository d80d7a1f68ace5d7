package session

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// A session may take an ID its creator chose (a hosting platform's): the
// ID is checked like the ones the bridge makes, and never takes over a live
// or starting session's.
func TestCreateWithID(t *testing.T) {
	checkLeaks(t)
	reg, l := newTestRegistry(t, Options{})
	const id = "0b9d4e1c-7f3a-4b2e-9c8d-1a2b3c4d5e6f"
	s, err := reg.CreateWithID(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	<-l.ids
	<-l.procs
	if s.ID() != id {
		t.Fatalf("ID %q; want %q", s.ID(), id)
	}
	if got, err := reg.Get(id); err != nil || got != s {
		t.Fatalf("Get: %v, %v", got, err)
	}
	if _, err := reg.CreateWithID(context.Background(), "", id); !errors.Is(err, ErrIDInUse) {
		t.Fatalf("a second session with a live ID: %v; want ErrIDInUse", err)
	}
	// A random session's ID cannot be taken either.
	other, err := reg.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	<-l.ids
	<-l.procs
	if _, err := reg.CreateWithID(context.Background(), "", other.ID()); !errors.Is(err, ErrIDInUse) {
		t.Fatalf("taking a random session's ID: %v; want ErrIDInUse", err)
	}
	if len(l.ids) != 0 || reg.Len() != 2 {
		t.Fatalf("a refused session launched a server or was registered: %d launches, %d sessions", len(l.ids), reg.Len())
	}

	for _, bad := range []string{"", "with space", "tab\there", "caf\u00e9", "nul\x00", "del\x7f", strings.Repeat("a", MaxChosenIDBytes+1)} {
		if _, err := reg.CreateWithID(context.Background(), "", bad); !errors.Is(err, ErrBadChosenID) {
			t.Errorf("CreateWithID(%q): %v; want ErrBadChosenID", bad, err)
		}
	}
	if len(l.ids) != 0 {
		t.Fatalf("a bad ID launched a server")
	}
	longest := strings.Repeat("~", MaxChosenIDBytes)
	if _, err := reg.CreateWithID(context.Background(), "", longest); err != nil {
		t.Fatalf("an ID of %d bytes: %v", MaxChosenIDBytes, err)
	}
	<-l.ids
	<-l.procs

	// Once the session ended, its ID is free again.
	s.Close(ErrDeleted)
	<-s.Stopped()
	s2, err := reg.CreateWithID(context.Background(), "", id)
	if err != nil {
		t.Fatalf("reusing the ID of an ended session: %v", err)
	}
	<-l.ids
	<-l.procs
	if s2 == s || s2.ID() != id {
		t.Fatalf("got the ended session back")
	}
}

// The ID is reserved while the session's server starts: a second
// initialize with the same ID meanwhile is refused, not raced.
func TestCreateWithIDReservedWhileStarting(t *testing.T) {
	checkLeaks(t)
	gate := &gatedLauncher{called: make(chan struct{}), release: make(chan struct{}), inner: newMemLauncher()}
	reg := NewRegistry(&Options{Launcher: gate, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Shutdown(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := reg.CreateWithID(context.Background(), "", "platform-1")
		done <- err
	}()
	<-gate.called
	if _, err := reg.CreateWithID(context.Background(), "", "platform-1"); !errors.Is(err, ErrIDInUse) {
		t.Errorf("while the first starts: %v; want ErrIDInUse", err)
	}
	close(gate.release)
	if err := <-done; err != nil {
		t.Fatalf("the first: %v", err)
	}
}

// gatedLauncher holds its first launch until release, after closing
// called; later launches go through.
type gatedLauncher struct {
	called, release chan struct{}
	inner           *memLauncher
	once            sync.Once
}

func (g *gatedLauncher) Launch(ctx context.Context, id string) (peer.Process, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.called)
		<-g.release
	}
	return g.inner.Launch(ctx, id)
}

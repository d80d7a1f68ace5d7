package aggregate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// failing is a launcher that cannot start anything, and notes when it
// was asked.
type failing struct {
	mu    sync.Mutex
	start time.Time
	at    []time.Duration
}

func (f *failing) Launch(context.Context, string) (sandbox.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Since(f.start))
	return nil, errors.New("no such command")
}

// A member that cannot start is tried again after RetryMin, doubling up
// to RetryMax, and no more once the aggregate is closed.
func TestRetryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &failing{start: time.Now()}
		a, err := aggregate.New(&aggregate.Options{
			Members:  []aggregate.Member{{Name: "gone", Launcher: l}},
			RetryMin: time.Second, RetryMax: 4 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second}
		if len(l.at) != len(want) {
			t.Fatalf("launched at %v, want %v", l.at, want)
		}
		for i := range want {
			if l.at[i] != want[i] {
				t.Fatalf("launched at %v, want %v", l.at, want)
			}
		}
		if down := a.Down(); down["gone"] == nil {
			t.Errorf("Down() = %v, want gone with its error", down)
		}
	})
}

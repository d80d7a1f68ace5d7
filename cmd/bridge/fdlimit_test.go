package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// fdsOpen counts this process's open descriptors.
func fdsOpen(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(entries)
}

// The connection limit keeps fdPerSession descriptors for each session's
// server: at least what a supervised local server holds in the bridge
// (issue 25, item 10: it held 5.14, 4 were kept, and sessions 133 to 150
// of 150 got 503 below the connection limit).
func TestDescriptorsPerSession(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:    "sleep",
		Args:       []string{"1000"},
		Supervisor: []string{exe, sandbox.SuperviseArg},
		StopGrace:  100 * time.Millisecond,
		Logger:     slog.New(slog.DiscardHandler),
	})
	defer l.Close()
	ctx := t.Context()
	var procs []sandbox.Process
	defer func() {
		for _, p := range procs {
			p.Stop(context.Background())
		}
	}()
	launch := func() {
		p, err := l.Launch(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	launch() // the first also starts the spare supervisor
	before := fdsOpen(t)
	const n = 8
	for range n {
		launch()
	}
	per := float64(fdsOpen(t)-before) / n
	t.Logf("a supervised local session holds %.2f descriptors in the bridge; fdPerSession is %d", per, fdPerSession)
	if per > fdPerSession {
		t.Fatalf("a supervised local session holds %.2f descriptors in the bridge, more than the %d fdPerSession keeps for it", per, fdPerSession)
	}
}

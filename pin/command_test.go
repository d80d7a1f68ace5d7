package pin_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// Command writes the lock of a real server started by a local launcher,
// finds no drift against it, and reports the drift against an edited one,
// in-process (cmd/bridge's TestPinCommand runs the same through the
// binary).
func TestCommandWriteAndCheck(t *testing.T) {
	server := childtest.EverythingServer(t)
	var stdout, stderr bytes.Buffer
	cmd := &pin.Command{
		NewLauncher: func(context.Context) (sandbox.Launcher, func(), error) {
			l := sandbox.NewLocal(&sandbox.LocalOptions{Command: server, StopGrace: time.Second, Logger: slog.New(slog.DiscardHandler)})
			return l, l.Close, nil
		},
		StopGrace: time.Second,
		Stdout:    &stdout,
		Stderr:    &stderr,
	}
	lockFile := filepath.Join(t.TempDir(), "mcp-lock.json")
	if err := cmd.Write(t.Context(), lockFile); err != nil {
		t.Fatalf("Write: %v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "pinned ") || !strings.HasSuffix(stdout.String(), " in "+lockFile+"\n") {
		t.Errorf("Write printed %q", stdout.String())
	}
	lock, err := pin.ReadLock(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lock.Tools["test_simple_text"]; !ok || len(lock.Prompts) == 0 {
		t.Fatalf("the lock misses items: %+v", lock)
	}

	stdout.Reset()
	if err := cmd.Check(t.Context(), lock, lockFile, ""); err != nil || !strings.HasPrefix(stdout.String(), "no drift: ") {
		t.Fatalf("Check of an unchanged server: %v, printed %q", err, stdout.String())
	}

	delete(lock.Tools, "test_simple_text")
	stdout.Reset()
	err = cmd.Check(t.Context(), lock, "edited.json", "")
	if err == nil || err.Error() != "the MCP server drifted from edited.json: 1 change, 0 refused items" {
		t.Errorf("Check of drift: %v", err)
	}
	if !strings.Contains(stdout.String(), `tool "test_simple_text" added`) {
		t.Errorf("Check printed %q", stdout.String())
	}
}

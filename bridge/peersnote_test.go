package bridge_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// peersSkipped is why the tests that drive the npm peers (the TypeScript
// SDK clients, server-everything) were skipped, if one was: TestMain says
// it once at the end. A skip's own message shows only under -v, and
// nothing tells a reader of `go test ./...` that these tests did not run.
var peersSkipped atomic.Value // string

// notingM runs the tests, then says whether the npm peers' tests were
// skipped and why.
type notingM struct{ m *testing.M }

func (n notingM) Run() int {
	code := n.m.Run()
	if why, _ := peersSkipped.Load().(string); why != "" {
		peersNote("bridge tests: SKIPPED the TypeScript SDK and npm server interop tests: " + why +
			" (set MCP_PEERS_DIR to a directory holding node22 and node_modules with the npm peers)")
	}
	return code
}

// peersNote writes note where a reader sees it. `go test ./...` drops
// everything a passing package prints unless -v (cmd/go keeps a passing
// package's output only with -v), so without -v the note goes to the
// terminal when there is one; else, or with -v, to stderr.
func peersNote(note string) {
	if !testing.Verbose() && os.Getenv(peersNoteTTYEnv) == "" {
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			fmt.Fprintln(tty, note)
			tty.Close()
			return
		}
	}
	fmt.Fprintln(os.Stderr, note)
}

// peersNoteTTYEnv, set, keeps the note off the terminal (for the test
// below, which reads it from stderr).
const peersNoteTTYEnv = "MCP_BRIDGE_TEST_NO_TTY"

// The test binary, run without the npm peers, says once at its end that
// their tests were skipped and why.
func TestPeersSkipSaid(t *testing.T) {
	if os.Getenv("MCP_PEERS_DIR") == "" && os.Getenv(peersNoteTTYEnv) != "" {
		t.Skip("inside the run below")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^(TestLegacySSEWithTSClient|TestPeersSkipSaid)$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCP_PEERS_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, peersNoteTTYEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if n := strings.Count(string(out), "SKIPPED the TypeScript SDK"); n != 1 || !strings.Contains(string(out), "MCP_PEERS_DIR is not set") {
		t.Fatalf("the test binary without MCP_PEERS_DIR said %d times that the peers' tests were skipped:\n%s", n, out)
	}
}

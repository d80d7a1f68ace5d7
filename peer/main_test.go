package peer_test

// The test binary plays a real stdio MCP server, the way the Go SDK's
// cmd_test.go does: internal/testserver's server, or when childEnv is
// "linger" one that outlives its stdin; scripted children
// (internal/memchild) play the cases a real server cannot be made to
// produce on cue.

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
)

const childEnv = "PEER_TEST_CHILD"

func TestMain(m *testing.M) {
	testserver.Main()
	if os.Getenv(childEnv) == "linger" {
		runLingeringChild()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// runLingeringChild is a server that outlives its stdin, as one does during
// Stop's grace: when stdin ends it says so on stdout, then runs until the
// FIFO named by lingerFIFOEnv is opened and closed by the test.
func runLingeringChild() {
	server := mcp.NewServer(&mcp.Implementation{Name: "peer-test-lingering", Version: "1.0.0"}, nil)
	_ = server.Run(context.Background(), &mcp.StdioTransport{})
	fmt.Println(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"stdin closed"}}`)
	if f, err := os.Open(os.Getenv(lingerFIFOEnv)); err == nil {
		_, _ = io.Copy(io.Discard, f)
	}
}

const lingerFIFOEnv = "PEER_TEST_LINGER_FIFO"

package peer_test

// The test binary plays a real stdio MCP server when childEnv is set, the
// way the Go SDK's cmd_test.go does; scripted children (internal/memchild) play
// the cases a real server cannot be made to produce on cue.

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

const childEnv = "PEER_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "linger":
		runLingeringChild()
		os.Exit(0)
	default:
		runChild()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type echoArgs struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

// runChild serves MCP over stdio with an echo tool that reports progress n
// times before it answers.
func runChild() {
	server := mcp.NewServer(&mcp.Implementation{Name: "peer-test-child", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		for i := range a.N {
			if tok := req.Params.GetProgressToken(); tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1)}); err != nil {
					return nil, nil, err
				}
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
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

package peer_test

// The test binary plays a real stdio MCP server when childEnv is set, the
// way the Go SDK's cmd_test.go does; scripted children (memProcess) play
// the cases a real server cannot be made to produce on cue.

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

const childEnv = "PEER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
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

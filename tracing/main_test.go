package tracing_test

// The test binary plays the stdio MCP server behind the bridge: TestMain
// re-runs it as a Go SDK server when TRACING_TEST_CHILD is set. Its tool
// "trace" answers with the traceparent it found in the request's _meta.

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

const childEnv = "TRACING_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func runChild() {
	server := mcp.NewServer(&mcp.Implementation{Name: "tracing-test-child", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "trace"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		tp, _ := req.Params.GetMeta()["traceparent"].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tp}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "crash"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
}

// Package testserver is the stdio MCP server that the tests of several
// packages run as a real child: their test binary, re-executed with Env
// set, as the Go SDK's cmd_test.go does. It is a Go SDK server with a few
// tools that tests of what sits between a client and a server need:
//
//   - echo {text, n}: reports progress n times (when the request has a
//     progressToken), then answers text;
//   - block: answers only when cancelled;
//   - crash: exits with status 3 in the middle of the call;
//   - elicit {text}: asks the client (elicitation/create) and answers with
//     the client's action;
//   - trace: answers with the traceparent of the request's _meta.
//
// Packages whose tests need a server that behaves otherwise (one that
// lingers after its stdin ends, handles one request at a time, or offers
// resources) keep a child of their own.
package testserver

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Env, set to any value in a test binary's environment, makes Main run
// the server instead of the tests.
const Env = "MCP_BRIDGE_TEST_SERVER"

// Name is the server's name in its initialize answer (serverInfo).
const Name = "mcp-bridge-test-server"

// Main runs the server on stdin and stdout and exits, if Env is set;
// otherwise it returns at once. Call it first in TestMain.
func Main() {
	if os.Getenv(Env) == "" {
		return
	}
	if err := server().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type echoArgs struct {
	Text string `json:"text"`
	N    int    `json:"n,omitempty"`
}

type textArgs struct {
	Text string `json:"text"`
}

func server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		for i := range a.N {
			if tok := req.Params.GetProgressToken(); tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1)}); err != nil {
					return nil, nil, err
				}
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "test server: crashing on purpose")
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "elicit"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: a.Text,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "trace"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		tp, _ := req.Params.GetMeta()["traceparent"].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tp}}}, nil, nil
	})
	return s
}

// Command hello is a small stdio MCP server, the example the README runs
// behind the bridge. Each bridge session gets its own process, so the
// counter of one session is invisible to every other.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoArgs struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

type countArgs struct{}

type countResult struct {
	Count int `json:"count"`
}

type countdownArgs struct {
	From int `json:"from" jsonschema:"where to count down from (at most 20)"`
}

func main() {
	server := mcp.NewServer(&mcp.Implementation{Name: "hello", Version: "1.0.0"}, nil)

	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Send the text back"},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})

	count := 0 // one process per session: this is per-session state
	mcp.AddTool(server, &mcp.Tool{Name: "count", Description: "Count the calls made in this session"},
		func(context.Context, *mcp.CallToolRequest, countArgs) (*mcp.CallToolResult, countResult, error) {
			count++
			return nil, countResult{Count: count}, nil
		})

	mcp.AddTool(server, &mcp.Tool{Name: "countdown", Description: "Count down, reporting progress each tenth of a second"},
		func(ctx context.Context, req *mcp.CallToolRequest, a countdownArgs) (*mcp.CallToolResult, any, error) {
			from := min(max(a.From, 0), 20)
			for i := from; i > 0; i-- {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: tok, Progress: float64(from - i), Total: float64(from),
						Message: fmt.Sprintf("%d…", i),
					})
				}
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "liftoff"}}}, nil, nil
		})

	log.SetOutput(os.Stderr) // stdout carries the protocol
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatalf("hello: %v", err)
	}
}

// Command fetchserver is a stdio MCP server for the egress tests of the
// bridge binary (FROM scratch, so static: CGO_ENABLED=0). Its tool "fetch"
// GETs a URL through the proxy the environment names and answers the
// status and body, or the error.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type args struct {
	URL string `json:"url"`
}

func main() {
	server := mcp.NewServer(&mcp.Implementation{Name: "fetchserver", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "fetch", Description: "GET a URL"}, func(ctx context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}, Timeout: 30 * time.Second}
		text := ""
		resp, err := c.Get(a.URL)
		if err != nil {
			text = "error: " + err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			text = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

package bridge_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	everythingOnce sync.Once
	everythingBin  string
	everythingErr  error
)

// everythingServer builds the Go SDK's conformance everything-server, a
// real stdio MCP server with every feature, once per test binary.
func everythingServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the SDK's everything-server")
	}
	everythingOnce.Do(func() {
		dir, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			everythingErr = err
			return
		}
		everythingBin = filepath.Join(strings.TrimSpace(string(dir)), "mcp-bridge-test-everything-server")
		out, err := exec.Command("go", "build", "-o", everythingBin,
			"github.com/modelcontextprotocol/go-sdk/conformance/everything-server").CombinedOutput()
		if err != nil {
			everythingErr = &buildError{err, string(out)}
		}
	})
	if everythingErr != nil {
		t.Fatalf("building the everything-server: %v", everythingErr)
	}
	return everythingBin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// The SDK's everything-server behind the bridge, driven by the SDK client:
// tools with every content type, sampling and elicitation mid-call,
// progress, logging, resources and prompts.
func TestEverythingServer(t *testing.T) {
	b := startBridge(t, bridgeConfig{command: []string{everythingServer(t)}})
	progress := make(chan float64, 100)
	cs := connect(t, b.URL, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled-reply"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "ada", "email": "ada@example.com"}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Progress
		},
	})
	ctx := ctxT(t)
	call := func(name string, args map[string]any) string {
		t.Helper()
		params := &mcp.CallToolParams{Name: name, Arguments: args}
		params.SetProgressToken(name)
		res, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		return strings.Join(texts, " ")
	}
	if got := call("test_simple_text", nil); !strings.Contains(got, "simple text") {
		t.Errorf("test_simple_text: %q", got)
	}
	if got := call("test_sampling", map[string]any{"prompt": "hi"}); !strings.Contains(got, "sampled-reply") {
		t.Errorf("test_sampling: %q", got)
	}
	if got := call("test_elicitation", map[string]any{"message": "who?"}); !strings.Contains(got, "ada") {
		t.Errorf("test_elicitation: %q", got)
	}
	call("test_tool_with_progress", nil)
	if len(progress) == 0 {
		// The client handles notifications asynchronously; wait for one.
		select {
		case <-progress:
		case <-ctx.Done():
			t.Error("no progress from test_tool_with_progress")
		}
	}
	if res, err := cs.ListResources(ctx, nil); err != nil || len(res.Resources) == 0 {
		t.Errorf("resources/list: %v %v", res, err)
	}
	if res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_simple_prompt"}); err != nil || len(res.Messages) == 0 {
		t.Errorf("prompts/get: %v %v", res, err)
	}
}

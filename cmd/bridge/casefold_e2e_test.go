package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
)

// A server that decodes member names case-insensitively
// (Go's encoding/json, last key wins; mark3labs/mcp-go) reads "Name" as
// "name". A request {"name":"echo","Name":"admin_delete"} was checked by the
// policy, pinned and audited as echo, and ran admin_delete. The bridge must
// refuse such params with -32600 in every era: a 2025 session, a
// 2025-03-26 batch and a 2026-07-28 stateless call.
func TestCaseVariantParamsRefused(t *testing.T) {
	bin, _ := buildBinaries(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  deny: [admin_delete]\nresources:\n  allow: [\"file:///public/*\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"mcp-go", "encoding-json"} {
		t.Run(mode, func(t *testing.T) {
			p := startBridgeBinary(t, bin, "--policy", policyFile, "--env", e2eChildEnv+"="+mode, "--", exe)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()

			// The policy holds for a plain call.
			sid := initSession(t, ctx, p.url, "2025-11-25")
			if out := sessionPost(t, ctx, p.url, sid, "2025-11-25", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"admin_delete","arguments":{}}}`); !strings.Contains(out, "policy denies it") {
				t.Fatalf("a plain call of the denied tool: %s", out)
			}
			if out := sessionPost(t, ctx, p.url, sid, "2025-11-25", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}`); !strings.Contains(out, "ran echo") {
				t.Fatalf("a plain call of echo: %s", out)
			}

			ambiguous := []string{
				`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","Name":"admin_delete","arguments":{}}}`,
				`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{},"name":"admin_delete"}}`,
				`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"NAME":"admin_delete","arguments":{}}}`,
				`{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///public/a","URI":"file:///etc/shadow"}}`,
			}
			// A 2025 session.
			for _, body := range ambiguous {
				checkRefused(t, "2025-11-25 session", body, sessionPost(t, ctx, p.url, sid, "2025-11-25", body))
			}
			// A 2025-03-26 batch.
			sid0326 := initSession(t, ctx, p.url, "2025-03-26")
			for _, body := range ambiguous {
				checkRefused(t, "2025-03-26 batch", body, sessionPost(t, ctx, p.url, sid0326, "2025-03-26", "["+body+"]"))
			}
			// A 2026-07-28 stateless call, its Mcp-Name header matching
			// what the bridge reads.
			for _, c := range []struct{ method, name, params string }{
				{"tools/call", "echo", `"name":"echo","Name":"admin_delete","arguments":{},`},
				{"resources/read", "file:///public/a", `"uri":"file:///public/a","URI":"file:///etc/shadow",`},
			} {
				checkRefused(t, "2026-07-28", c.params, statelessCall(t, ctx, p.url, c.method, c.name, c.params))
			}
		})
	}
}

// checkRefused fails unless out, the answer to body, is a -32600 error and
// the server ran nothing but echo.
func checkRefused(t *testing.T, era, body, out string) {
	t.Helper()
	if strings.Contains(out, "ran admin_delete") || strings.Contains(out, "read file:///etc/shadow") {
		t.Errorf("%s: %s ran past the policy: %s", era, body, out)
		return
	}
	if !strings.Contains(out, `"code":-32600`) {
		t.Errorf("%s: %s was not refused with -32600: %s", era, body, out)
	}
}

// initSession initializes a 2025 session of protocol version v and
// returns its ID.
func initSession(t *testing.T, ctx context.Context, url, v string) string {
	t.Helper()
	resp := mcpPost(t, ctx, url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+v+`","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	resp = mcpPost(t, ctx, url, sid, v, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	return sid
}

// sessionPost posts body in session sid and returns the answer's body.
func sessionPost(t *testing.T, ctx context.Context, url, sid, v, body string) string {
	t.Helper()
	resp := mcpPost(t, ctx, url, sid, v, body)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(out)
}

func mcpPost(t *testing.T, ctx context.Context, url, sid, v, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// statelessCall sends a 2026-07-28 request with its Mcp-Name header.
func statelessCall(t *testing.T, ctx context.Context, url, method, name, params string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":9,"method":"`+method+`","params":{`+params+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(out)
}

// runCaseFoldChild serves echo, admin_delete and file:// resources over
// stdio, decoding requests case-insensitively: with mark3labs/mcp-go
// ("mcp-go"), or with a few lines of encoding/json ("encoding-json").
func runCaseFoldChild(mode string) {
	if mode == "mcp-go" {
		s := mcpgoserver.NewMCPServer("casefold", "1.0.0", mcpgoserver.WithResourceCapabilities(false, false))
		for _, name := range []string{"echo", "admin_delete"} {
			s.AddTool(mcpgo.NewTool(name), func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
				return mcpgo.NewToolResultText("ran " + req.Params.Name), nil
			})
		}
		s.AddResourceTemplate(mcpgo.NewResourceTemplate("file:///{path}", "file"), func(_ context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: req.Params.URI, Text: "read " + req.Params.URI}}, nil
		})
		if err := mcpgoserver.ServeStdio(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return
	}
	out := json.NewEncoder(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var req struct {
			ID     json.RawMessage
			Method string
			Params struct {
				ProtocolVersion string
				Name, URI       string
			}
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		var result any
		switch req.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}, "resources": map[string]any{}}, "serverInfo": map[string]any{"name": "casefold", "version": "1"}}
		case "tools/list":
			result = map[string]any{"tools": []any{map[string]any{"name": "echo", "inputSchema": map[string]any{"type": "object"}}, map[string]any{"name": "admin_delete", "inputSchema": map[string]any{"type": "object"}}}}
		case "tools/call":
			result = map[string]any{"content": []any{map[string]any{"type": "text", "text": "ran " + req.Params.Name}}}
		case "resources/read":
			result = map[string]any{"contents": []any{map[string]any{"uri": req.Params.URI, "text": "read " + req.Params.URI}}}
		default:
			result = map[string]any{}
		}
		out.Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	}
}

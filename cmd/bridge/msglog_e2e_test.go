package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestLogMessages: with --log-messages (here BRIDGE_LOG_MESSAGES) the
// bridge logs each JSON-RPC message both ways with its session or pool
// child, method, id, size and body, for a 2025 session and a 2026-07-28
// client alike, at the default log level; never the client's token
// (--log-level debug, which README said logged each message, did not,
// and nothing did).
func TestLogMessages(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	const token = "e2e-log-messages-token-0123456789"
	t.Setenv("BRIDGE_AUTH_TOKENS", token)
	t.Setenv("BRIDGE_LOG_MESSAGES", "true")
	p := startBridgeBinary(t, bridgeBin, "--", helloBin)
	for _, version := range []string{"2025-11-25", ""} { // "": the SDK's default, 2026-07-28
		client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		var opts *mcp.ClientSessionOptions
		if version != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
		}
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: p.url, HTTPClient: &http.Client{Transport: bearerTransport{token}},
		}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "logged-" + version}}); err != nil {
			t.Fatal(err)
		}
		cs.Close()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	lines := <-p.done
	seen := map[string]bool{}
	for _, line := range lines {
		if strings.Contains(line, token) {
			t.Errorf("a log line holds the client's token: %s", line)
		}
		var rec struct {
			Msg, Dir, Method, ID, Body, Session, Child string
			Bytes                                      int
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "MCP message" {
			continue
		}
		if rec.Session == "" && rec.Child == "" {
			t.Errorf("a message logged without its session or child: %s", line)
		}
		if rec.Method == "tools/call" && rec.Bytes > 0 && rec.ID != "" {
			where := "session"
			if rec.Child != "" {
				where = "child"
			}
			if strings.Contains(rec.Body, "logged-") {
				seen[where+" "+rec.Dir] = true
			}
		}
	}
	for _, want := range []string{"session to_server", "session from_server", "child to_server", "child from_server"} {
		if !seen[want] {
			t.Errorf("no tools/call line for %s with method, id, size and body; the log:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

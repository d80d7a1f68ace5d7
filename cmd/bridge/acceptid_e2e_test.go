package main

import (
	"net/http"
	"strings"
	"testing"
)

// The real binary with --accept-session-id (as an AgentCore runtime's
// environment sets it, BRIDGE_ACCEPT_SESSION_ID) starts the session under
// the Mcp-Session-Id that initialize carries; without it, it refuses.
func TestAcceptSessionIDFlag(t *testing.T) {
	t.Parallel()
	bridgeBin, helloBin := buildBinaries(t)
	const id = "agentcore-0b9d4e1c-7f3a-4b2e-9c8d-1a2b3c4d5e6f"
	for _, c := range []struct {
		args   []string
		status int
	}{
		{[]string{"--accept-session-id", "--", helloBin}, http.StatusOK},
		{[]string{"--", helloBin}, http.StatusBadRequest},
	} {
		p := startBridgeBinary(t, bridgeBin, c.args...)
		req, _ := http.NewRequest("POST", p.url, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%q: initialize with Mcp-Session-Id: %d; want %d", c.args, resp.StatusCode, c.status)
		}
		if c.status == http.StatusOK && resp.Header.Get("Mcp-Session-Id") != id {
			t.Errorf("%q: the session is %q; want the platform's %q", c.args, resp.Header.Get("Mcp-Session-Id"), id)
		}
	}
}

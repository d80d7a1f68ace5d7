package bridge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// TestLaunchFailureIs502: a server that cannot start answers initialize
// with 502 and the launcher's reason (session.ErrLaunch, which the bridge
// maps without knowing package sandbox).
func TestLaunchFailureIs502(t *testing.T) {
	b := startBridge(t, bridgeConfig{command: []string{"/nonexistent/mcp-server"}})
	resp := rawPost(t, b.URL, initBody("2025-11-25"), nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("initialize with a server that cannot start: %d, want 502", resp.StatusCode)
	}
	e := decodeError(t, readAll(t, resp.Body))
	if string(e.ID) != "1" || e.Error.Code != jsonrpc.CodeServerError || !strings.Contains(e.Error.Message, "/nonexistent/mcp-server") {
		t.Fatalf("error %s %d %q; want the request's id and the launcher's reason", e.ID, e.Error.Code, e.Error.Message)
	}
	if n := b.Reg.Len(); n != 0 {
		t.Fatalf("%d sessions after a failed launch", n)
	}
}

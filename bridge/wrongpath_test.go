package bridge_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// A client configured with a wrong path (the bridge's root, a trailing
// slash) gets a JSON-RPC error naming the endpoint, not Go's bare "404
// page not found", in the one-command form as in a
// Servers; other methods on the endpoint still get 405, and an unknown
// path is answered only after the checks of every request (a client
// without a token learns nothing).
func TestWrongPathNamesTheEndpoint(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	base := strings.TrimSuffix(b.URL, b.Handler.Path())
	servers := bridge.NewServers(&bridge.Options{})
	multi := httptest.NewServer(servers)
	t.Cleanup(multi.Close)
	guarded := httptest.NewServer(bridge.NewHandler(nil, &bridge.Options{AuthTokens: []string{"secret-token"}}))
	t.Cleanup(guarded.Close)
	for _, c := range []struct {
		url, method string
		status      int
		want        string // in the JSON-RPC error's message
	}{
		{base + "/", http.MethodPost, http.StatusNotFound, `serves MCP at "/mcp"`},
		{base + "/mcp/", http.MethodPost, http.StatusNotFound, `serves MCP at "/mcp"`},
		{base + "/v1/mcp", http.MethodGet, http.StatusNotFound, `serves MCP at "/mcp"`},
		{base + "/mcp", http.MethodPut, http.StatusMethodNotAllowed, ""},
		{base + "/healthz", http.MethodGet, http.StatusOK, ""},
		{multi.URL + "/", http.MethodPost, http.StatusNotFound, "/servers/NAME/mcp"},
		{multi.URL + "/mcp/", http.MethodPost, http.StatusNotFound, "/servers/NAME/mcp"},
		{guarded.URL + "/", http.MethodPost, http.StatusUnauthorized, ""},
	} {
		req, _ := http.NewRequest(c.method, c.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.url, resp.StatusCode, body, c.status)
			continue
		}
		if c.want == "" {
			continue
		}
		var e struct {
			JSONRPC string
			Error   struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal(body, &e); err != nil || e.JSONRPC != "2.0" || e.Error.Code != -32600 || !strings.Contains(e.Error.Message, c.want) ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %s (%s), want a JSON-RPC error -32600 saying %q", c.method, c.url, body, resp.Header.Get("Content-Type"), c.want)
		}
	}
}

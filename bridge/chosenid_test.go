package bridge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// platformTransport plays a hosting platform in front of the bridge, as
// Bedrock AgentCore Runtime does: it adds its own Mcp-Session-Id to every
// request that has none, initialize included.
type platformTransport struct{ id string }

func (p platformTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Header.Get("Mcp-Session-Id") == "" {
		r.Header.Set("Mcp-Session-Id", p.id)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connectVia connects the SDK client through the platform.
func connectVia(ctx context.Context, url, id string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "behind-a-platform", Version: "1.0.0"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: platformTransport{id}}}, nil)
}

func TestAcceptSessionID(t *testing.T) {
	const id = "0b9d4e1c-7f3a-4b2e-9c8d-1a2b3c4d5e6f"

	// By default an initialize that carries Mcp-Session-Id is refused.
	off := startBridge(t, bridgeConfig{})
	if cs, err := connectVia(ctxT(t), off.URL, id); err == nil {
		cs.Close()
		t.Fatal("without AcceptSessionID the client connected with a platform's session ID")
	}
	resp := rawPost(t, off.URL, initBody("2025-11-25"), map[string]string{"Mcp-Session-Id": id})
	if resp.StatusCode != http.StatusBadRequest || off.Reg.Len() != 0 {
		t.Fatalf("without AcceptSessionID: %d, %d sessions", resp.StatusCode, off.Reg.Len())
	}

	// With it, the session takes the platform's ID, and the real client
	// works through the platform.
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{AcceptSessionID: true}})
	cs, err := connectVia(ctxT(t), b.URL, id)
	if err != nil {
		t.Fatalf("connecting through the platform: %v", err)
	}
	defer cs.Close()
	if cs.ID() != id {
		t.Errorf("the client's session ID is %q; want the platform's %q", cs.ID(), id)
	}
	if _, err := b.Reg.Get(id); err != nil {
		t.Fatalf("no session under the platform's ID: %v", err)
	}
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "through the platform"}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "through the platform" {
		t.Fatalf("tools/call: %v %+v", err, res)
	}

	// The ID of a live session is never taken over.
	resp = rawPost(t, b.URL, initBody("2025-11-25"), map[string]string{"Mcp-Session-Id": id})
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("initialize under a live session's ID: %d", resp.StatusCode)
	}
	if e := decodeError(t, readAll(t, resp.Body)); string(e.ID) != "1" || !strings.Contains(e.Error.Message, "names a live session") {
		t.Fatalf("error %s %q", e.ID, e.Error.Message)
	}
	// Nor may an ID be other than 1 to 128 visible ASCII characters.
	for _, bad := range []string{"with space", strings.Repeat("a", 129)} {
		resp = rawPost(t, b.URL, initBody("2025-11-25"), map[string]string{"Mcp-Session-Id": bad})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("initialize under %q: %d", bad, resp.StatusCode)
		}
		if e := decodeError(t, readAll(t, resp.Body)); !strings.Contains(e.Error.Message, "visible ASCII") {
			t.Errorf("initialize under %q: %q", bad, e.Error.Message)
		}
	}
	if b.Reg.Len() != 1 {
		t.Fatalf("%d sessions; want the one", b.Reg.Len())
	}
	// Without the header the bridge still mints an ID.
	if sid := rawSession(t, b.URL, "2025-11-25"); sid == "" || sid == id {
		t.Fatalf("minted ID %q", sid)
	}
}

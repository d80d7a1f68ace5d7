package bridge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// stampSessionID adds an Mcp-Session-Id to every request, as platforms
// that route by it do (Bedrock AgentCore).
type stampSessionID struct{ next http.RoundTripper }

func (s stampSessionID) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Mcp-Session-Id", "agentcore-0123456789abcdef0123456789abcdef")
	return s.next.RoundTrip(r)
}

// A 2026-07-28 request never belongs to a 2025 session: its
// Mcp-Session-Id is ignored, with or without --accept-session-id.
func TestStatelessIgnoresSessionID(t *testing.T) {
	for _, accept := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "accept-session-id"}[accept], func(t *testing.T) {
			b, _ := startStateless(t, pool.Options{}, bridge.Options{AcceptSessionID: accept})
			c := mcp.NewClient(&mcp.Implementation{Name: "stamped", Version: "1"}, nil)
			cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL,
				HTTPClient: &http.Client{Transport: stampSessionID{http.DefaultTransport}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
				t.Fatalf("negotiated %q, want 2026-07-28", v)
			}
			if got := callText(t, cs, "echo", map[string]any{"text": "stamped"}); !strings.Contains(got, "stamped") {
				t.Fatalf("echo: %q", got)
			}
		})
	}
}

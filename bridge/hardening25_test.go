package bridge_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// HEAD on the legacy SSE endpoint gets 405, as on the Streamable HTTP
// endpoint; the mux served it with the GET handler, which started a
// session and its server and never ended.
func TestHeadLegacySSE(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	sse := strings.TrimSuffix(b.URL, "/mcp") + "/sse"
	// A bound on a failing test: before, the answer never came.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, sse, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("HEAD %s: %v (sessions: %d)", sse, err, b.Reg.Len())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Fatalf("HEAD %s: %s, Allow %q; want 405 with Allow", sse, resp.Status, resp.Header.Get("Allow"))
	}
	if n := b.Reg.Len(); n != 0 {
		t.Fatalf("HEAD %s started %d sessions", sse, n)
	}
}

// Refused tokens are logged at a bounded rate, with a count of the lines
// left out: every one wrote an INFO line, 730 KiB/s from one client.
func TestBadTokenLogRateLimited(t *testing.T) {
	var logs testlog.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	reg := session.NewRegistry(&session.Options{
		Launcher: session.LauncherOf(sandbox.NewLocal(&sandbox.LocalOptions{Command: "true", Logger: logger})),
		Logger:   logger,
	})
	defer reg.Shutdown(context.Background())
	h := bridge.NewHandler(reg, &bridge.Options{AuthTokens: []string{"good"}, Logger: logger})
	const n = 500
	for range n {
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{}`))
		r.Header.Set("Authorization", "Bearer bad")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("a bad token: %d", w.Code)
		}
	}
	lines := strings.Count(logs.String(), "refused a bearer token")
	t.Logf("%d refusals logged %d lines", n, lines)
	// The bound: a burst, then one line a second; 500 requests take far
	// less than 40 s.
	if lines > 50 {
		t.Fatalf("%d bad tokens logged %d lines", n, lines)
	}
}

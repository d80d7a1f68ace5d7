package bridge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/session"
)

// TestLogBudgetAcrossSessions: the registry's sessions share one budget of
// event data. Over it, the largest session's oldest delivered
// answers are evicted and a resume from one gets 410 Gone; a smaller
// session keeps its events, and the newest answers stay resumable.
func TestLogBudgetAcrossSessions(t *testing.T) {
	const budget = 4096
	b := startBridge(t, bridgeConfig{session: session.Options{LogMaxTotalBytes: budget}})
	big, small := rsOpen(t, b.URL, "2025-11-25"), rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	smallFirst := small.drain(small.call(ctx, 1, "echo", map[string]any{"text": "small"}, ""))
	var answers []string // the big session's answer event IDs, oldest first
	var lastPrime string // the priming event ID of its last answer's stream
	for i := range 60 {
		evs := big.drain(big.call(ctx, 10+i, "echo", map[string]any{"text": strings.Repeat("x", 100)}, ""))
		if len(evs) != 2 {
			t.Fatalf("echo %d: %v", i, evs)
		}
		answers = append(answers, evs[1].ID)
		lastPrime = evs[0].ID
	}
	resume := func(c *rsClient, lastID string) (int, string) {
		t.Helper()
		resp, err := c.get(ctx, lastID)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, readAll(t, resp.Body)
	}
	if status, body := resume(big, answers[0]); status != http.StatusGone || !strings.Contains(body, "evicted") {
		t.Errorf("resuming the big session's first answer: %d %s; want 410 Gone, evicted", status, body)
	}
	// Its last answer is still held: a resume before it replays it (one
	// after it gets 204, nothing to replay).
	if status, body := resume(big, lastPrime); status != http.StatusOK || !strings.Contains(body, "xxx") {
		t.Errorf("resuming the big session's last answer: %d %s; want 200 and the answer", status, body)
	}
	if status, _ := resume(big, answers[len(answers)-1]); status != http.StatusNoContent {
		t.Errorf("resuming after the big session's last answer: %d; want 204", status)
	}
	// The small session's answer stream: its priming event's ID replays the answer.
	if status, body := resume(small, smallFirst[0].ID); status != http.StatusOK || !strings.Contains(body, "small") {
		t.Errorf("resuming the small session's answer: %d %s; want 200 and the answer", status, body)
	}
}

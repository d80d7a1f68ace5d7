package bridge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// A principal's share of the pool, at the HTTP edge: a principal that parked its share of
// the pool's children gets 429 with a JSON-RPC error saying why for one
// more, and another principal still parks its own call.
func TestStatelessPrincipalShare(t *testing.T) {
	b, p := startStateless(t, pool.Options{Era: pool.EraLegacy, Max: 2, PrivateCache: true}, bridge.Options{AuthTokens: []string{"tok-a", "tok-b"}})
	as := func(tok string) map[string]string {
		h := statelessHeaders("tools/call", "elicit")
		h["Authorization"] = "Bearer " + tok
		return h
	}
	firstRound(t, b.URL, as("tok-a")) // a's share of Max 2: one parked call
	status, ans := postAnswer(t, b.URL, elicitCall(2, "again?", "", ""), as("tok-a"))
	if status != http.StatusTooManyRequests || ans.Error == nil || !strings.Contains(ans.Error.Message, "--pool-max-per-principal") {
		t.Fatalf("a call beyond the principal's share: %d %+v, want 429 naming --pool-max-per-principal", status, ans.Error)
	}
	firstRound(t, b.URL, as("tok-b"))
	if s := p.Stats(); s.Parked != 2 || s.Children != 2 {
		t.Fatalf("%+v, want each principal's call parked on a child", s)
	}
}

package bridge_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// --sse-keepalive (bridge.Options.SSEKeepAlive) reaches the streams of
// revision 2026-07-28: a quiet subscriptions/listen stream, and a call
// that says nothing for longer than it, whose answer would otherwise come
// as one JSON body after a silence a proxy's idle timeout cuts. The pool's own keep-alive stays at its default (25 s): what
// arrives within the test's 10 s is the front end's.
func TestStatelessSSEKeepAlive(t *testing.T) {
	for _, tc := range []struct{ name, method, tool, body string }{
		{"listen", "subscriptions/listen", "", `{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + modernMeta + `}}`},
		{"quiet call", "tools/call", "wait", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait","arguments":{},` + modernMeta + `}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, p := startStateless(t, pool.Options{Era: pool.EraModern}, bridge.Options{SSEKeepAlive: 20 * time.Millisecond})
			ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, strings.NewReader(tc.body))
			for k, v := range statelessHeaders(tc.method, tc.tool) {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("Content-Type %q", ct)
			}
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("no keep-alive comment: %v", err)
				}
				if line == ":\n" {
					break
				}
			}
			cancel()
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

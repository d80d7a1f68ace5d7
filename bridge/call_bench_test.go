package bridge_test

// End-to-end benchmark of one tools/call through the bridge over a real TCP
// connection, to the Go SDK server behind it. allocs/op and B/op
// count the whole test process, the HTTP client included (the server is a
// separate process), so they compare two builds of the bridge rather than
// give its own cost; ns/op is mostly the SDK server's.
//
//	go test -run '^$' -bench 'Call$' -benchmem ./bridge/

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

func BenchmarkCall(b *testing.B) {
	for _, tc := range []struct {
		name  string
		json  bool
		ctype string
	}{
		{"SSE", false, "text/event-stream"},
		{"JSON", true, "application/json"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			br := startBridge(b, bridgeConfig{bridge: bridge.Options{JSONResponse: tc.json}})
			c := rsOpen(b, br.URL, "2025-11-25")
			ctx := ctxT(b)
			id := 0
			b.ReportAllocs()
			for b.Loop() {
				id++
				resp, err := c.postE(ctx, `{"jsonrpc":"2.0","id":`+strconv.Itoa(id)+
					`,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tc.ctype ||
					!strings.Contains(string(body), `"text":"hello"`) {
					b.Fatalf("tools/call: %s %s %v: %s", resp.Status, resp.Header.Get("Content-Type"), err, body)
				}
			}
		})
	}
}

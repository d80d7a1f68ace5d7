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
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// answerForms are the two forms of a 2025 session's answers: an SSE
// stream, or one JSON body (--json-response).
var answerForms = []struct {
	name  string
	json  bool
	ctype string
}{
	{"SSE", false, "text/event-stream"},
	{"JSON", true, "application/json"},
}

func BenchmarkCall(b *testing.B) {
	for _, tc := range answerForms {
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

// BenchmarkStatelessCall is BenchmarkCall for revision 2026-07-28 clients:
// one tools/call per POST, no session, on a pool of each era.
//
//	go test -run '^$' -bench 'StatelessCall' -benchmem ./bridge/
func BenchmarkStatelessCall(b *testing.B) {
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		b.Run(era.String(), func(b *testing.B) {
			br, _ := startStateless(b, pool.Options{Era: era}, bridge.Options{})
			ctx := ctxT(b)
			hc := &http.Client{}
			id := 0
			b.ReportAllocs()
			for b.Loop() {
				id++
				body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) +
					`,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},` + modernMeta + `}}`
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, br.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				for k, v := range statelessHeaders("tools/call", "echo") {
					req.Header.Set(k, v)
				}
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				answer, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"text":"hello"`) {
					b.Fatalf("tools/call: %s %v: %s", resp.Status, err, answer)
				}
			}
		})
	}
}

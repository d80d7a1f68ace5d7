package bridge_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// listRecorder counts the bridge's own tools/list on the pool's children
// and reports the children's notifications/tools/list_changed once the
// pool got them.
type listRecorder struct {
	mu      sync.Mutex
	own     int
	changed chan struct{}
}

func (r *listRecorder) intercept(next peer.Handler) peer.Handler {
	return func(m *peer.Message) error {
		switch {
		case m.Dir == peer.ToChild && m.Method == "tools/list" && string(m.Env.IDAt.In(m.Data)) == `"mcp-bridge-tools"`:
			r.mu.Lock()
			r.own++
			r.mu.Unlock()
		case m.Dir == peer.FromChild && m.Method == "notifications/tools/list_changed":
			err := next(m) // the pool has it once this returns
			select {
			case r.changed <- struct{}{}:
			default:
			}
			return err
		}
		return next(m)
	}
}

func (r *listRecorder) listings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.own
}

// Mcp-Param-{Name} headers are validated against the body for the Go SDK
// everything-server's test_x_mcp_header tool (its region argument carries
// x-mcp-header "Region"), with children of both eras: the bridge lists the
// tools itself when a call comes first, learns them from the client's
// tools/list, and forgets them when the child says its list changed. The
// Go SDK client mirrors the header, Base64-encoded where it must be.
func TestStatelessParamHeaders(t *testing.T) {
	server := everythingServer(t)
	for _, era := range []pool.Era{pool.EraModern, pool.EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			rec := &listRecorder{changed: make(chan struct{}, 1)}
			b, _ := startStatelessCommand(t, []string{server}, pool.Options{Era: era, Max: 2, Peer: peer.Options{Intercept: rec.intercept}})
			call := func(args string, region ...string) (int, rpcAnswer) {
				t.Helper()
				h := statelessHeaders("tools/call", "test_x_mcp_header")
				body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_x_mcp_header","arguments":` + args + `,` + modernMeta + `}}`
				req, _ := http.NewRequest(http.MethodPost, b.URL, strings.NewReader(body))
				for k, v := range h {
					req.Header.Set(k, v)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				for _, v := range region {
					req.Header.Add("Mcp-Param-Region", v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				return resp.StatusCode, decodeAnswer(t, readAll(t, resp.Body))
			}
			refused := func(what string, status int, a rpcAnswer, want string) {
				t.Helper()
				if status != http.StatusBadRequest || a.Error == nil || a.Error.Code != pool.CodeHeaderMismatch || !strings.Contains(a.Error.Message, want) {
					t.Errorf("%s: %d %+v, want 400 and -32020 (%s)", what, status, a.Error, want)
				}
			}

			// Before any tools/list: the bridge lists the tools itself, once.
			status, a := call(`{"region":"us-west1"}`, "eu-west1")
			refused("a mismatched header", status, a, "does not match body value params.arguments.region")
			status, a = call(`{"region":"us-west1"}`)
			refused("a missing header", status, a, "Mcp-Param-Region")
			status, a = call(`{"level":3}`, "us-west1")
			refused("a header without its value", status, a, "absent or null")
			status, a = call(`{"region":"Grüße"}`, "=?base64?R3LDvMOfZQ==?=")
			if status != 200 || a.Error != nil || !strings.Contains(string(a.Result["content"]), "region=Grüße") {
				t.Errorf("a Base64 header that matches: %d %+v %s", status, a.Error, a.Result["content"])
			}
			if status, a = call(`{"level":3}`); status != 200 || a.Error != nil {
				t.Errorf("no value, no header: %d %+v", status, a.Error)
			}
			if n := rec.listings(); n != 1 {
				t.Errorf("the bridge listed the tools %d times, want once", n)
			}

			// The Go SDK client mirrors the header from its own tools/list.
			cs := sdkClient(t, b.URL)
			if _, err := cs.ListTools(ctxT(t), nil); err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "test_x_mcp_header", Arguments: map[string]any{"region": " Köln ", "level": 2}})
			if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "region= Köln " {
				t.Fatalf("the Go SDK client's call: %v %+v", err, res)
			}

			if era == pool.EraLegacy {
				// A legacy child announces its list changes to the bridge:
				// the tools are listed again for the next call.
				callText(t, cs, "test_trigger_tool_change", nil)
				select {
				case <-rec.changed:
				case <-ctxT(t).Done():
					t.Fatal("no notifications/tools/list_changed from the child")
				}
				before := rec.listings()
				status, a = call(`{"region":"us-west1"}`, "us-east1")
				refused("a mismatch after the list changed", status, a, "does not match")
				if n := rec.listings(); n != before+1 {
					t.Errorf("after list_changed the bridge listed %d times, want %d", n, before+1)
				}
			}
		})
	}
}

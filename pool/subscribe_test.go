package pool

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Options.Readable decides per subscription: a legacy child is not
// subscribed to a resource for a caller that may not read it (and the
// acknowledgment leaves it out), and an update of it reaches only the
// subscriptions whose callers may, from a child of either era (a modern
// child here gets the whole request: in the bridge the interception point
// takes the resource out of it, which this test leaves out, so that it sees
// the delivery checked on its own).
func TestListenReadable(t *testing.T) {
	for _, era := range []Era{EraModern, EraLegacy} {
		t.Run(era.String(), func(t *testing.T) {
			var mu sync.Mutex
			var subscribed []string // the legacy child's subscriptions
			p := testPool(t, Options{Era: era, Max: 1,
				Readable: func(caller *auth.Principal, uri string) bool {
					return uri != "test://secret" || caller != nil && caller.Subject == "with the scope"
				},
				Peer: peer.Options{Intercept: func(next peer.Handler) peer.Handler {
					return func(m *peer.Message) error {
						if m.Dir == peer.ToChild && m.Method == "resources/subscribe" {
							params, _ := jsonrpc.Lookup(m.Data, "params")
							uri, _ := jsonrpc.Lookup(params, "uri")
							mu.Lock()
							subscribed = append(subscribed, string(uri))
							mu.Unlock()
						}
						return next(m)
					}
				}},
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
			req := func(caller, data string) *Request {
				env, err := jsonrpc.Parse([]byte(data))
				if err != nil {
					t.Fatal(err)
				}
				return &Request{Principal: "alice", Caller: &auth.Principal{Subject: caller}, Msg: jsonrpc.Message{Data: []byte(data), Env: env}, Caps: json.RawMessage(`{}`)}
			}
			var wg sync.WaitGroup
			var stops []context.CancelFunc
			defer func() {
				for _, stop := range stops {
					stop() // the client closes its stream
				}
				wg.Wait()
			}()
			listen := func(caller, id, uris string) <-chan string {
				out := make(chan string, 16)
				lctx, stop := context.WithCancel(ctx)
				stops = append(stops, stop)
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := p.Serve(lctx, req(caller, `{"jsonrpc":"2.0","id":"`+id+`","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":`+uris+`},`+meta+`}}`),
						func(b []byte) error {
							if b != nil {
								out <- string(b)
							}
							return nil
						})
					if !errors.Is(err, context.Canceled) {
						t.Errorf("listen %s: %v", id, err)
					}
				}()
				return out
			}
			next := func(stream <-chan string, what string) string {
				t.Helper()
				select {
				case m := <-stream:
					return m
				case <-ctx.Done():
					t.Fatalf("no %s", what)
					return ""
				}
			}
			acked := func(ack string) []string {
				t.Helper()
				var a struct {
					Method string
					Params struct {
						Notifications filter
					}
				}
				if err := json.Unmarshal([]byte(ack), &a); err != nil || a.Method != "notifications/subscriptions/acknowledged" {
					t.Fatalf("not an acknowledgment: %s %v", ack, err)
				}
				return a.Params.Notifications.ResourceSubscriptions
			}
			touch := func(uri string) {
				t.Helper()
				ans, err := p.Serve(ctx, req("with the scope", `{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"touch","arguments":{"uri":"`+uri+`"},`+meta+`}}`), func([]byte) error { return nil })
				if err != nil || strings.Contains(string(ans), `"error"`) || strings.Contains(string(ans), `"isError":true`) {
					t.Fatalf("touch %s: %s %v", uri, ans, err)
				}
			}

			without := listen("without the scope", "L1", `["test://a","test://secret"]`)
			got := acked(next(without, "acknowledgment"))
			if era == EraLegacy && !slices.Equal(got, []string{"test://a"}) {
				t.Errorf("acknowledged %v to a caller that may not read test://secret", got)
			}
			// The update of test://secret would come first.
			touch("test://secret")
			touch("test://a")
			if m := next(without, "update of test://a"); !strings.Contains(m, `"uri":"test://a"`) || !strings.Contains(m, `"io.modelcontextprotocol/subscriptionId":"L1"`) {
				t.Errorf("the subscription of a caller without the scope got %s, want only the update of test://a", m)
			}

			with := listen("with the scope", "L2", `["test://secret"]`)
			if got := acked(next(with, "acknowledgment")); !slices.Equal(got, []string{"test://secret"}) {
				t.Errorf("acknowledged %v to a caller that may read test://secret", got)
			}
			touch("test://secret")
			if m := next(with, "update of test://secret"); !strings.Contains(m, `"uri":"test://secret"`) || !strings.Contains(m, `"L2"`) {
				t.Errorf("the subscription of a caller with the scope got %s", m)
			}
			if era == EraLegacy {
				mu.Lock()
				if want := []string{`"test://a"`, `"test://secret"`}; !slices.Equal(subscribed, want) {
					t.Errorf("the legacy child was subscribed to %v, want %v (test://secret for the caller with the scope only)", subscribed, want)
				}
				mu.Unlock()
			}
		})
	}
}

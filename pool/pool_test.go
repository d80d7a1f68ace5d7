package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// The test binary plays a legacy child (a Go SDK server, initialized by
// the pool) when childEnv is set.
const childEnv = "POOL_TEST_CHILD"

func runChild() {
	if os.Getenv(childEnv) == "sequential" {
		runSequentialChild()
		return
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "pool-test-child", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	for _, uri := range []string{"test://a", "test://secret"} {
		server.AddResource(&mcp.Resource{URI: uri, Name: uri}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "x"}}}, nil
		})
	}
	// touch says that a resource changed: its update is written before
	// the call's answer.
	mcp.AddTool(server, &mcp.Tool{Name: "touch"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
		URI string `json:"uri"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: a.URI})
	})
	type args struct {
		Text string `json:"text"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	type blockArgs struct {
		Addr string `json:"addr"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "block"}, func(ctx context.Context, req *mcp.CallToolRequest, a blockArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: block(a.Addr)}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "elicit"}, func(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: a.Text,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(res.Action)}}}, nil, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}

func testPool(t *testing.T, opts Options) *Pool {
	t.Helper()
	return testPoolOf(t, "1", opts)
}

// testPoolOf is testPool with children of the kind child names: "1" the Go
// SDK server, "sequential" a server that handles one request at a time.
func testPoolOf(t *testing.T, child string, opts Options) *Pool {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), childEnv+"="+child), StopGrace: 2 * time.Second})
	opts.Launch = func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) }
	p, err := New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return p
}

func request(t *testing.T, data string) *Request {
	t.Helper()
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return &Request{Principal: "alice", Msg: jsonrpc.Message{Data: []byte(data), Env: env}, Caps: json.RawMessage(`{"elicitation":{}}`)}
}

// A parked call whose client never retries expires: the child's question
// is answered "cancel", the call is cancelled, and its child, which may
// still be working on it, is stopped rather than reused.
func TestExpiry(t *testing.T) {
	declined := make(chan string, 1)
	p := testPool(t, Options{Era: EraLegacy, StateTTL: 50 * time.Millisecond, Peer: peer.Options{
		Intercept: func(next peer.Handler) peer.Handler {
			return func(m *peer.Message) error {
				if m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindResponse && strings.Contains(string(m.Data), `"action":"cancel"`) {
					declined <- string(m.Data)
				}
				return next(m)
			}
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ans, err := p.Serve(ctx, request(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"}}}`), func([]byte) error { return nil })
	if err != nil || !strings.Contains(string(ans), `"resultType":"input_required"`) {
		t.Fatalf("first round: %s %v", ans, err)
	}
	if s := p.Stats(); s.Parked != 1 || s.Children != 1 {
		t.Fatalf("while parked: %+v", s)
	}
	if err := p.WaitIdle(ctx); err != nil { // the expiry frees the call's child
		t.Fatal(err)
	}
	select {
	case <-declined:
	case <-ctx.Done():
		t.Fatal("the child's elicitation was not answered at expiry")
	}
	if s := p.Stats(); s.Parked != 0 || s.Children != 0 {
		t.Fatalf("after expiry: %+v, want the call gone and its child stopped", s)
	}
}

// A call is the Origin of its messages on its child, and says the caller
// of the request it serves: the first request's, then, once a retry
// resumes it, the retry's (the same principal, whose token may carry other
// scopes): the answer is filtered for the request it answers.
func TestCallerOfMessages(t *testing.T) {
	type seen struct {
		dir    peer.Direction
		method string
		caller any
	}
	got := make(chan seen, 16)
	p := testPool(t, Options{Era: EraLegacy, ChildIntercept: func(string, func(error), func(context.Context, string, any) (json.RawMessage, error)) (peer.Interceptor, func(error)) {
		return func(next peer.Handler) peer.Handler {
			return func(m *peer.Message) error {
				if m.Origin != nil && m.Env.Kind != jsonrpc.KindNotification {
					var caller any // nil: no principal
					if p := m.Caller(); p != nil {
						caller = p.Subject
					}
					got <- seen{m.Dir, m.Method, caller}
				}
				return next(m)
			}
		}, nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := request(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"}}}`)
	first.Caller = &auth.Principal{Subject: "first token"}
	ans, err := p.Serve(ctx, first, func([]byte) error { return nil })
	if err != nil || !strings.Contains(string(ans), `"resultType":"input_required"`) {
		t.Fatalf("first round: %s %v", ans, err)
	}
	var ir struct {
		Result struct {
			RequestState  string                     `json:"requestState"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
		} `json:"result"`
	}
	if err := json.Unmarshal(ans, &ir); err != nil || len(ir.Result.InputRequests) != 1 {
		t.Fatalf("%s: %v", ans, err)
	}
	var key string
	for k := range ir.Result.InputRequests {
		key = k
	}
	retry := request(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"},"requestState":"`+
		ir.Result.RequestState+`","inputResponses":{"`+key+`":{"action":"accept","content":{"name":"x"}}}}}`)
	retry.Caller = &auth.Principal{Subject: "retry's token"}
	if ans, err := p.Serve(ctx, retry, func([]byte) error { return nil }); err != nil || strings.Contains(string(ans), `"error"`) {
		t.Fatalf("retry: %s %v", ans, err)
	}
	want := []seen{{peer.ToChild, "tools/call", "first token"}, {peer.FromChild, "tools/call", "retry's token"}}
	for _, w := range want {
		select {
		case s := <-got:
			if s != w {
				t.Errorf("got %+v, want %+v", s, w)
			}
		case <-ctx.Done():
			t.Fatalf("no %+v", w)
		}
	}
}

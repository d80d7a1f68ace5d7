package pool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// frontFunc is a Front of a test.
type frontFunc func(body []byte, annotated []ParamHeader) error

func (f frontFunc) CheckParamHeaders(body []byte, annotated []ParamHeader) error {
	return f(body, annotated)
}

// Call refuses, typed, a method the children cannot be asked, before any
// child starts.
func TestCallMethodNotFound(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, method := range []string{"foo/bar", "ping", "initialize", "resources/subscribe"} {
		ans, err := p.Call(ctx, request(t, `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{}}`), nil, noEmit)
		var nf *MethodNotFoundError
		if !errors.As(err, &nf) || nf.Method != method {
			t.Fatalf("%s: got %s %v, want a *MethodNotFoundError naming it", method, ans, err)
		}
	}
	if s := p.Stats(); s.Children != 0 {
		t.Fatalf("a refused method started a child: %+v", s)
	}
}

// A tools/call goes to its Front with its tool's annotations; the Front's
// refusal is Call's, and the call never reaches a child; once the Front
// accepts, it is served.
func TestCallHeaderMismatch(t *testing.T) {
	var mu sync.Mutex
	var calls []string // the tools/call requests the children got
	p := testPool(t, Options{Era: EraLegacy, Peer: peer.Options{
		Intercept: func(next peer.Handler) peer.Handler {
			return func(m *peer.Message) error {
				if m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindRequest && m.Env.Method == "tools/call" {
					mu.Lock()
					calls = append(calls, string(m.Data))
					mu.Unlock()
				}
				return next(m)
			}
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refusal := &HeaderMismatchError{Header: "Mcp-Param-Region", Reason: "Mcp-Param-Region header value 'a' does not match body value params.arguments.region \"b\""}
	var got string
	refuse := frontFunc(func(body []byte, annotated []ParamHeader) error {
		env, err := jsonrpc.Parse(body)
		if err != nil {
			t.Errorf("the Front got a body that does not parse: %v", err)
		}
		got = env.Name(body)
		if len(annotated) != 0 {
			t.Errorf("echo has no x-mcp-header annotations, got %v", annotated)
		}
		return refusal
	})
	req := toolCall(t, 7, "echo", `{"text":"refused"}`)
	ans, err := p.Call(ctx, req, refuse, noEmit)
	var hm *HeaderMismatchError
	if !errors.As(err, &hm) || hm != refusal {
		t.Fatalf("got %s %v, want the Front's *HeaderMismatchError", ans, err)
	}
	if got != "echo" {
		t.Fatalf("the Front saw the tool %q, want echo", got)
	}
	accept := frontFunc(func([]byte, []ParamHeader) error { return nil })
	ans, err = p.Call(ctx, toolCall(t, 8, "echo", `{"text":"served"}`), accept, noEmit)
	if err := answered(ans, err, "served"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 || !strings.Contains(calls[0], "served") {
		t.Fatalf("the children got the calls %q, want only the accepted one", calls)
	}
}

// A retry whose requestState another instance signed is refused with a
// *ForwardError naming that instance, and starts no child here.
func TestCallForward(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	a := testPool(t, Options{Era: EraLegacy, Secret: secret, Instance: "a"})
	b := testPool(t, Options{Era: EraLegacy, Secret: secret, Instance: "b"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"}}}`
	ans, err := a.Call(ctx, request(t, first), nil, noEmit)
	if err != nil || !strings.Contains(string(ans), `"resultType":"input_required"`) {
		t.Fatalf("first round: %s %v", ans, err)
	}
	result, _ := jsonrpc.Lookup(ans, "result")
	raw, _ := jsonrpc.Lookup(result, "requestState")
	state, ok := jsonrpc.StringValue(raw)
	if !ok {
		t.Fatalf("no requestState in %s", ans)
	}
	retry := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"elicit","arguments":{"text":"who?"},"requestState":"` + state + `","inputResponses":{}}}`
	ans, err = b.Call(ctx, request(t, retry), nil, noEmit)
	var fwd *ForwardError
	if !errors.As(err, &fwd) || fwd.Instance != "a" {
		t.Fatalf("retry on another instance: got %s %v, want a *ForwardError naming a", ans, err)
	}
	if s := b.Stats(); s.Children != 0 {
		t.Fatalf("the forwarded retry started a child: %+v", s)
	}
}

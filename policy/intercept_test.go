package policy_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/policy"
)

const testPolicy = `
tools:
  deny: ["test_*_content", test_audio_*]
  scopes:
    test_simple_text: [text:read]
prompts:
  deny: [test_prompt_with_image]
resources:
  deny: ["test://static-binary"]
  scopes:
    "test://template/*": [templates]
`

// callers: alice has the scopes, bob none, and an unknown client is nobody.
func callers(name string) *policy.Caller {
	switch name {
	case "alice":
		return &policy.Caller{Subject: "alice", Scopes: []string{"text:read", "templates"}}
	case "bob":
		return &policy.Caller{Subject: "bob"}
	}
	return nil
}

func startWithPolicy(t *testing.T) *childtest.Child {
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	c := childtest.Start(t, p.Interceptor(&policy.Options{Logger: slog.New(slog.DiscardHandler)}), childtest.EverythingServer(t))
	c.Callers = callers
	return c
}

// as is the client called name, with its caller.
func as(name string) childtest.Client {
	return childtest.Client{Name: name, Principal: callers(name)}
}

// The lists of a real server show each caller only what it may use.
func TestListsFiltered(t *testing.T) {
	c := startWithPolicy(t)
	unfiltered := childtest.Start(t, nil, childtest.EverythingServer(t))
	for _, l := range []struct {
		method, array, key string
		hiddenFromAll      []string
		hiddenFromBob      []string
	}{
		{"tools/list", "tools", "name", []string{"test_image_content", "test_audio_content"}, []string{"test_simple_text"}},
		{"prompts/list", "prompts", "name", []string{"test_prompt_with_image"}, nil},
		{"resources/list", "resources", "uri", []string{"test://static-binary"}, nil},
		{"resources/templates/list", "resourceTemplates", "uriTemplate", nil, []string{"test://template/{id}/data"}},
	} {
		all := childtest.Names(t, unfiltered.Call(t, "x", l.method, nil), l.array, l.key)
		for _, h := range append(slices.Clone(l.hiddenFromAll), l.hiddenFromBob...) {
			if !slices.Contains(all, h) {
				t.Fatalf("the everything-server no longer lists %s in %s: %v", h, l.method, all)
			}
		}
		for _, who := range []string{"alice", "bob"} {
			got := childtest.Names(t, c.Call(t, who, l.method, nil), l.array, l.key)
			want := slices.DeleteFunc(slices.Clone(all), func(n string) bool {
				return slices.Contains(l.hiddenFromAll, n) || who == "bob" && slices.Contains(l.hiddenFromBob, n)
			})
			if !slices.Equal(got, want) {
				t.Errorf("%s for %s: got %v, want %v", l.method, who, got, want)
			}
		}
	}
}

// Requests for what is hidden get a clear error, and a missing scope an
// error naming it; what is allowed reaches the server.
func TestRequestsRefused(t *testing.T) {
	c := startWithPolicy(t)
	for _, r := range []struct {
		who, method string
		params      map[string]any
		code        int
		message     string
	}{
		{"alice", "tools/call", map[string]any{"name": "test_image_content"}, jsonrpc.CodeInvalidParams, `tool "test_image_content" is not available: the bridge's policy denies it`},
		{"bob", "tools/call", map[string]any{"name": "test_simple_text"}, policy.CodeInsufficientScope, `insufficient scope: tool "test_simple_text" needs the scope text:read`},
		{"nobody", "tools/call", map[string]any{"name": "test_simple_text"}, policy.CodeInsufficientScope, "text:read"},
		{"bob", "prompts/get", map[string]any{"name": "test_prompt_with_image"}, jsonrpc.CodeInvalidParams, `prompt "test_prompt_with_image" is not available`},
		{"bob", "resources/read", map[string]any{"uri": "test://static-binary"}, policy.CodeResourceNotFound, `resource "test://static-binary" is not available`},
		{"bob", "resources/read", map[string]any{"uri": "test://template/7/data"}, policy.CodeInsufficientScope, "templates"},
		{"bob", "completion/complete", map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "test_prompt_with_image"}, "argument": map[string]any{"name": "a", "value": ""}}, jsonrpc.CodeInvalidParams, "not available"},
		{"alice", "tools/call", map[string]any{"name": "test_simple_text"}, 0, ""},
		{"alice", "resources/read", map[string]any{"uri": "test://template/7/data"}, 0, ""},
		{"bob", "prompts/get", map[string]any{"name": "test_simple_prompt"}, 0, ""},
	} {
		answer := c.Call(t, r.who, r.method, r.params)
		rpcErr := childtest.Error(t, answer)
		switch {
		case r.code == 0 && rpcErr != nil:
			t.Errorf("%s %s %v: refused: %s", r.who, r.method, r.params, answer)
		case r.code != 0 && (rpcErr == nil || rpcErr.Code != r.code || !strings.Contains(rpcErr.Message, r.message)):
			t.Errorf("%s %s %v: got %s, want code %d and %q", r.who, r.method, r.params, answer, r.code, r.message)
		}
		if r.code == policy.CodeInsufficientScope {
			var body struct {
				Error struct {
					Data struct {
						Error string
						Scope string
					}
				}
			}
			if err := json.Unmarshal(answer, &body); err != nil || body.Error.Data.Error != "insufficient_scope" || body.Error.Data.Scope == "" {
				t.Errorf("insufficient scope without its data: %s", answer)
			}
		}
	}
}

// A hidden resource is answered as one that does not exist is in the
// caller's revision: -32002 in the 2025 revisions, -32602 in 2026-07-28,
// which says "Implementations of this protocol version MUST NOT emit these
// codes: -32002" (basic/index). It got -32002 in both.
func TestHiddenResourceCodeByRevision(t *testing.T) {
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		revision string
		code     int
	}{
		{"", policy.CodeResourceNotFound},
		{"2025-11-25", policy.CodeResourceNotFound},
		{policy.ModernRevision, jsonrpc.CodeInvalidParams},
	} {
		c := childtest.Start(t, p.Interceptor(&policy.Options{Revision: r.revision, Logger: slog.New(slog.DiscardHandler)}), childtest.EverythingServer(t))
		c.Callers = callers
		for _, method := range []string{"resources/read", "resources/subscribe"} {
			answer := c.Call(t, "bob", method, map[string]any{"uri": "test://static-binary"})
			rpcErr := childtest.Error(t, answer)
			if rpcErr == nil || rpcErr.Code != r.code || !strings.Contains(rpcErr.Message, `resource "test://static-binary" is not available`) {
				t.Errorf("revision %q, %s of a hidden resource: got %s, want code %d", r.revision, method, answer, r.code)
			}
		}
		// A missing scope is still told as such, in every revision.
		answer := c.Call(t, "bob", "resources/read", map[string]any{"uri": "test://template/7/data"})
		if rpcErr := childtest.Error(t, answer); rpcErr == nil || rpcErr.Code != policy.CodeInsufficientScope {
			t.Errorf("revision %q, a resource needing a scope: got %s, want code %d", r.revision, answer, policy.CodeInsufficientScope)
		}
	}
}

// A name written with escapes is the name the server reads: the policy
// decodes it as the server does. A message giving params twice, or a name
// twice (servers differ on which one wins, and some match names
// case-insensitively), does not get that far: jsonrpc refuses it as
// ambiguous.
func TestNoBypassByEncoding(t *testing.T) {
	c := startWithPolicy(t)
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":"e1","method":"tools/call","params":{"name":"test_image\u005fcontent"}}`,
		`{"jsonrpc":"2.0","id":"e4","method":"resources/read","params":{"uri":"test:\/\/static-binary"}}`,
	} {
		answer := c.CallRaw(t, "alice", []byte(raw))
		if rpcErr := childtest.Error(t, answer); rpcErr == nil || !strings.Contains(rpcErr.Message, "policy denies it") {
			t.Errorf("%s: %s", raw, answer)
		}
	}
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":"e3","method":"tools/call","params":{"name":"test_simple_text"},"params":{"name":"test_image_content"}}`,
		`{"jsonrpc":"2.0","id":"e2","method":"tools/call","params":{"name":"test_simple_text","name":"test_image_content"}}`,
		`{"jsonrpc":"2.0","id":"e5","method":"tools/call","params":{"name":"test_simple_text","Name":"test_image_content"}}`,
	} {
		if _, err := jsonrpc.Parse([]byte(raw)); err == nil {
			t.Errorf("%s parses: the policy could read another tool than the server", raw)
		}
	}
}

// Check is what the HTTP edge calls first; its Denial is the error the
// interceptor refuses with, recognisable with errors.As.
func TestCheckForTheEdge(t *testing.T) {
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_simple_text"}}`)
	env, _ := jsonrpc.Parse(data)
	d := p.Check(callers("bob"), jsonrpc.Message{Data: data, Env: env})
	if d == nil || !d.InsufficientScope() || strings.Join(d.Missing, " ") != "text:read" {
		t.Fatalf("Check: %+v", d)
	}
	var err2 error = d
	var rpcErr *jsonrpc.Error
	var denial *policy.Denial
	if !errors.As(err2, &rpcErr) || rpcErr.Code != policy.CodeInsufficientScope || !errors.As(err2, &denial) {
		t.Fatalf("errors.As: %v", err2)
	}
	if d := p.Check(callers("alice"), jsonrpc.Message{Data: data, Env: env}); d != nil {
		t.Fatalf("alice: %v", d)
	}
}

var _ peer.Interceptor = (&policy.Policy{}).Interceptor(nil)

// notifications/resources/updated reaches a client only for a resource it
// may read: the caller of the connection's notifications (Origin nil) is
// Options.Audience's. Subscribed as alice, the everything-server's
// watched resource, gated behind a scope, is updated for a connection
// whose notifications go to alice, and not for one that cannot tell whom
// they go to (a pool's child: fail closed).
func TestResourceUpdatesHidden(t *testing.T) {
	p, err := policy.Parse("test.yaml", []byte("resources:\n  scopes:\n    \"test://watched-*\": [watch]\n"))
	if err != nil {
		t.Fatal(err)
	}
	server := childtest.EverythingServer(t)
	for _, c := range []struct {
		name      string
		notified  *policy.Caller // whom the connection's notifications go to
		forwarded bool
	}{
		{"watcher", &policy.Caller{Subject: "alice", Scopes: []string{"watch"}}, true},
		{"other", &policy.Caller{Subject: "bob"}, false},
		{"unknown", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// passed is told of each update once the policy has had it and
			// the client would have: by then it is among Notes or dropped.
			passed := make(chan struct{}, 100)
			counter := func(next peer.Handler) peer.Handler {
				return func(m *peer.Message) error {
					err := next(m)
					if m.Method == "notifications/resources/updated" {
						passed <- struct{}{}
					}
					return err
				}
			}
			ch := childtest.Start(t, peer.Chain(counter, p.Interceptor(&policy.Options{Audience: childtest.Client{Name: "the session", Principal: c.notified}, Logger: slog.New(slog.DiscardHandler)})), server)
			ch.Callers = func(string) *policy.Caller { return &policy.Caller{Subject: "alice", Scopes: []string{"watch"}} }
			if rpcErr := childtest.Error(t, ch.Call(t, "alice", "resources/subscribe", map[string]any{"uri": "test://watched-resource"})); rpcErr != nil {
				t.Fatal(rpcErr)
			}
			select {
			case <-passed:
			case <-time.After(time.Minute):
				t.Fatal("the everything-server sent no update in a minute")
			}
			forwarded := false
			for len(ch.Notes()) > 0 {
				if m := <-ch.Notes(); m.Method == "notifications/resources/updated" {
					forwarded = true
				}
			}
			if forwarded != c.forwarded {
				t.Errorf("the update was forwarded: %v, want %v", forwarded, c.forwarded)
			}
		})
	}
}

// message parses data as a message going dir, from or to origin.
func message(t *testing.T, data string, dir peer.Direction, origin peer.Origin) *peer.Message {
	t.Helper()
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return &peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: dir, Origin: origin, Method: env.Method}
}

// A subscriptions/listen request reaches the server without the resources
// its caller may not read ("the acknowledgment reflects the subset the
// server agreed to honor"), and the rest of the request as it was; the
// edge's Check does not refuse it.
func TestListenFiltered(t *testing.T) {
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	var passed *peer.Message
	h := p.Interceptor(&policy.Options{Logger: slog.New(slog.DiscardHandler)})(func(m *peer.Message) error {
		passed = m
		return nil
	})
	const listen = `{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,` +
		`"resourceSubscriptions":["test://static-text","test://static-binary","test://template/7/data"]},"_meta":{"x":1}}}`
	for who, want := range map[string][]string{
		"alice":  {"test://static-text", "test://template/7/data"},
		"bob":    {"test://static-text"},
		"nobody": {"test://static-text"},
	} {
		passed = nil
		m := message(t, listen, peer.ToChild, as(who))
		if err := h(m); err != nil || passed == nil {
			t.Fatalf("%s: %v", who, err)
		}
		var got struct {
			ID     string
			Params struct {
				Notifications struct {
					ToolsListChanged      bool
					ResourceSubscriptions []string
				}
				Meta map[string]int `json:"_meta"`
			}
		}
		if err := json.Unmarshal(passed.Data, &got); err != nil {
			t.Fatal(err)
		}
		if n := got.Params.Notifications; !slices.Equal(n.ResourceSubscriptions, want) || !n.ToolsListChanged || got.ID != "L" || got.Params.Meta["x"] != 1 {
			t.Errorf("%s: the server got %s, want the resources %v", who, passed.Data, want)
		}
		if d := p.Check(callers(who), m.Message); d != nil {
			t.Errorf("%s: Check refused the listen request: %v", who, d)
		}
	}
	bad := message(t, `{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":"test://static-binary"}}}`, peer.ToChild, as("alice"))
	var rpcErr *jsonrpc.Error
	if err := h(bad); !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("resourceSubscriptions not an array: %v", err)
	}
}

// With UpdatesPerCaller (a pool's child, whose updates go to several
// callers and whose pool asks Readable for each), the interceptor passes
// the updates of a resource a scope gates, and drops those of a resource
// nobody may read; Readable decides for each caller.
func TestUpdatesPerCaller(t *testing.T) {
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, perCaller := range []bool{false, true} {
		passed := false
		h := p.Interceptor(&policy.Options{UpdatesPerCaller: perCaller, Logger: slog.New(slog.DiscardHandler)})(func(m *peer.Message) error {
			passed = true
			return nil
		})
		for uri, want := range map[string]bool{"test://template/7/data": perCaller, "test://static-binary": false, "test://static-text": true} {
			passed = false
			if err := h(message(t, `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"`+uri+`"}}`, peer.FromChild, nil)); err != nil || passed != want {
				t.Errorf("UpdatesPerCaller %v: the update of %s passed: %v (%v), want %v", perCaller, uri, passed, err, want)
			}
		}
	}
	if p.Readable(callers("alice"), "test://template/7/data") != nil || p.Readable(callers("bob"), "test://template/7/data") == nil ||
		p.Readable(callers("alice"), "test://static-binary") == nil {
		t.Error("Readable does not decide as resources/read")
	}
}

// The interceptor refuses a call exactly when Check refuses it, for every
// caller, the first time a name is called and again (when it remembers
// which names every caller may use), whatever the policy and however the
// name is written.
func TestInterceptorAsCheck(t *testing.T) {
	policies := []string{
		testPolicy,
		"tools:\n  allow: [\"test_*\", echo]\n  deny: [test_audio_*]\n  scopes:\n    \"*_text\": [text:read]\nprompts:\n  allow: [test_simple_prompt]\n",
		"tools:\n  scopes:\n    \"*\": [text:read]\n",
	}
	names := []string{`"echo"`, `"test_simple_text"`, `"test_simple\u005ftext"`, `"test_image_content"`, `"test_image\u005fcontent"`,
		`"test_audio_x"`, `"other"`, `"\u0065cho"`, `"e\ufffdcho"`, "\"e\xffcho\"", `"test_simple_prompt"`, `"test_prompt_with_image"`, `""`}
	for i, text := range policies {
		p, err := policy.Parse("test.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		var passed bool
		h := p.Interceptor(&policy.Options{Logger: slog.New(slog.DiscardHandler)})(func(*peer.Message) error {
			passed = true
			return nil
		})
		for round := range 2 {
			for _, method := range []string{"tools/call", "prompts/get"} {
				for _, name := range names {
					data := []byte(`{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"name":` + name + `}}`)
					env, err := jsonrpc.Parse(data)
					if err != nil {
						t.Fatal(err)
					}
					for _, who := range []string{"alice", "bob", "nobody"} {
						passed = false
						err := h(&peer.Message{Message: jsonrpc.Message{Data: data, Env: env}, Dir: peer.ToChild, Origin: as(who), Method: method})
						d := p.Check(callers(who), jsonrpc.Message{Data: data, Env: env})
						if (err == nil) != (d == nil) || passed != (d == nil) {
							t.Errorf("policy %d, round %d, %s %s by %s: interceptor %v (passed %v), Check %v", i, round, method, name, who, err, passed, d)
						}
					}
				}
			}
		}
	}
}

package audit_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// writes records each Write, to check that a line is one write.
type writes struct {
	mu    sync.Mutex
	calls [][]byte
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, bytes.Clone(p))
	return len(p), nil
}

// records parses the log: every write must be exactly one JSON line.
func (w *writes) records(t *testing.T) []audit.Record {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []audit.Record
	for _, c := range w.calls {
		if bytes.Count(c, []byte("\n")) != 1 || c[len(c)-1] != '\n' {
			t.Fatalf("a write that is not one line: %q", c)
		}
		dec := json.NewDecoder(bytes.NewReader(c))
		dec.DisallowUnknownFields()
		var r audit.Record
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("a line that is not a record: %q: %v", c, err)
		}
		out = append(out, r)
	}
	return out
}

// callers: every client acts for a principal of its name, through an
// OAuth client of its own.
func callers(name string) *auth.Principal {
	return &auth.Principal{Subject: name, ClientID: "client-of-" + name}
}

// alice is the client "alice" with its principal.
var alice = childtest.Client{Name: "alice", Principal: callers("alice")}

// A real server behind audit, policy and pin: every client request and
// every server request gets one line with its outcome, denials name their
// rule, and a pin violation is an alert.
func TestAuditChain(t *testing.T) {
	server := childtest.EverythingServer(t)
	w := &writes{}
	log := audit.New(w, &audit.Options{Logger: quiet})
	pol, err := policy.Parse("p.yaml", []byte("tools:\n  deny: [test_image_content]\n"))
	if err != nil {
		t.Fatal(err)
	}
	lock := pin.NewLock() // pins nothing: every tool offered is a violation
	enf := pin.New(&pin.Options{Lock: lock, LockFile: "empty.json"})
	intercept, ended := log.Interceptor("sess-1")
	chain := peer.Chain(
		intercept,
		pol.Interceptor(&policy.Options{Logger: quiet}),
		enf.Interceptor(&pin.Hooks{Logger: quiet, Alert: func(origin peer.Origin, v pin.Violation) { log.Alert("sess-1", origin, v.Kind, v.Name, v.Problem) }}),
	)
	c := childtest.Start(t, chain, server)
	c.Callers = callers

	args := map[string]any{"x": "secret"}
	rawArgs, _ := json.Marshal(args)
	c.Call(t, "alice", "tools/call", map[string]any{"name": "test_image_content"}) // policy
	c.Call(t, "bob", "tools/call", map[string]any{"name": "test_simple_text"})     // pin: not pinned
	c.Call(t, "bob", "no/such/method", nil)                                        // the server's error
	c.Call(t, "bob", "tools/list", nil)                                            // every tool dropped

	// The server asks the client (elicitation) in a call; the client
	// answers; then the client cancels another call waiting on the server.
	log2 := audit.New(w, &audit.Options{Logger: quiet})
	intercept2, ended2 := log2.Interceptor("sess-2")
	c2 := childtest.Start(t, intercept2, server)
	c2.Callers = callers
	c2.Call(t, "alice", "prompts/get", map[string]any{"name": "test_simple_prompt", "arguments": args})
	done := make(chan []byte, 1)
	go func() {
		done <- c2.Call(t, "carol", "tools/call", map[string]any{"name": "test_elicitation", "arguments": map[string]any{"message": "hi"}})
	}()
	req := waitRequest(t, c2, "elicitation/create")
	answer := []byte(`{"jsonrpc":"2.0","id":` + string(req.Env.IDAt.In(req.Data)) + `,"result":{"action":"decline"}}`)
	send(t, c2, "carol", answer)
	<-done
	// A call still waiting on the client when the connection ends: both
	// it and the server's request are unanswered.
	_, _, err = c2.Begin("carol", "tools/call", map[string]any{"name": "test_elicitation", "arguments": map[string]any{"message": "again"}})
	if err != nil {
		t.Fatal(err)
	}
	waitRequest(t, c2, "elicitation/create")
	ended2("test over")
	ended("test over")

	recs := w.records(t)
	find := func(pred func(r audit.Record) bool) *audit.Record {
		for i := range recs {
			if pred(recs[i]) {
				return &recs[i]
			}
		}
		return nil
	}
	sum := sha256.Sum256(rawArgs)
	if r := find(func(r audit.Record) bool { return r.Prompt == "test_simple_prompt" }); r == nil ||
		r.Outcome != "ok" || r.Sub != "alice" || r.ClientID != "client-of-alice" || r.Session != "sess-2" || r.From != "client" ||
		r.ArgsSHA256 != hex.EncodeToString(sum[:]) || r.Args != nil || r.BytesIn == 0 || r.BytesOut == 0 || r.Method != "prompts/get" {
		t.Errorf("prompts/get: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Tool == "test_image_content" }); r == nil ||
		r.Outcome != "denied" || r.DeniedBy != "policy: tools.deny test_image_content" || r.ErrorCode != jsonrpc.CodeInvalidParams {
		t.Errorf("denied by policy: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Tool == "test_simple_text" && r.Event == "request" }); r == nil ||
		r.Outcome != "denied" || r.DeniedBy != "pin: not in the pin file empty.json" || r.Sub != "bob" {
		t.Errorf("denied by pin: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Method == "no/such/method" }); r == nil || r.Outcome != "error" || r.ErrorCode != jsonrpc.CodeMethodNotFound {
		t.Errorf("an error from the server: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Event == "pin_violation" && r.Tool == "test_simple_text" }); r == nil ||
		r.Outcome != "dropped" || r.Sub != "bob" || !strings.HasPrefix(r.DeniedBy, "pin: not in the pin file") {
		t.Errorf("pin alert: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Method == "elicitation/create" && r.Outcome == "ok" }); r == nil ||
		r.From != "server" || r.Sub != "carol" || r.Session != "sess-2" || r.ArgsSHA256 == "" {
		t.Errorf("the server's request: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Method == "elicitation/create" && r.Outcome == "unanswered" }); r == nil || r.Reason != "test over" {
		t.Errorf("the server's unanswered request: %+v", r)
	}
	if r := find(func(r audit.Record) bool { return r.Tool == "test_elicitation" && r.Outcome == "unanswered" }); r == nil || r.Sub != "carol" {
		t.Errorf("the client's unanswered request: %+v", r)
	}
	for _, r := range recs {
		if r.Time.IsZero() || r.Time.Location() != time.UTC {
			t.Errorf("a record without a UTC time: %+v", r)
		}
		if r.Event == "request" && r.Method == "tools/call" && r.Tool == "" {
			t.Errorf("a call without its tool: %+v", r)
		}
	}
}

func waitRequest(t *testing.T, c *childtest.Child, method string) *peer.Message {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case m := <-c.Notes():
			if m.Method == method && m.Env.Kind == jsonrpc.KindRequest {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s in a minute", method)
		}
	}
}

func send(t *testing.T, c *childtest.Child, who string, data []byte) {
	t.Helper()
	env, err := jsonrpc.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Conn.Send(c.Client(who), jsonrpc.Message{Data: data, Env: env}); err != nil {
		t.Fatal(err)
	}
}

// With Args, the arguments are recorded as sent; a client's cancellation
// is recorded as such.
func TestArgsAndCancel(t *testing.T) {
	w := &writes{}
	log := audit.New(w, &audit.Options{Args: true, Logger: quiet})
	intercept, ended := log.Interceptor("s")
	c := childtest.Start(t, intercept, childtest.EverythingServer(t))
	id, wait, err := c.Begin("dave", "tools/call", map[string]any{"name": "test_elicitation", "arguments": map[string]any{"message": "m"}})
	if err != nil {
		t.Fatal(err)
	}
	waitRequest(t, c, "elicitation/create")
	send(t, c, "dave", []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`}}`))
	ended("stopped")
	recs := w.records(t)
	var call *audit.Record
	for i := range recs {
		if recs[i].Tool == "test_elicitation" {
			call = &recs[i]
		}
	}
	if call == nil || call.Outcome != "cancelled" || string(call.Args) != `{"message":"m"}` {
		t.Fatalf("the cancelled call: %+v", call)
	}
	_ = wait // never answered: the child ends with the test
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Open appends to a file, 0600, one line per record, across reopenings.
func TestOpenAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	for i := range 2 {
		l, err := audit.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Alert("s", nil, "tool", "t"+itoa(i), "p")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	sc := bufio.NewScanner(f)
	var names []string
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		names = append(names, r.Tool)
	}
	if strings.Join(names, ",") != "t0,t1" {
		t.Fatalf("lines %v", names)
	}
	if _, err := audit.Open(filepath.Join(t.TempDir(), "no", "such", "dir"), nil); err == nil {
		t.Fatal("a log in a missing directory opened")
	}
}

// aliceCall is data, a tools/call of the client "alice" or its answer,
// going in the direction dir.
func aliceCall(t *testing.T, dir peer.Direction, data string) *peer.Message {
	t.Helper()
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return &peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: dir, Origin: alice, Method: "tools/call"}
}

// An answer may pass the chain, on the connection's reader, before the
// Send of its request has returned: the request was tracked before it went
// on, so it gets its line, once, with outcome ok. A request that fails to
// go on gets its line at once, whether tracked or not.
func TestAnswerBeforeSendReturns(t *testing.T) {
	w := &writes{}
	intercept, ended := audit.New(w, &audit.Options{Logger: quiet}).Interceptor("s")
	var h peer.Handler
	failing := errors.New("the server's stdin is closed")
	h = intercept(func(m *peer.Message) error {
		switch {
		case m.Dir == peer.FromChild:
			return nil
		case m.Env.ID == jsonrpc.NumberID(1):
			return h(aliceCall(t, peer.FromChild, `{"jsonrpc":"2.0","id":1,"result":{}}`))
		}
		return failing
	})
	if err := h(aliceCall(t, peer.ToChild, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := h(aliceCall(t, peer.ToChild, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lost"}}`)); err != failing {
		t.Fatal(err)
	}
	ended("over")
	recs := w.records(t)
	if len(recs) != 2 || recs[0].Tool != "quick" || recs[0].Outcome != "ok" || recs[0].Sub != "alice" ||
		recs[1].Tool != "lost" || recs[1].Outcome != "error" {
		t.Fatalf("lines: %+v", recs)
	}
}

// A client may send its next request with the id of the one just
// answered as soon as it has the answer: the answered request is no longer
// in flight by then, so the next one is tracked too and both get their
// lines, with outcome ok, in the order they were answered.
func TestIDFreeOnceAnswered(t *testing.T) {
	w := &writes{}
	intercept, ended := audit.New(w, &audit.Options{Logger: quiet}).Interceptor("s")
	defer ended("over")
	var h peer.Handler
	sentNext := false
	h = intercept(func(m *peer.Message) error {
		if m.Dir == peer.FromChild && !sentNext {
			// The client, given its answer, sends its next request 1.
			sentNext = true
			return h(aliceCall(t, peer.ToChild, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"second"}}`))
		}
		return nil
	})
	answer := `{"jsonrpc":"2.0","id":1,"result":{}}`
	for _, m := range []*peer.Message{
		aliceCall(t, peer.ToChild, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"first"}}`),
		aliceCall(t, peer.FromChild, answer),
		aliceCall(t, peer.FromChild, answer),
	} {
		if err := h(m); err != nil {
			t.Fatal(err)
		}
	}
	recs := w.records(t)
	if len(recs) != 2 || recs[0].Tool != "first" || recs[0].Outcome != "ok" || recs[1].Tool != "second" || recs[1].Outcome != "ok" {
		t.Fatalf("lines: %+v", recs)
	}
}

// A connection's lines give each call the digest and arguments of its own
// params.arguments, whatever calls came before it: the same arguments
// again, other ones, arguments before the name and after it, none.
// (Arguments given twice never reach the audit: jsonrpc.Parse refuses
// them, as a server could read either.)
func TestArgumentsOfEachCall(t *testing.T) {
	calls := []struct{ params, args string }{
		{`{"name":"echo","arguments":{"text":"hello"}}`, `{"text":"hello"}`},
		{`{"name":"echo","arguments":{"text":"hello"}}`, `{"text":"hello"}`},
		{`{"name":"other","arguments":{"text":"hello"}}`, `{"text":"hello"}`},
		{`{"name":"echo","arguments":{"text":"bye"}}`, `{"text":"bye"}`},
		{`{"name":"echo","arguments":{"text":"hello"}}`, `{"text":"hello"}`},
		{`{"arguments":{"a":1},"name":"echo"}`, `{"a":1}`},
		{`{"arguments":{"a":2},"name":"echo"}`, `{"a":2}`},
		{`{"name":"echo"}`, ``},
		{`{"name":"echo","arguments":{}}`, `{}`},
		{`{"name":"echo","arguments":{}}`, `{}`},
		{`{"name":"echo","_meta":{"progressToken":1},"arguments":{}}`, `{}`},
		{`{"name":"echo","arguments":{}}`, `{}`},
		{`{"name":"echo","arguments":{"long":"` + strings.Repeat("x", 600) + `"}}`, `{"long":"` + strings.Repeat("x", 600) + `"}`},
		{`{"name":"echo","arguments":{"long":"` + strings.Repeat("x", 600) + `"}}`, `{"long":"` + strings.Repeat("x", 600) + `"}`},
	}
	for _, withArgs := range []bool{false, true} {
		w := &writes{}
		intercept, _ := audit.New(w, &audit.Options{Args: withArgs, Logger: quiet}).Interceptor("s")
		h := intercept(func(*peer.Message) error { return nil })
		for i, c := range calls {
			for _, method := range []string{"tools/call", "prompts/get"} {
				data := []byte(`{"jsonrpc":"2.0","id":` + itoa(i) + `,"method":"` + method + `","params":` + c.params + `}`)
				env, err := jsonrpc.Parse(data)
				if err != nil {
					t.Fatal(err)
				}
				if err := h(&peer.Message{Message: jsonrpc.Message{Data: data, Env: env}, Dir: peer.ToChild, Origin: childtest.Client{Name: "alice"}, Method: method}); err != nil {
					t.Fatal(err)
				}
				// The message's bytes are the reader's again.
				copy(data, bytes.Repeat([]byte{'#'}, len(data)))
				if err := h(&peer.Message{Message: jsonrpc.Message{Data: []byte(`{"jsonrpc":"2.0","id":` + itoa(i) + `,"result":{}}`), Env: jsonrpc.Envelope{Kind: jsonrpc.KindResponse, ID: jsonrpc.NumberID(int64(i))}}, Dir: peer.FromChild, Origin: childtest.Client{Name: "alice"}, Method: method}); err != nil {
					t.Fatal(err)
				}
			}
		}
		recs := w.records(t)
		if len(recs) != 2*len(calls) {
			t.Fatalf("%d lines for %d calls", len(recs), 2*len(calls))
		}
		for i, r := range recs {
			c := calls[i/2]
			want := ""
			if c.args != "" {
				sum := sha256.Sum256([]byte(c.args))
				want = hex.EncodeToString(sum[:])
			}
			if r.ArgsSHA256 != want {
				t.Errorf("call %d (%s), args %v: digest %q, want that of %s", i/2, c.params, withArgs, r.ArgsSHA256, c.args)
			}
			if wantArgs := map[bool]string{true: c.args}[withArgs]; string(r.Args) != wantArgs {
				t.Errorf("call %d (%s), args %v: arguments %s, want %s", i/2, c.params, withArgs, r.Args, wantArgs)
			}
		}
	}
}

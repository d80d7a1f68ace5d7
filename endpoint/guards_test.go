package endpoint

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
)

// guardsFor builds the guards of a server's options, without telemetry;
// authn: the edge authenticates.
func guardsFor(tb testing.TB, o *ServerOptions, authn bool) *guards {
	tb.Helper()
	logger := slog.New(slog.DiscardHandler)
	g, err := newGuards(o, &Shared{Authenticates: authn}, newTelemetry(&Shared{}, o.Name, logger), logger)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.close() })
	return g
}

func loadPolicy(tb testing.TB, path string) *policy.Policy {
	tb.Helper()
	p, err := policy.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func readLock(tb testing.TB, path string) *pin.Lock {
	tb.Helper()
	l, err := pin.ReadLock(path)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// noInspection turns off what pin inspects by default.
var noInspection = pin.Inspection{AllowHiddenUnicode: true, MaxDescriptionBytes: -1}

func message(tb testing.TB, dir peer.Direction, method, data string) *peer.Message {
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		tb.Fatal(err)
	}
	return &peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: dir, Origin: principalOf{}, Method: method}
}

// BenchmarkGuards: the interception point's cost per message, a tools/call
// and its answer (what every call pays), and a tools/list answer of 30
// tools (what each listing pays), without guards and with each of them.
// The figures are for comparison with a call through the bridge
// (bridge.BenchmarkCall).
func BenchmarkGuards(b *testing.B) {
	dir := b.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  deny: [delete_*, \"*_admin\"]\n  scopes:\n    send_email: [mail:send]\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	var tools []string
	lock := pin.NewLock()
	for i := range 30 {
		tool := fmt.Sprintf(`{"name":"tool_%d","description":"Does thing %d with care.","inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"what to use"}},"required":["text"]}}`, i, i)
		tools = append(tools, tool)
		d, err := pin.Digest(pin.Kinds[0], []byte(tool))
		if err != nil {
			b.Fatal(err)
		}
		lock.Tools[fmt.Sprintf("tool_%d", i)] = d
	}
	lockFile := filepath.Join(dir, "lock.json")
	if err := lock.WriteFile(lockFile); err != nil {
		b.Fatal(err)
	}
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"tool_3","arguments":{"text":"hello world, a typical argument"}}}`
	answer := `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 512) + `"}]}}`
	list := `{"jsonrpc":"2.0","id":8,"result":{"tools":[` + strings.Join(tools, ",") + `]}}`
	for _, c := range []struct {
		name string
		o    *ServerOptions
	}{
		{"none", &ServerOptions{Inspection: noInspection}},
		{"policy", &ServerOptions{Inspection: noInspection, Policy: loadPolicy(b, policyFile)}},
		{"pin", &ServerOptions{Lock: readLock(b, lockFile), LockFile: lockFile}},
		{"audit", &ServerOptions{Inspection: noInspection, AuditLog: filepath.Join(dir, "audit.log")}},
		{"all", &ServerOptions{Policy: loadPolicy(b, policyFile), Lock: readLock(b, lockFile), LockFile: lockFile, AuditLog: filepath.Join(dir, "audit-all.log")}},
	} {
		g := guardsFor(b, c.o, false)
		intercept, _ := g.chain("bench", nil, slog.New(slog.DiscardHandler), nil, nil)
		end := func(*peer.Message) error { return nil }
		h := end
		if intercept != nil {
			h = intercept(end)
		}
		b.Run("call/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := h(message(b, peer.ToChild, "tools/call", call)); err != nil {
					b.Fatal(err)
				}
				if err := h(message(b, peer.FromChild, "tools/call", answer)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("list/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := message(b, peer.FromChild, "tools/list", list)
				if err := h(m); err != nil {
					b.Fatal(err)
				}
				if len(m.Data) != len(list) {
					b.Fatalf("the list was rewritten: %s", m.Data)
				}
			}
		})
	}
}

// The chain refuses what the policy and the lock refuse, in that order,
// and the audit line names the rule.
func TestGuardsChain(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  deny: [delete_*]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(dir, "lock.json")
	if err := pin.NewLock().WriteFile(lockFile); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(dir, "audit.log")
	g := guardsFor(t, &ServerOptions{Policy: loadPolicy(t, policyFile), Lock: readLock(t, lockFile), LockFile: lockFile, AuditLog: auditFile}, false)
	intercept, ended := g.chain("s1", nil, slog.New(slog.DiscardHandler), nil, nil)
	h := intercept(func(*peer.Message) error { return nil })
	for _, c := range []struct{ tool, want string }{
		{"delete_all", "policy: tools.deny delete_*"},
		{"anything", "pin: not in the pin file " + lockFile},
	} {
		err := h(message(t, peer.ToChild, "tools/call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+c.tool+`"}}`))
		var d interface{ DeniedBy() string }
		if !errorsAs(err, &d) || d.DeniedBy() != c.want {
			t.Errorf("%s: %v, want %q", c.tool, err, c.want)
		}
	}
	ended("")
	data, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 2 || !strings.Contains(string(data), `"denied_by":"policy: tools.deny delete_*"`) {
		t.Fatalf("audit log:\n%s", data)
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// principalOf is a client (peer.Origin) acting for p, as a session and a
// call of the stateless pool do; nil: nobody.
type principalOf struct{ p *auth.Principal }

func (o principalOf) Caller() *auth.Principal { return o.p }

// The caller of a message is the principal its Origin says (a session, or
// a pool's call); the server's notifications, which have no Origin,
// concern the connection's own (self): a resource update reaches a
// session that may read the resource, and is dropped for one that may
// not; on a connection without one (a pool's child) it goes on to the
// pool, which asks readable for each subscription's caller, unless nobody
// may read the resource.
func TestGuardsCallers(t *testing.T) {
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  scopes:\n    send: [mail:send]\nresources:\n  deny: [\"test://hidden\"]\n  scopes:\n    \"test://watched-*\": [watch]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Messages carry principals only when the edge authenticates.
	g := guardsFor(t, &ServerOptions{Policy: loadPolicy(t, policyFile)}, true)
	with := principalOf{&auth.Principal{Subject: "alice", Scopes: []string{"mail:send", "watch"}}}
	without := principalOf{&auth.Principal{Subject: "bob"}}
	const update = `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://watched-resource"}}`
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send"}}`
	for _, c := range []struct {
		name      string
		self      peer.Origin
		forwarded bool
	}{
		{"a session with the scope", with, true},
		{"a session without", without, false},
		{"a pool's child", nil, true},
	} {
		intercept, _ := g.chain("c", c.self, slog.New(slog.DiscardHandler), nil, nil)
		forwarded := false
		h := intercept(func(m *peer.Message) error {
			forwarded = forwarded || m.Method == "notifications/resources/updated"
			return nil
		})
		m := message(t, peer.FromChild, "notifications/resources/updated", update)
		m.Origin = nil
		if err := h(m); err != nil || forwarded != c.forwarded {
			t.Errorf("%s: forwarded %v (%v), want %v", c.name, forwarded, err, c.forwarded)
		}
		forwarded = false
		m = message(t, peer.FromChild, "notifications/resources/updated", `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://hidden"}}`)
		m.Origin = nil
		if err := h(m); err != nil || forwarded {
			t.Errorf("%s: an update of a denied resource was forwarded (%v)", c.name, err)
		}
		// Requests are the caller's own, whatever the connection's.
		for _, o := range []struct {
			origin peer.Origin
			ok     bool
		}{{with, true}, {without, false}, {principalOf{}, false}} {
			m := message(t, peer.ToChild, "tools/call", call)
			m.Origin = o.origin
			if err := h(m); (err == nil) != o.ok {
				t.Errorf("%s: a call from %v: %v, want allowed %v", c.name, o.origin, err, o.ok)
			}
		}
	}
	// The pool's question, for each subscription: its call's caller.
	for _, r := range []struct {
		caller *policy.Caller
		uri    string
		ok     bool
	}{{with.p, "test://watched-resource", true}, {without.p, "test://watched-resource", false}, {nil, "test://watched-resource", false},
		{without.p, "test://static-text", true}, {with.p, "test://hidden", false}} {
		if got := g.readable(r.caller, r.uri); got != r.ok {
			t.Errorf("readable(%v, %s) = %v, want %v", r.caller, r.uri, got, r.ok)
		}
	}
}

// Asking who the caller of a message is allocates nothing: the policy
// and the audit log read the principal the edge established, typed
// (peer.Message.Caller), not a copy made per message.
func TestGuardsCallerAllocatesNothing(t *testing.T) {
	p := &auth.Principal{Subject: "alice", ClientID: "app", Scopes: []string{"mail:send"}}
	m := &peer.Message{Origin: principalOf{p}}
	if allocs := testing.AllocsPerRun(100, func() { callerSink = m.Caller() }); allocs != 0 {
		t.Fatalf("%v allocations per message to say who its caller is, want 0", allocs)
	}
	if callerSink.Subject != "alice" || callerSink.ClientID != "app" || !callerSink.HasScopes("mail:send") {
		t.Fatalf("caller %+v, want the principal's subject, client and scopes", callerSink)
	}
	for _, m := range []*peer.Message{{Origin: principalOf{}}, {}} {
		if m.Caller() != nil {
			t.Fatal("a caller for an origin without a principal")
		}
	}
}

var callerSink *policy.Caller

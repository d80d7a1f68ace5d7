package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`
tools:
  deny: [delete_*]
  scopes:
    send_email: [mail:send]
    "admin_*": [admin, audit:read]
prompts:
  allow: [test_*]
resources:
  allow: "test://*"
  deny: ["test://static-binary"]
`))
	if err != nil {
		t.Fatal(err)
	}
	reader := &Caller{Scopes: []string{"mail:send"}}
	for _, c := range []struct {
		r       *rules
		name    string
		caller  *Caller
		rule    string
		missing []string
	}{
		{&p.tools, "read_file", nil, "", nil},
		{&p.tools, "delete_file", reader, "tools.deny delete_*", nil},
		{&p.tools, "send_email", nil, "tools.scopes send_email", []string{"mail:send"}},
		{&p.tools, "send_email", reader, "", nil},
		{&p.tools, "admin_x", reader, "tools.scopes admin_*", []string{"admin", "audit:read"}},
		{&p.prompts, "test_simple_prompt", nil, "", nil},
		{&p.prompts, "other", nil, "prompts.allow (no pattern matches)", nil},
		{&p.resources, "test://static-text", nil, "", nil},
		{&p.resources, "test://static-binary", nil, "resources.deny test://static-binary", nil},
		{&p.resources, "file:///etc/passwd", nil, "resources.allow (no pattern matches)", nil},
	} {
		d := c.r.decide(c.name, c.caller)
		switch {
		case c.rule == "" && d != nil:
			t.Errorf("%s %s refused: %v", c.r.kind, c.name, d)
		case c.rule != "" && (d == nil || d.Rule != c.rule || !reflect.DeepEqual(d.Missing, c.missing)):
			t.Errorf("%s %s: got %+v, want rule %q missing %v", c.r.kind, c.name, d, c.rule, c.missing)
		}
	}
	if got := p.Scopes(); !reflect.DeepEqual(got, []string{"admin", "audit:read", "mail:send"}) {
		t.Errorf("Scopes() = %v", got)
	}
}

// A bad policy file is refused with its name, the key, the line and the
// problem.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"", "policy file p.yaml is empty"},
		{"tools: [a", "policy file p.yaml: not valid YAML"},
		{"- a", "policy file p.yaml: (top level) (line 1): want a mapping"},
		{"tool:\n  deny: [a]", "policy file p.yaml: tool (line 1): unknown key: want tools, prompts or resources"},
		{"tools:\n  alow: [a]", "policy file p.yaml: tools.alow (line 2): unknown key: want allow, deny or scopes"},
		{"tools:\n  deny: {a: b}", "policy file p.yaml: tools.deny (line 2): want a list of patterns"},
		{"tools:\n  deny: ['x\\']", `policy file p.yaml: tools.deny[0] (line 2): pattern ends with a lone \`},
		{"tools:\n  deny: ['a', '']", "policy file p.yaml: tools.deny[1] (line 2): empty pattern"},
		{"tools:\n  allow: []", "policy file p.yaml: tools.allow (line 2): empty"},
		{"tools:\n  scopes: [a]", "policy file p.yaml: tools.scopes (line 2): want a mapping of pattern"},
		{"tools:\n  scopes:\n    send: []", `policy file p.yaml: tools.scopes["send"] (line 3): want a non-empty list of scopes`},
		{"tools:\n  scopes:\n    send: ['a b']", `policy file p.yaml: tools.scopes["send"] (line 3): "a b" is not a valid OAuth scope`},
		{"tools: {}\ntools: {}", "policy file p.yaml: tools (line 2): given twice"},
		{"resources: 3", "policy file p.yaml: resources (line 1): want a mapping with allow, deny or scopes"},
	} {
		_, err := Parse("p.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "ok.yaml")
	if err := os.WriteFile(path, []byte("tools:\n  deny: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := Load(path); err != nil || p.File() != path {
		t.Errorf("Load: %v", err)
	}
}

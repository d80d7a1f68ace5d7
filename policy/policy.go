// Package policy decides what a caller may use of a server: which tools,
// prompts and resources it sees in the lists and may call, read or get,
// and which scopes each one needs. It works at peer's interception point
// (Policy.Interceptor), so every front end and every era gets it.
//
// A policy file is YAML:
//
//	tools:
//	  allow: [search_*, get_*]      # if given, only these exist for callers
//	  deny: [delete_*]              # never these (deny wins over allow)
//	  scopes:
//	    send_email: [mail:send]     # a call needs every scope listed
//	prompts:
//	  deny: [internal_*]
//	resources:                      # patterns of URIs (and of URI templates)
//	  allow: ["file:///srv/docs/*"]
//	  scopes:
//	    "file:///srv/docs/hr/*": [hr:read]
//
// Patterns are globs (see glob). What a caller may not use is taken out of
// tools/list, prompts/list, resources/list and resources/templates/list
// (the result is rewritten; nothing else of it is decoded), and a request
// for it is answered with a JSON-RPC error without reaching the server. A
// request that lacks a scope gets CodeInsufficientScope and the scopes in
// the error's data: the HTTP edge can check the same thing first
// (Policy.Check) and answer 403 insufficient_scope, so that an OAuth
// client steps up. Denials are logged; the audit log records them through
// the error's DeniedBy.
//
// Who the caller is comes typed with each message (peer.Message.Caller:
// the principal the HTTP edge established for the message's client), and
// for the server's notifications, which have no client, from
// Options.Audience; this package does not know how the edge
// authenticates. Without a caller, a caller has no scopes: whatever needs
// one is hidden.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// A Policy is a parsed policy file. It is immutable and safe for
// concurrent use.
type Policy struct {
	file      string
	tools     rules
	prompts   rules
	resources rules
}

// rules are the rules for one kind of thing (tools, prompts or resources).
type rules struct {
	kind   string // "tools", "prompts", "resources": the key in the file
	allow  []glob
	deny   []glob
	scopes []scopeRule
	open   *openNames
}

type scopeRule struct {
	pattern glob
	scopes  []string
}

// Load reads and checks a policy file. Its errors name the file, the key
// and the line, and say what is wrong.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the policy file: %w", err)
	}
	return Parse(path, data)
}

// Parse checks the policy in data; file names it in errors.
func Parse(file string, data []byte) (*Policy, error) {
	p := &Policy{file: file, tools: rules{kind: "tools", open: &openNames{}}, prompts: rules{kind: "prompts", open: &openNames{}},
		resources: rules{kind: "resources"}}
	fail := func(n *yaml.Node, key, format string, args ...any) error {
		line := ""
		if n != nil {
			line = fmt.Sprintf(" (line %d)", n.Line)
		}
		return fmt.Errorf("policy file %s: %s%s: %s", file, key, line, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("policy file %s is empty: give at least one of tools, prompts or resources", file)
		}
		return nil, fmt.Errorf("policy file %s: not valid YAML: %w", file, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root, "(top level)", "want a mapping with tools, prompts or resources")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		var r *rules
		switch k.Value {
		case "tools":
			r = &p.tools
		case "prompts":
			r = &p.prompts
		case "resources":
			r = &p.resources
		default:
			return nil, fail(k, k.Value, "unknown key: want tools, prompts or resources")
		}
		if seen[k.Value] {
			return nil, fail(k, k.Value, "given twice")
		}
		seen[k.Value] = true
		if err := r.parse(v, fail); err != nil {
			return nil, err
		}
	}
	return p, nil
}

type failFunc func(n *yaml.Node, key, format string, args ...any) error

func (r *rules) parse(n *yaml.Node, fail failFunc) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fail(n, r.kind, "want a mapping with allow, deny or scopes")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := r.kind + "." + k.Value
		switch k.Value {
		case "allow", "deny":
			gs, err := parseGlobs(v, key, fail)
			if err != nil {
				return err
			}
			if k.Value == "allow" {
				if len(gs) == 0 {
					return fail(v, key, "empty: an empty allow list would hide everything; remove the key to allow all, or deny what you mean to hide")
				}
				r.allow = gs
			} else {
				r.deny = gs
			}
		case "scopes":
			if v.Kind != yaml.MappingNode {
				return fail(v, key, "want a mapping of pattern to a list of scopes, as in send_email: [mail:send]")
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				pk, pv := v.Content[j], v.Content[j+1]
				skey := fmt.Sprintf("%s[%q]", key, pk.Value)
				g, err := parseGlob(pk.Value)
				if err != nil {
					return fail(pk, skey, "%v", err)
				}
				scopes, err := scalars(pv)
				if err != nil || len(scopes) == 0 {
					return fail(pv, skey, "want a non-empty list of scopes, as in [mail:send]")
				}
				for _, s := range scopes {
					// RFC 6749 section 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
					if !validScope(s) {
						return fail(pv, skey, "%q is not a valid OAuth scope (printable ASCII without spaces, quotes or backslashes)", s)
					}
				}
				r.scopes = append(r.scopes, scopeRule{pattern: g, scopes: scopes})
			}
		default:
			return fail(k, key, "unknown key: want allow, deny or scopes")
		}
	}
	return nil
}

func parseGlobs(n *yaml.Node, key string, fail failFunc) ([]glob, error) {
	ps, err := scalars(n)
	if err != nil {
		return nil, fail(n, key, "want a list of patterns, as in [delete_*]")
	}
	gs := make([]glob, 0, len(ps))
	for i, p := range ps {
		g, err := parseGlob(p)
		if err != nil {
			return nil, fail(n, fmt.Sprintf("%s[%d]", key, i), "%v", err)
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// scalars reads a list of strings; a single string counts as a list of one.
func scalars(n *yaml.Node) ([]string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return []string{n.Value}, nil
	case yaml.SequenceNode:
		out := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return nil, errors.New("not a list of strings")
			}
			out = append(out, c.Value)
		}
		return out, nil
	}
	return nil, errors.New("not a list of strings")
}

func validScope(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// File is the path the policy was read from.
func (p *Policy) File() string { return p.file }

// Scopes returns every scope the policy asks for, sorted: what the
// protected resource metadata lists as scopes_supported.
func (p *Policy) Scopes() []string {
	var out []string
	for _, r := range []*rules{&p.tools, &p.prompts, &p.resources} {
		for _, s := range r.scopes {
			out = append(out, s.scopes...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// A Caller is who sends a request: the principal the HTTP edge
// established (its Subject, ClientID and Scopes are what the policy reads).
// The same type from the edge down, so asking who a caller is costs no
// conversion and no allocation per message.
type Caller = auth.Principal

// openToAll reports whether every caller may use the thing called name:
// no pattern of allow, deny or scopes stands in the way, which is when
// decide returns nil whoever the caller.
func (r *rules) openToAll(name string) bool {
	// A caller without scopes is refused whatever a scope rule asks for
	// (the parser refuses a rule that asks for none).
	return r.decide(name, nil) == nil
}

// openNames remembers, by a name as a request wrote it (params.name with
// its quotes and escapes), whether the rules let every caller use it:
// the calls of a tool, over and over, then cost a map lookup instead of
// decoding the name, asking who the caller is and matching every pattern
// (about 800 instructions a call). Names that decode alike but
// are written differently have entries of their own, each decided from
// the decoded name.
type openNames struct {
	mu    sync.RWMutex
	names map[string]bool
}

// The bounds of openNames: at most maxOpenNames names, each written in at
// most maxOpenName bytes (longer ones are decided every time); it is
// emptied when full.
const (
	maxOpenNames = 1024
	maxOpenName  = 256
)

// openToAll reports whether every caller may use the thing whose name is
// written raw (a JSON string as written), as rules.openToAll.
func (o *openNames) openToAll(r *rules, raw []byte) bool {
	if o == nil {
		return false // a Policy not made by Parse
	}
	o.mu.RLock()
	open, ok := o.names[string(raw)]
	o.mu.RUnlock()
	if ok {
		return open
	}
	name, _ := jsonrpc.StringValue(raw)
	open = r.openToAll(name)
	if len(raw) <= maxOpenName {
		o.mu.Lock()
		if o.names == nil || len(o.names) >= maxOpenNames {
			o.names = make(map[string]bool)
		}
		o.names[string(raw)] = open
		o.mu.Unlock()
	}
	return open
}

// decide says whether caller may use the thing called name. It returns
// nil, or why not.
func (r *rules) decide(name string, caller *Caller) *Denial {
	if len(r.allow) > 0 && !slices.ContainsFunc(r.allow, func(g glob) bool { return g.match(name) }) {
		return &Denial{Kind: r.kind, Name: name, Rule: r.kind + ".allow (no pattern matches)"}
	}
	for _, g := range r.deny {
		if g.match(name) {
			return &Denial{Kind: r.kind, Name: name, Rule: r.kind + ".deny " + g.pattern}
		}
	}
	var missing, rules []string
	for _, s := range r.scopes {
		if !s.pattern.match(name) {
			continue
		}
		for _, want := range s.scopes {
			if (caller == nil || !slices.Contains(caller.Scopes, want)) && !slices.Contains(missing, want) {
				missing = append(missing, want)
				rules = append(rules, s.pattern.pattern)
			}
		}
	}
	if len(missing) > 0 {
		return &Denial{Kind: r.kind, Name: name, Rule: r.kind + ".scopes " + strings.Join(slices.Compact(rules), ","), Missing: missing}
	}
	return nil
}

package policy

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/internal/mcplist"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// CodeInsufficientScope is the JSON-RPC error code of a request refused
// because its caller lacks a scope. MCP defines no code for this, and no
// code of JSON-RPC's server-error range -32000..-32099 is free for it:
//
//   - 2026-07-28 (basic/index, "Error Codes"): "-32000 to -32019 — legacy.
//     ... New codes MUST NOT be allocated in this sub-range, and new
//     implementations SHOULD NOT use codes from this sub-range at all";
//     "-32020 to -32099 — reserved for the MCP specification. ...
//     Implementations MUST NOT emit any code from this sub-range that is
//     not defined by this specification".
//   - The SDKs read legacy codes as their own: the Go SDK v1.8 takes -32003
//     for ErrClientClosing and -32004 for ErrServerClosing (both become
//     mcp.ErrConnectionClosed, on which agents reconnect), -32005 for a
//     transport rejection and -32001 for an unknown error; the TypeScript
//     and Python SDKs take -32000 (connection closed) and -32001 (request
//     timeout); -32002 was resource not found.
//
// So the code lies outside -32768..-32000, in the space JSON-RPC 2.0
// leaves to applications ("The remainder of the space is available for
// application defined errors"), where no SDK gives a code a meaning: -31403
// (403, as the HTTP status of insufficient_scope). It was -32003, inside that range.
//
// The error's data is {"error": "insufficient_scope", "scope": "a b",
// "missingScopes": [...]}, the names of RFC 6750's WWW-Authenticate
// parameters, so that an HTTP edge that sees the answer (or calls Check
// first) can answer 403 with error="insufficient_scope" and scope="a b".
const CodeInsufficientScope = -31403

// CodeResourceNotFound is MCP's code for a resource that does not exist
// in the 2025 revisions ("Resource not found: -32002",
// server/resources#error-handling): a resource the policy hides gets it
// there, as a tool or prompt it hides gets -32602 as an unknown one would.
// Revision 2026-07-28 retired it: a hidden resource gets -32602 there
// (see ModernRevision).
const CodeResourceNotFound = -32002

// ModernRevision is the first protocol revision in which a resource that
// does not exist is answered with -32602, not CodeResourceNotFound:
// "Implementations of this protocol version MUST NOT emit these codes:
// -32002 — resource not found (2025-11-25 and earlier; replaced by
// -32602)" (2026-07-28, basic/index, Error Codes); "If the requested
// resource does not exist, servers MUST return a JSON-RPC error with code
// -32602 (Invalid Params)" (server/resources, Error Handling).
const ModernRevision = "2026-07-28"

// A Denial is why the policy refuses a request. It is the error the
// interceptor refuses with: errors.As finds the *jsonrpc.Error the client
// gets in it, and DeniedBy names the rule, for the audit log.
type Denial struct {
	Kind string // "tools", "prompts" or "resources"
	Name string // the tool or prompt name, or the resource URI
	// Rule is the rule that refused: "tools.deny delete_*", "tools.allow
	// (no pattern matches)", "tools.scopes send_*".
	Rule string
	// Missing are the scopes the caller lacks; nil when the thing is
	// denied whatever the scopes.
	Missing []string

	rpc *jsonrpc.Error
	// modern: the caller speaks ModernRevision or later, where a hidden
	// resource gets -32602 (set by the interceptor, from
	// Options.Revision).
	modern bool
}

func (d *Denial) Error() string {
	return fmt.Sprintf("%s %q refused by the bridge's policy (%s)", singular(d.Kind), d.Name, d.Rule)
}

// DeniedBy names the rule that refused, for the audit log.
func (d *Denial) DeniedBy() string { return "policy: " + d.Rule }

// Unwrap returns the JSON-RPC error the client is answered with.
func (d *Denial) Unwrap() error { return d.RPCError() }

// InsufficientScope reports whether the caller could be allowed with more
// scopes: the HTTP edge answers 403 with error="insufficient_scope" and
// scope set to strings.Join(d.Missing, " ").
func (d *Denial) InsufficientScope() bool { return len(d.Missing) > 0 }

// RPCError is the JSON-RPC error the client is answered with.
func (d *Denial) RPCError() *jsonrpc.Error {
	if d.rpc != nil {
		return d.rpc
	}
	what := fmt.Sprintf("%s %q", singular(d.Kind), d.Name)
	switch {
	case len(d.Missing) > 0:
		d.rpc = &jsonrpc.Error{
			Code: CodeInsufficientScope,
			Message: fmt.Sprintf("insufficient scope: %s needs the scope %s, which the caller's token was not granted",
				what, strings.Join(d.Missing, " and ")),
			Data: map[string]any{"error": "insufficient_scope", "scope": strings.Join(d.Missing, " "), "missingScopes": d.Missing},
		}
	case d.Kind == "resources" && !d.modern:
		d.rpc = &jsonrpc.Error{Code: CodeResourceNotFound, Message: what + " is not available: the bridge's policy denies it"}
	default:
		d.rpc = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: what + " is not available: the bridge's policy denies it"}
	}
	return d.rpc
}

func singular(kind string) string { return strings.TrimSuffix(kind, "s") }

// Check decides a request of caller before it reaches the server: nil if
// it may go on, else why not. Requests that name no tool, prompt or
// resource (initialize, the lists, ping, ...) always may; so do responses
// and notifications. The interceptor calls it for every request; the HTTP
// edge may call it first, to answer a missing scope with 403. A
// subscriptions/listen request is not refused: the interceptor takes the
// resources its caller may not read out of it (see Interceptor).
func (p *Policy) Check(caller *Caller, msg jsonrpc.Message) *Denial {
	if msg.Env.Kind != jsonrpc.KindRequest {
		return nil
	}
	switch msg.Env.Method {
	case "tools/call":
		if name := msg.Env.Name(msg.Data); name != "" {
			return p.tools.decide(name, caller)
		}
	case "prompts/get":
		if name := msg.Env.Name(msg.Data); name != "" {
			return p.prompts.decide(name, caller)
		}
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		if uri := paramString(msg.Data, "uri"); uri != "" {
			return p.resources.decide(uri, caller)
		}
	case "completion/complete":
		// Completions name a prompt or a resource template: what is hidden
		// must not be probed through them either.
		params, _ := jsonrpc.Lookup(msg.Data, "params")
		ref, _ := jsonrpc.Lookup(params, "ref")
		switch member(ref, "type") {
		case "ref/prompt":
			if name := member(ref, "name"); name != "" {
				return p.prompts.decide(name, caller)
			}
		case "ref/resource":
			if uri := member(ref, "uri"); uri != "" {
				return p.resources.decide(uri, caller)
			}
		}
	}
	return nil
}

// openToAll reports whether msg is a tools/call or prompts/get of what
// every caller may use (see openNames): Check then allows it whoever the
// caller. False says nothing.
func (p *Policy) openToAll(msg *peer.Message) bool {
	var r *rules
	switch msg.Env.Method {
	case "tools/call":
		r = &p.tools
	case "prompts/get":
		r = &p.prompts
	default:
		return false
	}
	if msg.Env.NameAt.IsZero() {
		return false
	}
	return r.open.openToAll(r, msg.Env.NameAt.In(msg.Data))
}

// Readable decides whether caller may read the resource uri, subscribe to
// it and hear of its updates: nil, or why not. It is what Check decides
// for resources/read; the stateless pool asks it for each caller a
// resource update would go to (see Options.UpdatesPerCaller).
func (p *Policy) Readable(caller *Caller, uri string) *Denial {
	return p.resources.decide(uri, caller)
}

// Listed decides whether caller sees the item called name (a tool's or
// prompt's name, a resource's URI or a template's uriTemplate) of kind
// ("tools", "prompts" or "resources") in a list: nil, or why not. It is
// what the interceptor decides of each item of a list answer, for those
// that merge lists of several servers and filter each server's items
// with that server's policy (an aggregate's).
func (p *Policy) Listed(kind, name string, caller *Caller) *Denial {
	return p.rulesOf(kind).decide(name, caller)
}

func paramString(data []byte, name string) string {
	params, _ := jsonrpc.Lookup(data, "params")
	return member(params, name)
}

// member returns the string member name of the JSON object obj, or "".
func member(obj []byte, name string) string {
	if v, ok := jsonrpc.Lookup(obj, name); ok {
		s, _ := jsonrpc.StringValue(v)
		return s
	}
	return ""
}

// Options configure a policy's interceptor.
type Options struct {
	// Audience is whom the server's messages without an Origin go to, when
	// one client gets them all: a 2025 session. The policy asks its
	// caller for notifications/resources/updated, which it hides from a
	// caller that may not read the resource. Nil when they may go to
	// several clients (see UpdatesPerCaller): a caller without scopes.
	// Every other message's caller is its own (peer.Message.Caller: the
	// client a request comes from, or a response goes to; nil, a caller
	// without scopes).
	Audience peer.Origin
	// UpdatesPerCaller says that the connection's notifications go to
	// several callers and that whoever delivers them asks Readable for
	// each (the stateless pool's children, pool.Options.Readable): the
	// interceptor then passes the updates of a resource that a scope
	// gates, and still drops those that no caller may read (denied, or not
	// allowed). Without it, an update goes on only if Audience's caller may
	// read its resource.
	UpdatesPerCaller bool
	// Logger gets the denials (at warn) and what the lists hid (at debug).
	// Nil means slog.Default().
	Logger *slog.Logger
	// Revision is the protocol revision the connection's clients speak
	// when the connection serves one revision only: ModernRevision (or a
	// later one) for the stateless pool's children, whose hidden
	// resources then get -32602 (see ModernRevision). Empty: a 2025
	// revision, -32002.
	Revision string
}

// list is a list result the policy filters: the array member of the
// result and the member of each item that names it.
type list struct{ array, key, kind string }

// listOf returns the list result of method, if the policy filters it (a
// switch, not a map: every answer asks).
func listOf(method string) (list, bool) {
	switch method {
	case "tools/list":
		return list{"tools", "name", "tools"}, true
	case "prompts/list":
		return list{"prompts", "name", "prompts"}, true
	case "resources/list":
		return list{"resources", "uri", "resources"}, true
	case "resources/templates/list":
		return list{"resourceTemplates", "uriTemplate", "resources"}, true
	}
	return list{}, false
}

func (p *Policy) rulesOf(kind string) *rules {
	switch kind {
	case "tools":
		return &p.tools
	case "prompts":
		return &p.prompts
	}
	return &p.resources
}

// Interceptor returns the interceptor that applies the policy: it refuses
// client requests Check refuses, and takes out of the answers to the lists
// what their caller may not use. The bridge's own requests pass.
func (p *Policy) Interceptor(opts *Options) peer.Interceptor {
	in := &interceptor{p: p}
	if opts != nil {
		in.o = *opts
	}
	if in.o.Logger == nil {
		in.o.Logger = slog.Default()
	}
	// The closure only tells the cases apart: what each does is in a
	// method, so that its frame, which stays on the stack under the rest
	// of the chain, is small.
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if m.Own {
				return next(m)
			}
			switch {
			case m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindRequest && m.Method == "subscriptions/listen":
				// "The notifications field in the acknowledgment reflects
				// the subset the server agreed to honor"
				// (basic/patterns/subscriptions): a resource the caller
				// may not read is taken out of the request, so the server
				// acknowledges the others without it, as if it did not
				// honor that one. Refusing the whole stream would cost the
				// caller its other notifications and tell it that the
				// resource is there.
				if err := p.filterListen(m, m.Caller(), in.o.Logger); err != nil {
					return err
				}
			case m.Dir == peer.ToChild && m.Env.Kind == jsonrpc.KindRequest:
				// Check would allow what is open to all, whoever the caller.
				if !p.openToAll(m) {
					if err := in.check(m); err != nil {
						return err
					}
				}
			case m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindNotification && m.Method == "notifications/resources/updated":
				if in.hidesUpdate(m) {
					return nil
				}
			case m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindResponse && !m.Env.IsError:
				if l, ok := listOf(m.Method); ok {
					if err := in.filterList(m, l); err != nil {
						return err
					}
				}
			}
			return next(m)
		}
	}
}

// interceptor is the policy applied to one chain.
type interceptor struct {
	p *Policy
	o Options
}

// audience is the caller of the server's messages without an Origin
// (Options.Audience), or nil.
func (in *interceptor) audience() *Caller {
	if in.o.Audience == nil {
		return nil
	}
	return in.o.Audience.Caller()
}

// check returns the Denial of a client's request, logged, or nil.
func (in *interceptor) check(m *peer.Message) error {
	c := m.Caller()
	d := in.p.Check(c, m.Message)
	if d == nil {
		return nil
	}
	// Revisions are dates: their order is that of their strings.
	d.modern = in.o.Revision >= ModernRevision
	args := []any{"kind", singular(d.Kind), "name", d.Name, "rule", d.Rule}
	if len(d.Missing) > 0 {
		args = append(args, "missing_scopes", strings.Join(d.Missing, " "))
	}
	if c != nil {
		args = append(args, "sub", c.Subject, "client_id", c.ClientID)
	}
	in.o.Logger.Warn("the policy refused a request", args...)
	return d
}

// hidesUpdate reports whether a notifications/resources/updated is
// dropped. What a caller may not read it may not hear about: the URI
// alone tells that the resource exists and changed. The notification has
// no Origin: Audience says whom the connection's notifications go to, if
// one client gets them. With UpdatesPerCaller, whoever delivers the update asks for each
// caller; here only what nobody may read is dropped.
func (in *interceptor) hidesUpdate(m *peer.Message) bool {
	uri := paramString(m.Data, "uri")
	if uri == "" {
		return false
	}
	d := in.p.resources.decide(uri, in.audience())
	if d == nil || in.o.UpdatesPerCaller && d.InsufficientScope() {
		return false
	}
	in.o.Logger.Debug("the policy hid a resource update", "uri", uri, "rule", d.Rule)
	return true
}

// filterList takes out of a list result, l, what its caller may not use.
func (in *interceptor) filterList(m *peer.Message, l list) error {
	r := in.p.rulesOf(l.kind)
	c := m.Caller()
	out, hidden, err := mcplist.Filter(m.Data, l.array, l.key, func(name string, _ []byte) bool { return r.decide(name, c) == nil })
	if err != nil {
		// A malformed list is the server's bug; passing it
		// unfiltered could show what the policy hides.
		in.o.Logger.Warn("the policy cannot read a list from the MCP server: the client gets an error", "method", m.Method, "err", err)
		out = (&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the bridge could not apply its policy to the MCP server's " + m.Method + " answer: " + err.Error()}).Response(m.Env.IDAt.In(m.Data))
	} else if len(hidden) == 0 {
		return nil
	} else {
		in.o.Logger.Debug("the policy hid items of a list", "method", m.Method, "hidden", hidden)
	}
	return m.Replace(out)
}

// filterListen takes out of a subscriptions/listen request the resources
// caller may not read, logging each as a denial.
func (p *Policy) filterListen(m *peer.Message, c *Caller, logger *slog.Logger) error {
	out, dropped, err := mcplist.FilterSubscriptions(m.Data, func(uri string) bool {
		d := p.resources.decide(uri, c)
		if d == nil {
			return true
		}
		args := []any{"kind", "resource", "name", uri, "rule", d.Rule}
		if len(d.Missing) > 0 {
			args = append(args, "missing_scopes", strings.Join(d.Missing, " "))
		}
		if c != nil {
			args = append(args, "sub", c.Subject, "client_id", c.ClientID)
		}
		logger.Warn("the policy left a resource out of a subscription", args...)
		return false
	})
	if err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid params: " + err.Error()}
	}
	if len(dropped) == 0 {
		return nil
	}
	return m.Replace(out)
}

package pin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/mcp-bridge/mcp-bridge/internal/mcplist"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Action is what a violation does to the session besides dropping the item.
type Action string

const (
	// Drop drops the item from its list and refuses its use.
	Drop Action = "drop"
	// EndSession also ends the session: its server changed under it.
	EndSession Action = "end-session"
)

// ErrAction is what Action.UnmarshalText returns for text that is not an
// action.
var ErrAction = errors.New("want drop or end-session")

// MarshalText writes the action as it is read.
func (a Action) MarshalText() ([]byte, error) { return []byte(a), nil }

// UnmarshalText reads drop or end-session; other text is refused with
// ErrAction (the caller names the option and the text).
func (a *Action) UnmarshalText(text []byte) error {
	switch v := Action(text); v {
	case Drop, EndSession:
		*a = v
		return nil
	}
	return ErrAction
}

// Options configure an Enforcer. Every zero value means the documented
// default.
type Options struct {
	// Lock is what the server must offer. Nil means no lock: only the
	// inspection applies.
	Lock *Lock
	// LockFile names the lock in messages.
	LockFile string
	// OnViolation: Drop (the zero value) or EndSession.
	OnViolation Action
	// Inspection of every item listed (see Inspection; its zero value
	// refuses hidden Unicode and descriptions over
	// DefaultMaxDescriptionBytes).
	Inspection Inspection
}

// An Enforcer holds sessions to a lock and to the inspection. It is
// immutable and safe for concurrent use; each connection gets its own
// Interceptor.
type Enforcer struct {
	o Options

	// verdicts caches the problem of each item seen ("" for none), by the
	// SHA-256 of the item as written: a verdict depends on nothing else,
	// and every session lists the same tools, where canonicalizing and
	// inspecting them costs some 30 µs each.
	mu       sync.Mutex
	verdicts map[[32]byte]string

	// templates are the lock's resource templates, compiled for matching
	// the URIs of reads; a template that does not parse matches nothing.
	templates []template

	// validKeys: every name of a tool and prompt of the lock is valid
	// UTF-8 (as in any lock read from a file), for conn.passes.
	validKeys bool

	// notPinned is the verdict of an item the lock does not pin.
	notPinned string
}

type template struct {
	raw string
	re  *regexp.Regexp
}

// maxVerdicts bounds the cache of verdicts; it is emptied when full.
const maxVerdicts = 4096

// New returns an Enforcer.
func New(opts *Options) *Enforcer {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.OnViolation == "" {
		o.OnViolation = Drop
	}
	e := &Enforcer{o: o, verdicts: map[[32]byte]string{}, notPinned: "not in the pin file " + o.LockFile}
	if o.Lock != nil {
		e.validKeys = validNames(o.Lock.Tools) && validNames(o.Lock.Prompts)
		for _, raw := range slices.Sorted(maps.Keys(o.Lock.ResourceTemplates)) {
			if re, err := matcher(raw); err == nil {
				e.templates = append(e.templates, template{raw, re})
			}
		}
	}
	return e
}

// validNames reports whether every name of items is valid UTF-8.
func validNames(items map[string]string) bool {
	for name := range items {
		if !utf8.ValidString(name) {
			return false
		}
	}
	return true
}

// verdict returns the problem of an item a list shows, "" if none.
func (e *Enforcer) verdict(k *Kind, name string, item []byte) string {
	key := sha256.Sum256(item)
	e.mu.Lock()
	p, ok := e.verdicts[key]
	e.mu.Unlock()
	if ok {
		return p
	}
	p = e.o.Inspection.inspect(k, item)
	if p == "" && e.o.Lock != nil {
		want, ok := e.o.Lock.pinned(k, name)
		if !ok {
			p = e.notPinned
		} else if got, err := Digest(k, item); err != nil {
			p = err.Error()
		} else if got != want {
			p = fmt.Sprintf("changed since it was pinned in %s (digest %s, pinned %s)", e.o.LockFile, got, want)
		}
	}
	e.mu.Lock()
	if len(e.verdicts) >= maxVerdicts {
		clear(e.verdicts)
	}
	e.verdicts[key] = p
	e.mu.Unlock()
	return p
}

// A Violation is an item a server offered that the enforcer refused.
type Violation struct {
	Kind    string // "tool", "prompt", "resource", "resource template"
	Name    string
	Problem string // "not in the pin file mcp-lock.json", "changed since ...", "its description holds ..."
}

// Hooks connect an Interceptor to its session.
type Hooks struct {
	// Alert is told of each item a list offered and the enforcer dropped
	// (for the audit log). Nil: none.
	Alert func(origin peer.Origin, v Violation)
	// End ends the session, with OnViolation EndSession. It is called at
	// most once, on the connection's reader goroutine: it must not block
	// (start the ending, do not wait for it). Nil: the session is not ended.
	End func(reason error)
	// Logger gets the alerts, at warn. Nil means slog.Default().
	Logger *slog.Logger
	// Call, if set, sends a request of the bridge's own to the server
	// (peer.Conn.Call). When the server says its tools or prompts changed
	// (notifications/tools/list_changed, notifications/prompts/list_changed),
	// the enforcer then lists them itself, at once, so that a changed tool
	// is refused and alerted even if no client lists again. It is called on
	// a goroutine of the enforcer's, which returns when the call does (at
	// the latest when the connection ends). Nil: only clients' lists are
	// checked.
	Call CallFunc
	// Revision is the protocol revision the connection's clients speak
	// when it serves one revision only: ModernRevision (or later) for the
	// stateless pool's children, whose refused resources then get -32602.
	// Empty: a 2025 revision, -32002.
	Revision string
}

// ModernRevision is the first revision in which a resource that does not
// exist is answered with -32602, never -32002: "Implementations of this
// protocol version MUST NOT emit these codes: -32002 — resource not found
// (2025-11-25 and earlier; replaced by -32602)" (2026-07-28, basic/index,
// Error Codes).
const ModernRevision = "2026-07-28"

// A Refusal is the error a request for a refused item is refused with.
// errors.As finds the *jsonrpc.Error its client gets (-32602, as for an
// unknown tool or prompt); DeniedBy says why, for the audit log.
type Refusal struct {
	Violation
	// modern: the client speaks ModernRevision or later (Hooks.Revision).
	modern bool
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s %q refused: %s", r.Kind, r.Name, r.Problem)
}

// DeniedBy says why, for the audit log.
func (r *Refusal) DeniedBy() string { return "pin: " + r.Problem }

// Unwrap returns the JSON-RPC error the client is answered with: for a
// resource, what one that does not exist gets: MCP's "Resource not found"
// (-32002) in the 2025 revisions, -32602 from ModernRevision on.
func (r *Refusal) Unwrap() error {
	code := jsonrpc.CodeInvalidParams
	if r.Kind == kindResource.Name && !r.modern {
		code = codeResourceNotFound
	}
	return &jsonrpc.Error{Code: code,
		Message: fmt.Sprintf("%s %q is not available: the bridge refused it (%s)", r.Kind, r.Name, r.Problem)}
}

// conn is the state of one connection: the items the last lists dropped.
type conn struct {
	e     *Enforcer
	h     Hooks
	mu    sync.Mutex
	bad   map[kindName]string // the problem of each item dropped, until a list shows it fine again
	ended bool
	// relisting holds the kinds being listed again after a list_changed;
	// another notification meanwhile asks for one more round (again).
	relisting map[*Kind]bool
	again     map[*Kind]bool
}

type kindName struct {
	kind *Kind
	name string
}

// Interceptor returns the interceptor of one connection: it filters the
// answers to tools/list, prompts/list, resources/list and
// resources/templates/list, and
// refuses tools/call and prompts/get of an item that is not pinned or that
// a list dropped, and reads and subscriptions of resources that may not be
// read (see unreadable): resources/read, resources/subscribe (the bridge's
// own too: the stateless pool's, for its clients), and the URIs of a
// subscriptions/listen request, which are taken out of it. Lists are
// checked whoever asked, the bridge included.
func (e *Enforcer) Interceptor(h *Hooks) peer.Interceptor {
	c := &conn{e: e, bad: map[kindName]string{}, relisting: map[*Kind]bool{}, again: map[*Kind]bool{}}
	if h != nil {
		c.h = *h
	}
	if c.h.Logger == nil {
		c.h.Logger = slog.Default()
	}
	// The closure only tells the cases apart: what each does is in a
	// method, so that its frame, which stays on the stack under the rest
	// of the chain, is small.
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			switch {
			case m.Dir == peer.ToChild && m.Own && m.Method == "resources/subscribe":
				// The stateless pool subscribes a legacy server to what its
				// clients listen to: only to what they may read.
				if err := c.checkRead(m); err != nil {
					return err
				}
			case m.Dir == peer.ToChild && !m.Own && m.Env.Kind == jsonrpc.KindRequest && m.Method == "subscriptions/listen":
				if err := c.filterListen(m); err != nil {
					return err
				}
			case m.Dir == peer.ToChild && !m.Own && m.Env.Kind == jsonrpc.KindRequest:
				if k := kindOfCall(m.Method); k != nil {
					if !m.Env.NameAt.IsZero() && !c.passes(k, m.Env.NameAt.In(m.Data)) {
						if err := c.checkCall(m, k); err != nil {
							return err
						}
					}
				} else if m.Method == "resources/read" || m.Method == "resources/subscribe" {
					if err := c.checkRead(m); err != nil {
						return err
					}
				}
			case m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindNotification:
				if c.dropsNotification(m) {
					return nil
				}
			case m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindResponse && !m.Env.IsError:
				// Answers to the bridge's own lists too: relist's.
				if k := kindOfList(m.Method); k != nil {
					if err := c.filterList(m, k); err != nil {
						return err
					}
				}
			}
			return next(m)
		}
	}
}

// checkRead refuses a read of, or a subscription to, a resource that may
// not be read.
func (c *conn) checkRead(m *peer.Message) error {
	if v := c.unreadable(uriOf(m.Data)); v != nil {
		c.violation(m.Origin, *v, false)
		return &Refusal{Violation: *v, modern: c.h.Revision >= ModernRevision}
	}
	return nil
}

// filterListen takes out of a subscriptions/listen request what may not
// be read, which may not be listened to either: it is left out of the
// request, and so of the server's acknowledgment, "the subset the server
// agreed to honor" (basic/patterns/subscriptions).
func (c *conn) filterListen(m *peer.Message) error {
	out, dropped, err := mcplist.FilterSubscriptions(m.Data, func(uri string) bool {
		v := c.unreadable(uri)
		if v != nil {
			c.violation(m.Origin, *v, false)
		}
		return v == nil
	})
	if err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid params: " + err.Error()}
	}
	if len(dropped) > 0 {
		return m.Replace(out)
	}
	return nil
}

// checkCall refuses a call of an item of kind k that passes did not let
// through, if it is refused.
func (c *conn) checkCall(m *peer.Message, k *Kind) error {
	if name := m.Env.Name(m.Data); name != "" {
		if v := c.refused(k, name); v != nil {
			c.violation(m.Origin, *v, false)
			return &Refusal{Violation: *v, modern: c.h.Revision >= ModernRevision}
		}
	}
	return nil
}

// dropsNotification lists a kind again when the server says it changed,
// and reports whether a notification is dropped.
func (c *conn) dropsNotification(m *peer.Message) bool {
	if k := kindOfChange(m.Method); k != nil && c.h.Call != nil {
		c.relist(k)
	}
	if m.Method == "notifications/resources/updated" {
		// What may not be read is not heard of either (a server
		// may send updates nobody subscribed to, or of a
		// resource a list dropped since).
		if uri := uriOf(m.Data); c.unreadable(uri) != nil {
			c.h.Logger.Debug("an update of a resource the pin file does not cover is not forwarded", "uri", uri)
			return true
		}
	}
	return false
}

// filterList takes out of a list result of kind k what is refused.
func (c *conn) filterList(m *peer.Message, k *Kind) error {
	var found []Violation
	out, _, err := mcplist.Filter(m.Data, k.Array, k.Key, func(name string, item []byte) bool {
		if p := c.check(k, name, item); p != "" {
			found = append(found, Violation{k.Name, name, p})
			return false
		}
		return true
	})
	if err != nil {
		c.h.Logger.Warn("cannot read a list from the MCP server to check it against the pin file: the client gets an error", "method", m.Method, "err", err)
		out = (&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the bridge could not check the MCP server's " + m.Method + " answer: " + err.Error()}).Response(m.Env.IDAt.In(m.Data))
	}
	for _, v := range found {
		c.violation(m.Origin, v, true)
	}
	if len(found) > 0 || err != nil {
		return m.Replace(out)
	}
	return nil
}

// check returns the problem of an item a list shows, "" if none, and
// records it for the calls that follow. An item the lock does not pin is
// not recorded: the lock itself refuses calls of it, and a resource a
// list drops for that reason stays readable through a pinned template
// (so c.bad holds no more than the lock's items and those that fail
// inspection).
func (c *conn) check(k *Kind, name string, item []byte) string {
	p := c.e.verdict(k, name, item)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p == "" || p == c.e.notPinned {
		delete(c.bad, kindName{k, name})
	} else {
		c.bad[kindName{k, name}] = p
	}
	return p
}

// passes reports whether a call of the item whose name is written raw (a
// JSON string as written) is not refused, read without decoding the name
// (a call of a pinned item, the usual one, costs a map lookup):
// the name has no escapes and is valid UTF-8 (so it is what the decoded
// name is), the lock pins it, and no list dropped it. False says nothing:
// ask refused.
func (c *conn) passes(k *Kind, raw []byte) bool {
	name := raw[1 : len(raw)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		return false
	}
	if l := c.e.o.Lock; l == nil {
		if !utf8.Valid(name) {
			return false
		}
	} else if _, ok := k.lock(l)[string(name)]; !ok || !c.e.validKeys {
		return false // a key of the lock is valid UTF-8, as validKeys says
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) == 0 {
		return true
	}
	_, bad := c.bad[kindName{k, string(name)}]
	return !bad
}

// refused returns why a call of an item is refused, or nil: it is not in
// the lock, or the last list that showed it dropped it.
func (c *conn) refused(k *Kind, name string) *Violation {
	c.mu.Lock()
	p, bad := c.bad[kindName{k, name}]
	c.mu.Unlock()
	if bad {
		return &Violation{k.Name, name, p}
	}
	if l := c.e.o.Lock; l != nil {
		if _, ok := l.pinned(k, name); !ok {
			return &Violation{k.Name, name, "not in the pin file " + c.e.o.LockFile}
		}
	}
	return nil
}

// unreadable returns why a read of (or a subscription to) uri is refused,
// or nil: a list dropped the resource; or, with a lock, the URI is neither
// a pinned resource nor one a pinned template produces (templates a list
// dropped do not count).
func (c *conn) unreadable(uri string) *Violation {
	if uri == "" {
		return nil // the server refuses a read of nothing
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, bad := c.bad[kindName{kindResource, uri}]; bad {
		return &Violation{kindResource.Name, uri, p}
	}
	l := c.e.o.Lock
	if l == nil {
		return nil
	}
	if _, ok := l.Resources[uri]; ok {
		return nil
	}
	dropped := ""
	for _, t := range c.e.templates {
		if !t.re.MatchString(uri) {
			continue
		}
		p, bad := c.bad[kindName{kindTemplate, t.raw}]
		if !bad {
			return nil
		}
		dropped = fmt.Sprintf("its resource template %q was dropped: %s", t.raw, p)
	}
	if dropped != "" {
		return &Violation{kindResource.Name, uri, dropped}
	}
	return &Violation{kindResource.Name, uri, "matches no resource or resource template in the pin file " + c.e.o.LockFile}
}

// uriOf returns params.uri of a request, or "".
func uriOf(data []byte) string {
	params, _ := jsonrpc.Lookup(data, "params")
	v, _ := jsonrpc.Lookup(params, "uri")
	s, _ := jsonrpc.StringValue(v)
	return s
}

// codeResourceNotFound is MCP's "Resource not found"
// (server/resources#error-handling).
const codeResourceNotFound = -32002

// violation alerts, and with EndSession ends the session (once).
func (c *conn) violation(origin peer.Origin, v Violation, listed bool) {
	what := "the MCP server offers a refused " + v.Kind + ": dropped from the list"
	if !listed {
		what = "a client asked for a refused " + v.Kind + ": refused"
	}
	c.h.Logger.Warn(what, "kind", v.Kind, "name", v.Name, "problem", v.Problem)
	// A refused call is audited as such (its error's DeniedBy); the alert
	// is for what the server offered.
	if listed && c.h.Alert != nil {
		c.h.Alert(origin, v)
	}
	// Only the server's offer ends the session: a client asking for what
	// is not pinned is refused, but the server did nothing wrong.
	if !listed || c.e.o.OnViolation != EndSession || c.h.End == nil {
		return
	}
	c.mu.Lock()
	first := !c.ended
	c.ended = true
	c.mu.Unlock()
	if first {
		c.h.End(fmt.Errorf("the MCP server offers %s %q, which the bridge refuses (%s); --on-pin-violation end-session ends the session", v.Kind, v.Name, v.Problem))
	}
}

// kindOfChange returns the kind whose list_changed notification method is.
func kindOfChange(method string) *Kind {
	switch method {
	case "notifications/tools/list_changed":
		return kindTool
	case "notifications/prompts/list_changed":
		return kindPrompt
	}
	return nil
}

// relist lists kind k again as the bridge, on a goroutine: the answers
// pass this interceptor, which checks them like any client's. At most one
// round per kind runs at a time; notifications during a round ask for one
// more.
func (c *conn) relist(k *Kind) {
	c.mu.Lock()
	if c.relisting[k] {
		c.again[k] = true
		c.mu.Unlock()
		return
	}
	c.relisting[k] = true
	c.mu.Unlock()
	go func() {
		for {
			err := eachItem(context.Background(), c.h.Call, k, func(string, []byte) error { return nil })
			if err != nil && !errors.Is(err, peer.ErrClosed) {
				c.h.Logger.Warn("listing the MCP server's "+k.Name+"s after it said they changed", "err", err)
			}
			c.mu.Lock()
			if !c.again[k] || err != nil {
				c.relisting[k], c.again[k] = false, false
				c.mu.Unlock()
				return
			}
			c.again[k] = false
			c.mu.Unlock()
		}
	}()
}

package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/msglog"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// guards are what every connection to one server holds at peer's
// interception point (see chain for their order): its telemetry, the
// message log, the audit log, the policy, the pin enforcer.
type guards struct {
	tel    *telemetry
	policy *policy.Policy
	pins   *pin.Enforcer // nil when nothing is pinned or inspected
	audit  *audit.Log    // nil without an audit log
	own    bool          // audit is the server's own: close closes it
	logger *slog.Logger
	// logMessages logs every message of each connection.
	logMessages bool
	// lists, if set, takes out of each connection's list answers what
	// their caller may not see, where the lists are not one server's own
	// (an aggregate's merged lists, filtered with each member's policy:
	// see listFilter), for each answer's caller (peer.Message.Caller);
	// revision is as chain's policy gets it.
	lists func(revision string, logger *slog.Logger) peer.Interceptor
}

// newGuards builds the guards of a server and opens its audit log (or
// takes its view of the shared one); close releases it.
func newGuards(o *ServerOptions, sh *Shared, tel *telemetry, logger *slog.Logger) (*guards, error) {
	g := &guards{tel: tel, policy: o.Policy, logger: logger, logMessages: o.LogMessages}
	in := o.Inspection
	if o.Lock != nil || !in.AllowHiddenUnicode || in.MaxDescriptionBytes >= 0 {
		g.pins = pin.New(&pin.Options{Lock: o.Lock, LockFile: o.LockFile, OnViolation: o.OnPinViolation, Inspection: in})
	}
	switch {
	case o.AuditLog == "":
	case sh.Audit != nil && o.AuditLog == sh.AuditPath:
		// The shared log, opened once: the server's name is in each of
		// its lines.
		g.audit = sh.Audit.ForServer(o.Name)
	default:
		l, err := audit.Open(o.AuditLog, &audit.Options{Args: o.AuditArgs, Server: o.Name, Logger: logger})
		if err != nil {
			return nil, &OptionError{Field: "AuditLog", Err: err}
		}
		g.audit, g.own = l, true
	}
	return g, nil
}

func (g *guards) close() error {
	if !g.own {
		return nil
	}
	return g.audit.Close()
}

// chain is the whole interception point of one connection to the server,
// in this order: the span (first: it sees a request as its client wrote
// it), the counters, the message log (a message as its side wrote it,
// whatever the guards below do with it), the audit log (it sees requests
// as clients sent them and the refusals of the others), the policy (its
// denials counted), the pin enforcer (which also inspects descriptions).
// Nil when there is nothing to intercept. ended is what to call once
// that connection has ended (the audit log writes the requests left
// unanswered).
//
// A message's caller is its client's (peer.Message.Caller: a
// session's latest principal, or the caller of the request a pool's call
// serves); self is who the server's messages without an Origin (its
// notifications) concern: the session, for the policy to hide resource
// updates from a caller it hides the resource from; nil for a child of
// the pool, whose notifications may go to several callers: the policy
// then drops only the updates of what nobody may read, and the pool asks
// readable for each subscription's caller. end ends the connection
// (--on-pin-violation end-session); it must not block. call sends a
// request of the bridge's own on that connection (peer.Conn.Call), for
// the pin enforcer to list tools again when the server says they
// changed; nil: it does not.
func (g *guards) chain(name string, self peer.Origin, logger *slog.Logger, end func(error), call pin.CallFunc) (intercept peer.Interceptor, ended func(reason string)) {
	var chain []peer.Interceptor
	ended = func(string) {}
	if g.tel.tracer != nil {
		chain = append(chain, g.tel.tracer.Intercept)
	}
	if g.tel.server != nil {
		chain = append(chain, g.tel.server.Intercept)
	}
	if g.logMessages {
		chain = append(chain, msglog.Interceptor(logger, nil))
	}
	if g.audit != nil {
		var i peer.Interceptor
		i, ended = g.audit.Interceptor(name)
		chain = append(chain, i)
	}
	// A child of the pool (self nil) serves revision 2026-07-28 only,
	// where a hidden or refused resource gets -32602, not -32002.
	revision := ""
	if self == nil {
		revision = policy.ModernRevision
	}
	if g.policy != nil {
		if g.tel.server != nil {
			chain = append(chain, countDenials(g.tel.server))
		}
		chain = append(chain, g.policy.Interceptor(&policy.Options{Audience: self, UpdatesPerCaller: self == nil, Revision: revision, Logger: logger}))
	}
	if g.lists != nil {
		chain = append(chain, g.lists(revision, logger))
	}
	if g.pins != nil {
		hooks := &pin.Hooks{End: end, Logger: logger, Call: call, Alert: g.alert(name), Revision: revision}
		chain = append(chain, g.pins.Interceptor(hooks))
	}
	if len(chain) == 0 {
		return nil, ended
	}
	return peer.Chain(chain...), ended
}

// countDenials counts the requests the policy after it refuses.
func countDenials(c interface{ PolicyDenied() }) peer.Interceptor {
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			err := next(m)
			if err != nil {
				// Declared here: errors.As moves d to the heap, which
				// would cost every message an allocation.
				var d *policy.Denial
				if errors.As(err, &d) {
					c.PolicyDenied()
				}
			}
			return err
		}
	}
}

// alert is what the pin enforcer of a connection tells of each item a
// server offered and it dropped: the audit log and the counter. Nil when
// neither is on.
func (g *guards) alert(conn string) func(origin peer.Origin, v pin.Violation) {
	if g.audit == nil && g.tel.server == nil {
		return nil
	}
	return func(origin peer.Origin, v pin.Violation) {
		if g.tel.server != nil {
			g.tel.server.PinViolation()
		}
		if g.audit != nil {
			g.audit.Alert(conn, origin, v.Kind, v.Name, v.Problem)
		}
	}
}

// readable is pool.Options.Readable: whether the caller of a
// subscription, c, may hear of the resource uri.
func (g *guards) readable(c *policy.Caller, uri string) bool {
	if g.policy == nil {
		return true
	}
	if d := g.policy.Readable(c, uri); d != nil {
		args := []any{"uri", uri, "rule", d.Rule}
		if c != nil {
			args = append(args, "sub", c.Subject, "client_id", c.ClientID)
		}
		g.logger.Debug("the policy hid a resource from a subscription", args...)
		return false
	}
	return true
}

// forChild is pool.Options.ChildIntercept: the chain of one child of the
// stateless pool, named by the pool ("pool-3") in logs and audit lines.
// A child serves many callers: each message's Origin is the pool's call,
// whose Caller is the caller of the request it serves.
// Once the child has stopped, the requests it left unanswered are
// audited.
func (g *guards) forChild(name string, end func(error), call func(context.Context, string, any) (json.RawMessage, error)) (peer.Interceptor, func(error)) {
	intercept, ended := g.chain(name, nil, g.logger.With("child", name), end, call)
	if g.audit == nil {
		return intercept, nil
	}
	return intercept, func(err error) {
		reason := ""
		if err != nil {
			reason = err.Error()
		}
		ended(reason)
	}
}

// forSession is session.Options.InterceptSession: the chain of one
// session, whose audit lines name it by its log form (never the ID, which
// is a credential), which a pin violation can end, and which lists tools
// again itself after the server says they changed. Once the session's
// server has stopped, the requests it left unanswered are audited.
func (g *guards) forSession(s *session.Session) peer.Interceptor {
	logger := g.logger.With("session", s.LogID())
	intercept, ended := g.chain(s.LogID(), s, logger, s.Close, s.Call)
	if g.audit != nil {
		// Ends with the session: Stopped closes once its server has
		// stopped and the last message has passed the chain.
		go func() {
			<-s.Stopped()
			reason := ""
			if err := s.Err(); err != nil {
				reason = err.Error()
			}
			ended(reason)
		}()
	}
	return intercept
}

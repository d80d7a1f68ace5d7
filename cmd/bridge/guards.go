package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/msglog"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// guards are what every session's connection to its server holds at peer's
// interception point, in this order: the audit log (first, so that it sees
// requests as clients sent them and the refusals of the others), the
// policy, and the pin enforcer (which also inspects descriptions).
type guards struct {
	policy *policy.Policy
	pins   *pin.Enforcer // nil when nothing is pinned or inspected
	audit  *audit.Log    // nil without --audit-log
	logger *slog.Logger
	// caller says who a client is, from a message's Origin (the principal
	// the HTTP edge established). Nil: callers have no scopes and no
	// name in the audit log.
	caller func(origin any) *policy.Caller
	// counts counts the policy's denials and the pin violations (the
	// server's metrics); nil: not counted.
	counts guardCounts
	// logMessages logs every message of each connection (--log-messages).
	logMessages bool
}

// inspection is what --max-description-bytes and --allow-hidden-unicode
// ask of every item a server lists.
func (c *config) inspection() pin.Inspection {
	return pin.Inspection{MaxDescriptionBytes: int(c.MaxDescriptionBytes), AllowHiddenUnicode: c.AllowHiddenUnicode}
}

// newGuards builds the guards the configuration asks for and opens the
// audit log; close releases it.
func newGuards(cfg *config, logger *slog.Logger) (*guards, error) {
	g := &guards{policy: cfg.policy, logger: logger, logMessages: cfg.LogMessages}
	if cfg.authenticates() {
		// Without authentication no message has a principal (the HTTP
		// edge attaches one only to an authenticated request): nobody to
		// ask for every request, the audit log's and the policy's.
		g.caller = sessionCaller
	}
	in := cfg.inspection()
	if cfg.lock != nil || !in.AllowHiddenUnicode || in.MaxDescriptionBytes >= 0 {
		g.pins = pin.New(&pin.Options{Lock: cfg.lock, LockFile: cfg.PinFile, OnViolation: pin.Action(cfg.OnPinViolation), Inspection: in})
	}
	if cfg.AuditLog != "" {
		o := &audit.Options{Args: cfg.AuditArgs, Server: cfg.serverName, Logger: logger}
		if g.caller != nil {
			o.Principal = g.principal
		}
		l, err := audit.Open(cfg.AuditLog, o)
		if err != nil {
			return nil, fmt.Errorf("--audit-log: %w", err)
		}
		g.audit = l
	}
	return g, nil
}

func (g *guards) principal(origin any) (string, string) {
	if g.caller == nil {
		return "", ""
	}
	if c := g.caller(origin); c != nil {
		return c.Subject, c.ClientID
	}
	return "", ""
}

func (g *guards) close() error {
	if g.audit == nil {
		return nil
	}
	return g.audit.Close()
}

// forConn returns the interceptor chain of one connection to a server
// (nil when there is nothing to intercept), and what to call once that
// connection has ended. self is who the server's messages without an
// Origin (its notifications) concern: the session, for the policy to hide
// resource updates from a caller it hides the resource from; nil for a
// child of the pool, whose notifications may go to several callers: the
// policy then drops only the updates of what nobody may read, and the
// pool asks readable for each subscription's caller. end ends the session (--on-pin-violation
// end-session); it must not block. call sends a request of the bridge's
// own on that connection (peer.Conn.Call), for the pin enforcer to list
// tools again when the server says they changed; nil: it does not.
func (g *guards) forConn(name string, self any, logger *slog.Logger, end func(error), call pin.CallFunc) (peer.Interceptor, func(reason string)) {
	var chain []peer.Interceptor
	ended := func(string) {}
	if g.logMessages {
		// First: a client's message as it wrote it, a server's as it
		// wrote it, whatever the guards below do with them.
		chain = append(chain, msglog.Interceptor(logger, nil))
	}
	if g.audit != nil {
		var i peer.Interceptor
		i, ended = g.audit.Interceptor(name)
		chain = append(chain, i)
	}
	if g.policy != nil {
		if g.counts != nil {
			chain = append(chain, countDenials(g.counts))
		}
		caller := g.caller
		if self != nil && caller != nil {
			caller = func(origin any) *policy.Caller {
				if origin == nil {
					origin = self
				}
				return g.caller(origin)
			}
		}
		// A child of the pool (self nil) serves revision 2026-07-28 only.
		revision := ""
		if self == nil {
			revision = policy.ModernRevision
		}
		chain = append(chain, g.policy.Interceptor(&policy.Options{Caller: caller, UpdatesPerCaller: self == nil, Revision: revision, Logger: logger}))
	}
	if g.pins != nil {
		hooks := &pin.Hooks{End: end, Logger: logger, Call: call, Alert: g.alert(name)}
		chain = append(chain, g.pins.Interceptor(hooks))
	}
	if len(chain) == 0 {
		return nil, ended
	}
	return peer.Chain(chain...), ended
}

// readable is pool.Options.Readable: whether the caller of a
// subscription (origin, the pool's call) may hear of the resource uri.
func (g *guards) readable(origin any, uri string) bool {
	if g.policy == nil {
		return true
	}
	var c *policy.Caller
	if g.caller != nil {
		c = g.caller(origin)
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
// whose Principal is the caller of the request it serves (see
// sessionCaller). Once the child has stopped, the requests it left
// unanswered are audited.
func (g *guards) forChild(name string, end func(error), call func(context.Context, string, any) (json.RawMessage, error)) (peer.Interceptor, func(error)) {
	intercept, ended := g.forConn(name, nil, g.logger.With("child", name), end, call)
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
	intercept, ended := g.forConn(s.LogID(), s, logger, s.Close, s.Call)
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

// sessionCaller is who sent a message to a server, or who its answer
// goes to: the principal of the request (its token's subject, client and
// scopes). The Origin of a message says it: a 2025 session
// (*session.Session, whose principal is that of its latest POST: a
// session is bound to one subject and client, and a refreshed or
// stepped-up token brings its new scopes), or a call of the stateless
// pool (the request it serves, or the retry that resumed it). A static
// token has no scopes; without authentication there is no caller.
func sessionCaller(origin any) *policy.Caller {
	return auth.CallerOf(origin) // a policy.Caller is the auth.Principal: nothing to convert
}

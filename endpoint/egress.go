package endpoint

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// maxRefusalsRemembered bounds the (session, host, port) triples whose
// refusal was logged, so that each is logged once; beyond it the memory
// starts afresh (a refusal may then be logged again).
const maxRefusalsRemembered = 10000

// egressReporter makes every decision of the egress proxy visible: an
// audit line per connection (with --audit-log), a metric per
// server and outcome, and a WARN per refused host and port per session
// naming what would allow it.
// server is the server's name (empty in the one-command form); who holds
// the principal of each launch; al and tel may be nil.
func egressReporter(server string, al *audit.Log, tel *telemetry, who *launchPrincipals, logger *slog.Logger) func(string, egress.Event) {
	allowWith := "--sandbox-egress"
	if server != "" {
		allowWith = "the server's allowHosts"
	}
	var mu sync.Mutex
	logged := map[string]bool{}
	return func(session string, e egress.Event) {
		if tel != nil && tel.server != nil {
			tel.server.Egress(e.Allowed, e.Up, e.Down)
		}
		outcome := "refused"
		if e.Allowed {
			outcome = "allowed"
		}
		if al != nil {
			r := audit.EgressRecord{Session: session, Host: e.Host, Port: e.Port, IP: e.IP, Outcome: outcome, Reason: e.Reason,
				BytesUp: e.Up, BytesDown: e.Down, DurationMS: e.Millis}
			if p := who.get(session); p != nil {
				r.Sub, r.ClientID = p.Subject, p.ClientID
			}
			al.Egress(r)
		}
		if e.Allowed {
			return
		}
		key := session + "\x00" + e.Host + "\x00" + strconv.Itoa(e.Port)
		mu.Lock()
		first := !logged[key]
		if first {
			if len(logged) >= maxRefusalsRemembered {
				clear(logged)
			}
			logged[key] = true
		}
		mu.Unlock()
		if !first {
			return
		}
		entry := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
		if e.IP != "" {
			entry = net.JoinHostPort(e.IP, strconv.Itoa(e.Port))
		}
		logger.Warn("egress refused", "session", session, "host", e.Host, "port", e.Port, "ip", e.IP, "reason", e.Reason,
			"allow_with", allowWith+" "+entry)
	}
}

// launchPrincipals remembers the principal each child was launched for
// (by the session's log form, which the egress proxy's events carry), for
// the audit lines of its connections. Bounded: beyond
// maxRefusalsRemembered entries it starts afresh, and a line may then lack
// its principal.
type launchPrincipals struct {
	mu sync.Mutex
	m  map[string]*auth.Principal
}

func newLaunchPrincipals() *launchPrincipals {
	return &launchPrincipals{m: map[string]*auth.Principal{}}
}

func (w *launchPrincipals) get(session string) *auth.Principal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[session]
}

func (w *launchPrincipals) set(session string, p *auth.Principal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) >= maxRefusalsRemembered {
		clear(w.m)
	}
	w.m[session] = p
}

// principalLauncher records the principal of each launch in who.
type principalLauncher struct {
	sandbox.Launcher
	who *launchPrincipals
}

func (l principalLauncher) Launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	if p := auth.FromContext(ctx); p != nil {
		l.who.set(sessionID, p)
	}
	return l.Launcher.Launch(ctx, sessionID)
}

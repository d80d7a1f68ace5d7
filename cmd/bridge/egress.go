package main

import (
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/egress"
)

// maxRefusalsRemembered bounds the (session, host, port) triples whose
// refusal was logged, so that each is logged once; beyond it the memory
// starts afresh (a refusal may then be logged again).
const maxRefusalsRemembered = 10000

// egressReporter makes every decision of the egress proxy visible (issue
// 29): an audit line per connection (with --audit-log), a metric per
// server and outcome, and a WARN per refused host and port per session
// naming what would allow it.
func egressReporter(cfg *config, g *guards, tel *telemetry, logger *slog.Logger) func(string, egress.Event) {
	if len(cfg.SandboxEgress) == 0 {
		return nil
	}
	var al *audit.Log
	if g != nil {
		al = g.audit
	}
	allowWith := "--sandbox-egress"
	if cfg.serverName != "" {
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
			al.Egress(audit.EgressRecord{Session: session, Host: e.Host, Port: e.Port, IP: e.IP, Outcome: outcome, Reason: e.Reason,
				BytesUp: e.Up, BytesDown: e.Down, DurationMS: e.Millis})
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

package endpoint

import (
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// telemetry is one server's metrics and spans, which carry its name:
// either may be off (nil), and then costs nothing per message.
type telemetry struct {
	server *metrics.Server // nil with metrics off
	tracer *tracing.Tracer // nil with tracing off
	logger *slog.Logger
}

// newTelemetry is the telemetry of the server called name (the
// one-command form's: metrics.DefaultServer).
func newTelemetry(sh *Shared, name string, logger *slog.Logger) *telemetry {
	if name == "" {
		name = metrics.DefaultServer
	}
	t := &telemetry{logger: logger}
	if sh.Metrics != nil {
		t.server = sh.Metrics.Server(name)
	}
	if sh.Tracer != nil {
		t.tracer = tracing.New(sh.Tracer, name)
	}
	return t
}

// launcher counts the children l starts (kind: local or docker).
func (t *telemetry) launcher(l sandbox.Launcher, kind Sandbox) sandbox.Launcher {
	if t.server == nil {
		return l
	}
	return t.server.Launcher(l, string(kind))
}

// watchSpares exports the warm spares' hits and misses.
func (t *telemetry) watchSpares(p *sandbox.Spares) {
	if t.server == nil {
		return
	}
	if err := t.server.WatchSpares(p); err != nil {
		t.logger.Error("cannot export the warm pool's metrics", "err", err)
	}
}

// watch exports what the sessions' event logs hold, and the churn and
// the load of the 2026-07-28 pool (p may be nil).
func (t *telemetry) watch(r *session.Registry, p *pool.Pool) {
	if t.server == nil {
		return
	}
	if err := t.server.WatchRegistry(r); err != nil {
		t.logger.Error("cannot export the event logs' metrics", "err", err)
	}
	if p == nil {
		return
	}
	if err := t.server.WatchStatelessPool(p); err != nil {
		t.logger.Error("cannot export the stateless pool's metrics", "err", err)
	}
}

// observer is told of the sessions' lives, or nil.
func (t *telemetry) observer() session.Observer {
	switch {
	case t.tracer == nil && t.server == nil:
		return nil
	case t.tracer == nil:
		return t.server
	}
	return sessionObserver{t.server, t.tracer}
}

// sessionObserver counts sessions (when metrics are on) and ends the spans
// of a session's unanswered requests with it.
type sessionObserver struct {
	m *metrics.Server // may be nil
	t *tracing.Tracer
}

func (o sessionObserver) SessionStarted(s *session.Session) {
	if o.m != nil {
		o.m.SessionStarted(s)
	}
}

func (o sessionObserver) SessionEnded(s *session.Session, reason error) {
	if o.m != nil {
		o.m.SessionEnded(s, reason)
	}
	o.t.Forget(s)
}

func (o sessionObserver) EventEvicted(bytes int) {
	if o.m != nil {
		o.m.EventEvicted(bytes)
	}
}

func (o sessionObserver) Resumed(err error) {
	if o.m != nil {
		o.m.Resumed(err)
	}
}

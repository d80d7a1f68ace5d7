package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// frontend is what serve runs behind its listener: one server (the
// one-command form) or the servers of a --config file.
type frontend interface {
	http.Handler
	// Drain refuses new sessions and fails /readyz, at shutdown.
	Drain()
	// WaitIdle waits until no client request is in flight, or ctx is done.
	WaitIdle(ctx context.Context) error
	// Shutdown ends every session and stops every MCP server.
	Shutdown(ctx context.Context) error
	// Len is the number of live sessions.
	Len() int
}

// single is the one-command form: a set of one at --path (/mcp).
type single struct{ *endpoint.Set }

func (s single) Shutdown(ctx context.Context) error { return s.Close(ctx) }

// sessionOptions are a registry's options for a configuration (the global
// one, or one server's).
func sessionOptions(cfg *config, launcher session.Launcher, logger *slog.Logger) *session.Options {
	return &session.Options{
		Launcher:        launcher,
		IdleTimeout:     time.Duration(cfg.SessionIdleTimeout),
		MaxSessions:     cfg.MaxSessions,
		MaxMessageBytes: int(cfg.MaxMessageBytes),
		LogMaxEvents:    cfg.LogMaxEvents,
		LogMaxBytes:     int64(cfg.LogMaxBytes),
		Logger:          logger,

		LogMaxTotalBytes: int64(cfg.LogMaxTotalBytes),

		InitializeTimeout: time.Duration(cfg.InitializeTimeout),
		InitializeHint:    initializeHint(cfg),
		RequestTimeout:    time.Duration(cfg.RequestTimeout),
		MaxRequests:       cfg.MaxRequestsPerSession,
		MaxQueuedBytes:    int64(cfg.MaxQueuedBytes),
	}
}

// handlerOptions are a handler's options for a configuration, at path.
func handlerOptions(cfg *config, path string, logger *slog.Logger) *bridge.Options {
	return &bridge.Options{
		Path:                 path,
		AllowedOrigins:       cfg.AllowedOrigins,
		AllowedHosts:         cfg.AllowedHosts,
		AuthTokens:           cfg.tokens,
		JSONResponse:         cfg.JSONResponse,
		SSEPollAfter:         time.Duration(cfg.SSEPollAfter),
		SSERetry:             cfg.SSERetry,
		SSEKeepAlive:         keepAlive(time.Duration(cfg.SSEKeepAlive)),
		BodyReadTimeout:      time.Duration(cfg.BodyReadTimeout),
		WriteTimeout:         time.Duration(cfg.WriteTimeout),
		MaxBodyBytesInFlight: int64(cfg.MaxBodyBytesInFlight),
		NoLegacySSE:          cfg.NoLegacySSE,
		Logger:               logger,
	}
}

// keepAlive is bridge.Options.SSEKeepAlive for --sse-keepalive, whose 0
// turns keep-alives off (the option's 0 is its default).
func keepAlive(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// frontendHooks set what every registry and handler gets from serve, in
// both forms: the interception point (telemetry, policy), session IDs, the
// governor, authentication, metrics and tracing.
type frontendHooks struct {
	// session sets a registry's options, with the telemetry and guards of
	// its server.
	session func(o *session.Options, tel *telemetry, g *guards)
	handler func(*bridge.Options)
	tel     *telemetry // the global telemetry; a server's is tel.forServer
	guards  *guards    // the global guards; a server's are serverGuards
	router  *affinity.Instance
	scopes  func(...string) // advertises the scopes of a server's policy
	// inflight makes a source of the governor's count (procs.Sources).
	inflight func() func(int)
}

// multi serves the servers of a --config file, each at /servers/NAME/mcp
// with an endpoint of its own (endpoint.Set), and reloads the file
// (reload, on SIGHUP).
type multi struct {
	*endpoint.Set
	cfg    *config // the global configuration; cfg.file is the file read at start
	logger *slog.Logger
	hooks  frontendHooks
	budget *session.LogBudget // --log-max-total-bytes, shared by all servers
	total  atomic.Int64       // requests in flight over all servers

	mu sync.Mutex // serializes reloads
}

// running is one server of the file, serving.
type running struct {
	*endpoint.Endpoint
	inflight atomic.Int64
}

func newMulti(cfg *config, logger *slog.Logger, hooks frontendHooks) *multi {
	edge := handlerOptions(cfg, bridge.DefaultPath, logger)
	hooks.handler(edge) // the checks, /metrics and the OAuth metadata
	m := &multi{
		cfg: cfg, logger: logger, hooks: hooks,
		budget: session.NewLogBudget(int64(cfg.LogMaxTotalBytes)),
	}
	m.Set = endpoint.NewSet(&endpoint.SetOptions{
		Edge:       edge,
		Grace:      cfg.ShutdownGrace,
		StopBudget: sandbox.StopBudget(cfg.StopGrace),
		Forget: func(name string) {
			// Its gauges go with it.
			if hooks.tel.metrics != nil {
				hooks.tel.metrics.Server(name).Drop()
			}
		},
		Logger: logger,
	})
	return m
}

// start starts every server of the file; if one cannot start, none serves.
func (m *multi) start(ctx context.Context) error {
	members, err := m.members(m.cfg.file)
	if err != nil {
		return err
	}
	if _, err := m.Apply(ctx, members); err != nil {
		return fmt.Errorf("config %s: %w", m.cfg.file.path, err)
	}
	return nil
}

// members are the servers of f, as the set applies them: each one's
// configuration is checked first.
func (m *multi) members(f *configFile) ([]endpoint.Member, error) {
	members := make([]endpoint.Member, len(f.servers))
	for i, s := range f.servers {
		sc, err := serverConfig(m.cfg, f.path, s)
		if err != nil {
			return nil, err
		}
		members[i] = endpoint.Member{
			Name: s.name,
			// A changed entry, or a changed policy or pin file it names,
			// replaces the server.
			Key:   s.canon + "\x00" + sc.guardFiles,
			Build: func(ctx context.Context) (*endpoint.Endpoint, error) { return m.startServer(ctx, s, sc) },
		}
	}
	return members, nil
}

func (m *multi) startServer(ctx context.Context, s *serverSpec, sc *config) (*endpoint.Endpoint, error) {
	logger := m.logger.With("server_name", s.name)
	warnLoosenings(sc, logger)
	// Its metrics and spans carry its name; its guards are its own.
	tel := m.hooks.tel.forServer(s.name)
	g, err := serverGuards(m.hooks.guards, m.cfg, sc, logger, tel)
	if err != nil {
		return nil, err
	}
	r := &running{}
	tune := func(so *session.Options) {
		if gov := so.Inflight; gov != nil {
			// The governor wants the requests in flight of all servers.
			so.Inflight = func(n int) {
				old := r.inflight.Swap(int64(n))
				gov(int(m.total.Add(int64(n) - old)))
			}
		}
	}
	r.Endpoint, err = m.hooks.endpoint(ctx, sc, bridge.ServerPath(s.name), tel, g, m.budget, tune, g.close, logger)
	return r.Endpoint, err
}

// endpoint builds the endpoint of one server, in both forms (the
// one-command form's at --path, each of a --config file's at
// /servers/NAME/mcp): its launcher and warm spares, its registry with
// the telemetry and guards given, its stateless pool, its handler. tune,
// if not nil, adjusts the registry's options; closeGuards, if not nil,
// closes the guards when the endpoint closes (the one-command form's are
// serve's to close).
func (h frontendHooks) endpoint(ctx context.Context, sc *config, path string, tel *telemetry, g *guards, budget *session.LogBudget, tune func(*session.Options), closeGuards func() error, logger *slog.Logger) (*endpoint.Endpoint, error) {
	sc.onEgress = egressReporter(sc, g, tel, logger)
	release := func() error {
		if closeGuards == nil {
			return nil
		}
		if err := closeGuards(); err != nil {
			return fmt.Errorf("closing the audit log: %w", err)
		}
		return nil
	}
	launcher, closeLauncher, err := newLauncher(ctx, sc, logger, tel)
	if err != nil {
		_ = release()
		return nil, explain(err)
	}
	releaseGuards := release
	release = func() error { closeLauncher(); return releaseGuards() }
	so := sessionOptions(sc, session.LauncherOf(launcher), logger)
	h.session(so, tel, g)
	so.LogBudget = budget
	if tune != nil {
		tune(so)
	}
	// Its own pool for revision 2026-07-28 clients, on its launcher and
	// guards, which answers server/discover for it.
	var poolInflight func(int)
	if h.inflight != nil {
		poolInflight = h.inflight()
	}
	po, err := poolOptions(sc, launcher, h.router, so, g, logger, poolInflight)
	if err != nil {
		_ = release()
		return nil, err
	}
	ho := handlerOptions(sc, path, logger)
	h.handler(ho)
	ho.AcceptSessionID = sc.AcceptSessionID
	e, err := endpoint.New(&endpoint.Options{Session: so, Pool: po, Handler: ho, Release: release})
	if err != nil {
		return nil, err
	}
	tel.watchRegistry(e.Registry())
	tel.watchStateless(e.Pool())
	if sc.policy != nil && h.scopes != nil {
		h.scopes(sc.policy.Scopes()...)
	}
	return e, nil
}

// serverGuards are the guards of a server of the file: its own policy,
// pin file and audit log when its keys name them, else the global ones.
// The global audit log is opened once: a server that shares it writes its
// name in each of its lines (a server's own file has it too).
func serverGuards(global *guards, gcfg, sc *config, logger *slog.Logger, tel *telemetry) (*guards, error) {
	c := *sc
	shared := global.audit != nil && c.AuditLog == gcfg.AuditLog
	if shared {
		c.AuditLog = ""
	}
	g, err := newGuards(&c, logger)
	if err != nil {
		return nil, fmt.Errorf("key \"audit-log\": %w", errors.Unwrap(err))
	}
	if shared {
		g.audit = global.audit.ForServer(sc.serverName, g.principal)
	}
	g.counts = tel.counts()
	return g, nil
}

// reload reads the file again: servers it adds start, servers it removes
// drain (their sessions end once their requests in flight are answered,
// within --shutdown-grace; meanwhile they refuse new sessions and
// requests with 404), servers whose entry changed are replaced (the old
// one drains, new sessions go to the new one), and the others keep their
// sessions (endpoint.Set.Apply). A file that is not valid changes
// nothing.
func (m *multi) reload(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	path := m.cfg.file.path
	f, err := readConfigFile(path)
	if err != nil {
		m.logger.Error("configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again", "err", err)
		return
	}
	if !reflect.DeepEqual(canonical(f.global), canonical(m.cfg.file.global)) {
		m.logger.Warn("the global options (\"bridge\") of the config file changed: they take effect when the bridge restarts", "config", path)
	}
	members, err := m.members(f)
	var ch endpoint.Changes
	if err == nil {
		ch, err = m.Apply(ctx, members)
		if errors.Is(err, endpoint.ErrClosed) {
			return
		}
		if err != nil {
			err = fmt.Errorf("config %s: %w", f.path, err)
		}
	}
	if err != nil {
		m.logger.Error("configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again", "err", err)
		return
	}
	m.cfg.file.servers = f.servers
	m.logger.Info("configuration reloaded", "config", path,
		"added", ch.Added, "removed", ch.Removed, "changed", ch.Changed, "unchanged", ch.Unchanged)
}

// canonical is a JSON object's members with their values compacted, to
// compare two of them.
func canonical(v map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(v))
	for k, raw := range v {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			b.Reset()
			b.Write(raw)
		}
		out[k] = b.String()
	}
	return out
}

// Shutdown ends every server's sessions, waits for the draining ones, and
// releases the launchers.
func (m *multi) Shutdown(ctx context.Context) error { return m.Close(ctx) }

// onSIGHUP runs each of fns, in order, whenever SIGHUP arrives on hup
// (which the caller has passed to signal.Notify), until stop is called
// (which waits for a run under way). It is the bridge's one SIGHUP handler:
// what reloads on SIGHUP registers here. Without fns, a SIGHUP is logged as
// having nothing to reload: it never ends the process (its default action
// would cut every session without a drain).
func onSIGHUP(logger *slog.Logger, hup <-chan os.Signal, fns ...func()) (stop func()) {
	if len(fns) == 0 {
		fns = []func(){func() {
			logger.Info("SIGHUP: nothing to reload (reloads --config, --tls-cert and --tls-key when given)")
		}}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-hup:
				for _, f := range fns {
					f()
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

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

// single is the one-command form: one endpoint behind /mcp.
type single struct{ e *endpoint.Endpoint }

func (s single) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.Handler().ServeHTTP(w, r) }
func (s single) Drain()                                           { s.e.Drain() }
func (s single) WaitIdle(ctx context.Context) error               { return s.e.WaitIdle(ctx) }
func (s single) Shutdown(ctx context.Context) error               { return s.e.Close(ctx) }
func (s single) Len() int                                         { return s.e.Len() }

// sessionOptions are a registry's options for a configuration (the global
// one, or one server's).
func sessionOptions(cfg *config, launcher session.Launcher, logger *slog.Logger) *session.Options {
	return &session.Options{
		Launcher:        launcher,
		IdleTimeout:     cfg.SessionIdleTimeout,
		MaxSessions:     cfg.MaxSessions,
		MaxMessageBytes: cfg.MaxMessageBytes,
		LogMaxEvents:    cfg.LogMaxEvents,
		LogMaxBytes:     cfg.LogMaxBytes,
		Logger:          logger,

		LogMaxTotalBytes: cfg.LogMaxTotalBytes,

		InitializeTimeout: cfg.InitializeTimeout,
		InitializeHint:    initializeHint(cfg),
		RequestTimeout:    cfg.RequestTimeout,
		MaxRequests:       cfg.MaxRequestsPerSession,
		MaxQueuedBytes:    cfg.MaxQueuedBytes,
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
		SSEPollAfter:         cfg.SSEPollAfter,
		SSERetry:             cfg.SSERetry,
		SSEKeepAlive:         keepAlive(cfg.SSEKeepAlive),
		BodyReadTimeout:      cfg.BodyReadTimeout,
		WriteTimeout:         cfg.WriteTimeout,
		MaxBodyBytesInFlight: cfg.MaxBodyBytesInFlight,
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
}

// multi serves the servers of a --config file, each at /servers/NAME/mcp
// with a registry, launcher and handler of its own, and reloads the file
// (reload, on SIGHUP).
type multi struct {
	cfg     *config // the global configuration; cfg.file is the file read at start
	logger  *slog.Logger
	servers *bridge.Servers
	hooks   frontendHooks
	budget  *session.LogBudget // --log-max-total-bytes, shared by all servers
	total   atomic.Int64       // requests in flight over all servers

	mu      sync.Mutex // serializes reloads and Shutdown
	running map[string]*running
	closed  bool
	drains  sync.WaitGroup // retired servers still draining
}

// running is one server of the file, serving.
type running struct {
	spec       *serverSpec
	guardFiles string // config.guardFiles
	*endpoint.Endpoint
	h        *bridge.Handler
	tel      *telemetry
	inflight atomic.Int64
}

func newMulti(cfg *config, logger *slog.Logger, hooks frontendHooks) *multi {
	edge := handlerOptions(cfg, bridge.DefaultPath, logger)
	hooks.handler(edge) // the checks, /metrics and the OAuth metadata
	return &multi{
		cfg: cfg, logger: logger, hooks: hooks,
		servers: bridge.NewServers(edge),
		budget:  session.NewLogBudget(cfg.LogMaxTotalBytes),
		running: make(map[string]*running),
	}
}

// start starts every server of the file; if one cannot start, none serves.
func (m *multi) start(ctx context.Context) error {
	started, err := m.startAll(ctx, m.cfg.file, m.cfg.file.servers)
	if err != nil {
		return err
	}
	for _, r := range started {
		m.running[r.spec.name] = r
		m.servers.Set(r.spec.name, r.h)
	}
	return nil
}

// startAll checks the configuration of every spec, then starts them; if
// one fails, those started are stopped and nothing changes.
func (m *multi) startAll(ctx context.Context, f *configFile, specs []*serverSpec) ([]*running, error) {
	cfgs := make([]*config, len(specs))
	for i, s := range specs {
		sc, err := serverConfig(m.cfg, f.path, s)
		if err != nil {
			return nil, err
		}
		cfgs[i] = sc
	}
	var started []*running
	for i, s := range specs {
		r, err := m.startServer(ctx, s, cfgs[i])
		if err != nil {
			for _, r := range started {
				r.stop(context.Background())
			}
			return nil, fmt.Errorf("config %s: server %q: %w", f.path, s.name, err)
		}
		started = append(started, r)
	}
	return started, nil
}

func (m *multi) startServer(ctx context.Context, s *serverSpec, sc *config) (*running, error) {
	logger := m.logger.With("server_name", s.name)
	warnLoosenings(sc, logger)
	// Its metrics and spans carry its name; its guards are its own.
	tel := m.hooks.tel.forServer(s.name)
	g, err := serverGuards(m.hooks.guards, m.cfg, sc, logger, tel)
	if err != nil {
		return nil, err
	}
	sc.onEgress = egressReporter(sc, g, tel, logger)
	launcher, closeLauncher, err := newLauncher(ctx, sc, logger, tel)
	if err != nil {
		g.close()
		return nil, explain(err)
	}
	r := &running{spec: s, guardFiles: sc.guardFiles, tel: tel}
	so := sessionOptions(sc, session.LauncherOf(launcher), logger)
	m.hooks.session(so, tel, g)
	so.LogBudget = m.budget
	if gov := so.Inflight; gov != nil {
		// The governor wants the requests in flight of all servers.
		so.Inflight = func(n int) {
			old := r.inflight.Swap(int64(n))
			gov(int(m.total.Add(int64(n) - old)))
		}
	}
	release := func() error {
		closeLauncher()
		if err := g.close(); err != nil {
			return fmt.Errorf("closing the audit log: %w", err)
		}
		return nil
	}
	// Its own pool for revision 2026-07-28 clients, on its launcher and
	// guards, which answers server/discover for it.
	po, err := poolOptions(sc, launcher, m.hooks.router, so.Intercept, g, logger)
	if err != nil {
		_ = release()
		return nil, err
	}
	ho := handlerOptions(sc, bridge.ServerPath(s.name), logger)
	m.hooks.handler(ho)
	if r.Endpoint, err = endpoint.New(&endpoint.Options{Session: so, Pool: po, Handler: ho, Release: release}); err != nil {
		return nil, err
	}
	r.h = r.Handler()
	tel.watchRegistry(r.Registry())
	tel.watchStateless(r.Pool())
	if sc.policy != nil && m.hooks.scopes != nil {
		m.hooks.scopes(sc.policy.Scopes()...)
	}
	return r, nil
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

// stop ends the server's sessions, stops the children of its stateless
// pool, and releases its launcher and guards.
func (r *running) stop(ctx context.Context) error { return r.Close(ctx) }

// reload reads the file again: servers it adds start, servers it removes
// drain (their sessions end once their requests in flight are answered,
// within --shutdown-grace; meanwhile they refuse new sessions and
// requests with 404), servers whose entry changed are replaced (the old
// one drains, new sessions go to the new one), and the others keep their
// sessions. A file that is not valid changes nothing.
func (m *multi) reload(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	path := m.cfg.file.path
	f, err := readConfigFile(path)
	if err != nil {
		m.logger.Error("configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again", "err", err)
		return
	}
	if !reflect.DeepEqual(canonical(f.global), canonical(m.cfg.file.global)) {
		m.logger.Warn("the global options (\"bridge\") of the config file changed: they take effect when the bridge restarts", "config", path)
	}
	var added, changed, unchanged, removed []string
	var start []*serverSpec
	seen := map[string]bool{}
	for _, s := range f.servers {
		seen[s.name] = true
		switch r := m.running[s.name]; {
		case r == nil:
			added = append(added, s.name)
			start = append(start, s)
		case r.spec.canon != s.canon || r.guardFiles != guardFilesOf(m.cfg, path, s):
			// A changed entry, or a changed policy or pin file it names.
			changed = append(changed, s.name)
			start = append(start, s)
		default:
			unchanged = append(unchanged, s.name)
		}
	}
	for name := range m.running {
		if !seen[name] {
			removed = append(removed, name)
		}
	}
	started, err := m.startAll(ctx, f, start)
	if err != nil {
		m.logger.Error("configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again", "err", err)
		return
	}
	for _, r := range started {
		name := r.spec.name
		if old := m.running[name]; old != nil {
			m.logger.Info("server changed in the configuration: replacing it; its sessions drain, new sessions go to the new one", "server_name", name)
			m.retire(old)
		}
		m.running[name] = r
		m.servers.Set(name, r.h)
	}
	for _, name := range removed {
		m.logger.Info("server removed from the configuration: its sessions drain (new requests in them get 503), new sessions get 404", "server_name", name)
		m.retire(m.running[name])
		delete(m.running, name)
	}
	m.cfg.file.servers = f.servers
	m.logger.Info("configuration reloaded", "config", path,
		"added", added, "removed", removed, "changed", changed, "unchanged", unchanged)
}

// guardFilesOf is the digest of the policy and pin files a server names
// itself (config.guardFiles); "" if its entry is not valid (startAll says
// why).
func guardFilesOf(global *config, path string, s *serverSpec) string {
	sc, err := serverConfig(global, path, s)
	if err != nil {
		return ""
	}
	return sc.guardFiles
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

// retire drains a server in the background: no new session or request,
// the requests in flight finish within --shutdown-grace, then its sessions
// end and it is forgotten.
func (m *multi) retire(r *running) {
	// New sessions and requests get 503; its pool takes no new call (503
	// with Retry-After): those it took, parked ones included, finish
	// before it closes.
	r.Retire()
	m.drains.Add(1)
	go func() {
		defer m.drains.Done()
		name := r.spec.name
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownGrace)
		// Its stateless calls too (retries of a parked call come to the
		// new server, if any: this one's end at --request-state-ttl).
		err := r.WaitIdle(ctx)
		cancel()
		if err != nil {
			m.logger.Warn("ending the sessions of a removed server with requests still in flight after --shutdown-grace", "server_name", name, "err", err)
		}
		stopCtx, cancelStop := context.WithTimeout(context.Background(), sandbox.StopBudget(m.cfg.StopGrace))
		defer cancelStop()
		if err := r.stop(stopCtx); err != nil {
			m.logger.Error("some MCP servers did not stop", "server_name", name, "err", err)
		}
		m.servers.Remove(name, r.h)
		m.mu.Lock()
		if m.running[name] == nil {
			// Removed, not replaced, and not added again since: its
			// gauges go with it.
			r.tel.drop()
		}
		m.mu.Unlock()
		m.logger.Info("server drained", "server_name", name)
	}()
}

func (m *multi) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.servers.ServeHTTP(w, r) }

func (m *multi) Drain() { m.servers.Drain() }

func (m *multi) list() []*running {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*running, 0, len(m.running))
	for _, r := range m.running {
		out = append(out, r)
	}
	return out
}

func (m *multi) WaitIdle(ctx context.Context) error {
	for _, r := range m.list() {
		if err := r.WaitIdle(ctx); err != nil { // sessions and stateless calls
			return err
		}
	}
	return nil
}

func (m *multi) Len() int {
	n := 0
	for _, r := range m.list() {
		n += r.Len()
	}
	return n
}

// Shutdown ends every server's sessions, waits for the draining ones, and
// releases the launchers.
func (m *multi) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	rs := make([]*running, 0, len(m.running))
	for _, r := range m.running {
		rs = append(rs, r)
	}
	m.mu.Unlock()
	errs := make(chan error, len(rs))
	for _, r := range rs {
		go func() { errs <- r.stop(ctx) }()
	}
	var all []error
	for range rs {
		all = append(all, <-errs)
	}
	m.drains.Wait()
	return errors.Join(all...)
}

// onSIGHUP runs each of fns, in order, whenever SIGHUP arrives on hup
// (which the caller has passed to signal.Notify), until stop is called
// (which waits for a run under way). It is the bridge's one SIGHUP handler:
// what reloads on SIGHUP registers here. Without fns, a SIGHUP is logged as
// having nothing to reload: it never ends the process (its default action
// would cut every session without a drain, issue 26).
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

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// endpointOptions are the options of the configuration's server (the
// one-command form's, or a server of the file: its configuration with its
// keys, serverConfig), as endpoint.Build takes them.
func endpointOptions(cfg *config) *endpoint.ServerOptions {
	rate := sandbox.StderrRate{LinesPerSecond: cfg.StderrLinesPerSecond, Burst: cfg.StderrBurst}
	o := &endpoint.ServerOptions{
		Name:    cfg.serverName,
		Sandbox: cfg.Sandbox,
		Local: sandbox.LocalOptions{
			Env:             append(slices.Clip(cfg.env), cfg.serverEnv...), // with the config file's "env" of the server
			Dir:             cfg.serverDir,
			StderrLineBytes: int(cfg.StderrLineBytes),
			StderrRate:      rate,
		},
		Unsupervised: cfg.LocalUnsupervised,
		Remote:       cfg.remote,
		Docker: sandbox.DockerOptions{
			Image:           cfg.Image,
			Command:         cfg.command,
			Pull:            cfg.Pull,
			Network:         cfg.SandboxNetwork,
			Mounts:          cfg.SandboxMounts,
			Env:             append(slices.Clip(cfg.SandboxEnv), cfg.serverEnv...),
			Memory:          cfg.memory,
			CPUs:            cfg.SandboxCPUs,
			Pids:            cfg.SandboxPids,
			User:            cfg.SandboxUser,
			Instance:        cfg.Instance,
			StderrRate:      rate,
			Runtime:         cfg.SandboxRuntime,
			StderrLineBytes: int(cfg.StderrLineBytes),
			Egress:          cfg.SandboxEgress,
		},
		Warm:       cfg.Warm,
		StopGrace:  cfg.StopGrace,
		UserEnv:    cfg.userVars,
		SecretsDir: cfg.SecretsDir,

		SessionIdleTimeout: time.Duration(cfg.SessionIdleTimeout),
		MaxSessions:        cfg.MaxSessions,
		MaxMessageBytes:    int(cfg.MaxMessageBytes),
		LogMaxEvents:       cfg.LogMaxEvents,
		LogMaxBytes:        int64(cfg.LogMaxBytes),
		Limits: peer.Limits{
			RequestTimeout:    time.Duration(cfg.RequestTimeout),
			InitializeTimeout: time.Duration(cfg.InitializeTimeout),
			MaxRequests:       cfg.MaxRequestsPerSession,
			MaxQueuedBytes:    int64(cfg.MaxQueuedBytes),
			KeepAlive:         keepAlive(time.Duration(cfg.SSEKeepAlive)),
		},

		ChildEra:            cfg.ChildEra,
		PoolMin:             cfg.PoolMin,
		PoolMax:             cfg.PoolMax,
		PoolMaxPerPrincipal: cfg.PoolMaxPerPrincipal,
		PoolEvictIdle:       cfg.poolEvictIdle(),
		RequestStateTTL:     cfg.RequestStateTTL,

		Handler: handlerOptions(cfg),

		Policy:         cfg.policy,
		Lock:           cfg.lock,
		LockFile:       cfg.PinFile,
		OnPinViolation: cfg.OnPinViolation,
		Inspection:     cfg.inspection(),
		AuditLog:       cfg.AuditLog,
		AuditArgs:      cfg.AuditArgs,
		LogMessages:    cfg.LogMessages,
	}
	if len(cfg.command) > 0 {
		o.Local.Command, o.Local.Args = cfg.command[0], cfg.command[1:]
	}
	o.Limits.InitializeHint = o.InitializeHint()
	return o
}

// handlerOptions are a handler's options for a configuration (its path,
// and what the process shares, are endpoint's to set).
func handlerOptions(cfg *config) bridge.Options {
	return bridge.Options{
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
		AcceptSessionID:      cfg.AcceptSessionID,
	}
}

// inspection is what --max-description-bytes and --allow-hidden-unicode
// ask of every item a server lists.
func (c *config) inspection() pin.Inspection {
	return pin.Inspection{MaxDescriptionBytes: int(c.MaxDescriptionBytes), AllowHiddenUnicode: c.AllowHiddenUnicode}
}

// keepAlive is bridge.Options.SSEKeepAlive for --sse-keepalive, whose 0
// turns keep-alives off (the option's 0 is its default).
func keepAlive(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// buildServer builds the endpoint of the configuration's server at path,
// naming the flag or the file's key of an option it refuses.
func buildServer(ctx context.Context, sh *endpoint.Shared, cfg *config, path string) (*endpoint.Endpoint, error) {
	e, err := endpoint.Build(ctx, sh, endpointOptions(cfg), path)
	if oe := (*endpoint.OptionError)(nil); errors.As(err, &oe) && oe.Field == "AuditLog" {
		if cfg.serverName != "" {
			return nil, fmt.Errorf("key \"audit-log\": %w", oe.Err)
		}
		return nil, fmt.Errorf("--audit-log: %w", oe.Err)
	}
	return e, explain(err)
}

// multi serves the servers and aggregates of a --config file
// (endpoint.Configuration: each server at /servers/NAME/mcp, the
// aggregates at /mcp and /groups/NAME/mcp), and reloads the file
// (reload, on SIGHUP).
type multi struct {
	*endpoint.Configuration
	cfg    *config // the global configuration; cfg.file is the file read at start
	logger *slog.Logger
	shared *endpoint.Shared

	mu sync.Mutex // serializes reloads
}

func newMulti(cfg *config, logger *slog.Logger, sh *endpoint.Shared) *multi {
	edge := handlerOptions(cfg)
	edge.Path = bridge.DefaultPath
	return &multi{cfg: cfg, logger: logger, shared: sh, Configuration: endpoint.NewConfiguration(&endpoint.SetOptions{
		// The checks, /metrics and the OAuth metadata.
		Edge:       sh.HandlerOptions(edge),
		Grace:      cfg.ShutdownGrace,
		StopBudget: sandbox.StopBudget(cfg.StopGrace),
		Forget:     sh.Forget, // its gauges go with it
		Logger:     logger,
	})}
}

// start starts every server and aggregate of the file; if one cannot
// start, none serves.
func (m *multi) start(ctx context.Context) error {
	c, err := m.configuration(m.cfg.file)
	if err != nil {
		return err
	}
	if _, _, err := m.Apply(ctx, c); err != nil {
		return errors.Join(fmt.Errorf("config %s: %w", m.cfg.file.Path, err), m.Close(context.Background()))
	}
	return nil
}

// configuration is f as endpoint.Configuration applies it: each server's
// and each aggregate's configuration checked first.
func (m *multi) configuration(f *configfile.File) (endpoint.Config, error) {
	members, err := m.members(f)
	if err != nil {
		return endpoint.Config{}, err
	}
	aggs, err := m.aggregateSpecs(f)
	return endpoint.Config{Servers: members, Aggregates: aggs}, err
}

// members are the servers of f, as the set applies them: each one's
// configuration is checked first.
func (m *multi) members(f *configfile.File) ([]endpoint.Member, error) {
	members := make([]endpoint.Member, len(f.Servers))
	for i, s := range f.Servers {
		sc, err := serverConfig(m.cfg, f.Path, s)
		if err != nil {
			return nil, err
		}
		members[i] = endpoint.Member{
			Name: s.Name,
			// A changed entry, or a changed policy or pin file it names,
			// replaces the server.
			Key: s.Canon + "\x00" + sc.guardFiles,
			Build: func(ctx context.Context) (*endpoint.Endpoint, error) {
				warnLoosenings(sc, m.logger.With("server_name", s.Name))
				return buildServer(ctx, m.shared, sc, bridge.ServerPath(s.Name))
			},
		}
	}
	return members, nil
}

// reload reads the file again: servers it adds start, servers it removes
// drain (their sessions end once their requests in flight are answered,
// within --shutdown-grace; meanwhile they refuse new sessions and
// requests with 404), servers whose entry changed are replaced (the old
// one drains, new sessions go to the new one), and the others keep their
// sessions; aggregates alike (endpoint.Configuration.Apply). A file that
// is not valid changes nothing.
func (m *multi) reload(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	path := m.cfg.file.Path
	f, err := configfile.Read(path)
	if err != nil {
		m.logger.Error("configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again", "err", err)
		return
	}
	if !reflect.DeepEqual(configfile.Canonical(f.Global), configfile.Canonical(m.cfg.file.Global)) {
		m.logger.Warn("the global options (\"bridge\") of the config file changed: they take effect when the bridge restarts", "config", path)
	}
	c, err := m.configuration(f)
	var ch, ach endpoint.Changes
	if err == nil {
		ch, ach, err = m.Apply(ctx, c)
		if errors.Is(err, endpoint.ErrClosed) {
			return
		}
		if err != nil {
			err = fmt.Errorf("config %s: %w", f.Path, err)
		}
	}
	if err != nil {
		m.logger.Error("configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again", "err", err)
		return
	}
	m.cfg.file.Servers, m.cfg.file.Groups, m.cfg.file.Bounds = f.Servers, f.Groups, f.Bounds
	m.logger.Info("configuration reloaded", "config", path,
		"added", ch.Added, "removed", ch.Removed, "changed", ch.Changed, "unchanged", ch.Unchanged,
		"aggregates_added", ach.Added, "aggregates_removed", ach.Removed, "aggregates_changed", ach.Changed, "aggregates_in_place", ach.InPlace)
}

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

package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Build assembles one server's whole stack from its options and what the
// process shares, serving at path: its guards and telemetry, its launcher
// (the sandbox's, per-user credentials, warm spares), its session
// registry and its 2026-07-28 pool, both on that launcher and chain and
// under the same limits, and the handler that serves both. The endpoint's
// Close releases all of it. ctx bounds what Build does before serving
// (a Docker image's check, the removal of an earlier process's leftovers).
func Build(ctx context.Context, sh *Shared, o *ServerOptions, path string) (*Endpoint, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	logger := sh.logger()
	if o.Name != "" {
		logger = logger.With("server_name", o.Name)
	}
	tel := newTelemetry(sh, o.Name, logger)
	g, err := newGuards(o, sh, tel, logger)
	if err != nil {
		return nil, err
	}
	release := func() error {
		if err := g.close(); err != nil {
			return fmt.Errorf("closing the audit log: %w", err)
		}
		return nil
	}
	lo := *o
	var who *launchPrincipals
	if lo.sandbox() == SandboxDocker && len(lo.Docker.Egress) > 0 {
		// Every decision of the egress proxy is reported: audited with
		// the principal of the launch, counted, refusals logged.
		who = newLaunchPrincipals()
		lo.Docker.OnEgress = egressReporter(o.Name, g.audit, tel, who, logger)
	}
	launcher, closeLauncher, err := newLauncher(ctx, &lo, sh, tel, who, logger)
	if err != nil {
		return nil, errors.Join(err, release())
	}
	closeGuards := release
	release = func() error { closeLauncher(); return closeGuards() }

	e, err := serve(sh, o, path, launcher, o.ChildEra, g, tel, logger, release)
	if err != nil {
		return nil, err
	}
	if o.Policy != nil && sh.Scopes != nil {
		// The protected resource metadata lists what the policy asks for,
		// so that clients can request those scopes up front.
		sh.Scopes(o.Policy.Scopes()...)
	}
	return e, nil
}

// serve builds the endpoint that serves launcher's children at path in
// both eras, with o's limits, session bounds, pool bounds and handler
// options, the guards g (the whole chain of each session and each pool
// child) and the telemetry tel; release is the endpoint's Release. Build
// and BuildAggregate both end here, so that a server alone and an
// aggregate run on one assembly.
func serve(sh *Shared, o *ServerOptions, path string, launcher sandbox.Launcher, era pool.Era, g *guards, tel *telemetry, logger *slog.Logger, release func() error) (*Endpoint, error) {
	// One set of limits for both eras, and one governor hook each.
	limits := o.Limits
	limits.Inflight = nil
	so := &session.Options{
		Launcher:          session.LauncherOf(launcher),
		IdleTimeout:       o.SessionIdleTimeout,
		MaxSessions:       o.MaxSessions,
		MaxMessageBytes:   o.MaxMessageBytes,
		LogMaxEvents:      o.LogMaxEvents,
		LogMaxBytes:       o.LogMaxBytes,
		LogBudget:         sh.LogBudget,
		InitializeTimeout: limits.InitializeTimeout,
		InitializeHint:    limits.InitializeHint,
		RequestTimeout:    limits.RequestTimeout,
		MaxRequests:       limits.MaxRequests,
		MaxQueuedBytes:    limits.MaxQueuedBytes,
		Logger:            logger,
		// The whole chain is each session's (guards.chain).
		InterceptSession: g.forSession,
		Inflight:         sh.inflight(),
		Observer:         tel.observer(),
	}
	if sh.Affinity != nil {
		so.NewID = sh.Affinity.NewID
	}
	poolLimits := so.Limits(sh.inflight()) // the sessions' limits hold for stateless calls too
	po := &pool.Options{
		Launch: func(ctx context.Context, name string) (peer.Process, error) {
			return launcher.Launch(statelessLaunch(ctx), name)
		},
		Era:             era,
		Min:             o.PoolMin,
		Max:             o.PoolMax,
		MaxPerPrincipal: o.PoolMaxPerPrincipal,
		EvictIdle:       o.PoolEvictIdle,
		StateTTL:        o.RequestStateTTL,
		// The front end keeps every stateless stream alive, listens
		// included, at the handler's keep-alive.
		KeepAlive:     -1,
		OtherVersions: bridge.SessionVersions(),
		// Principals differ whenever requests are authenticated: results
		// may differ per principal, and each has its share of the pool.
		PrivateCache: sh.Authenticates,
		Peer:         peer.Options{MaxMessageBytes: o.MaxMessageBytes},
		Limits:       poolLimits,
		// The guards hold for revision 2026-07-28 clients too: each child
		// of the pool gets the chain a session's server gets.
		ChildIntercept: g.forChild,
		// A child's resource updates go to several callers: the pool asks
		// the policy for each subscription's.
		Readable: g.readable,
		Logger:   logger,
	}
	if sh.Affinity != nil {
		// requestStates are signed with the affinity secret and name this
		// instance, so that any instance can verify a retry and forward
		// it to the one holding the parked call.
		po.Secret = sh.AffinitySecret
		po.Instance = sh.Affinity.Self()
	}
	ho := o.Handler
	ho.Path = path
	ho.SSEKeepAlive = limits.KeepAlive
	ho.Logger = logger
	e, err := New(&Options{Session: so, Pool: po, Handler: sh.HandlerOptions(ho), Release: release})
	if err != nil {
		return nil, err
	}
	tel.watch(e.Registry(), e.Pool())
	return e, nil
}

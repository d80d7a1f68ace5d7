// Command bridge puts a stdio MCP server on the network: it serves MCP
// Streamable HTTP on one endpoint and runs one server per session, locally
// or in a locked-down Docker container.
//
//	bridge [flags] -- COMMAND [ARGS...]
//	bridge image build --from SPEC ...
//	bridge deploy aws --stack NAME ...
//
// Every flag has a BRIDGE_* environment variable; flags win. cmd/bridge owns
// start-up and the shutdown order: stop accepting, drain, end sessions, exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/procs"
	"github.com/mcp-bridge/mcp-bridge/session"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "image":
			return runImage(args[1:], stdout, stderr)
		case "deploy":
			return runDeploy(args[1:], stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\nRun 'bridge --help' for usage.\n", err)
		return 2
	}
	logger := newLogger(cfg, stderr)
	if err := serve(ctx, cfg, logger, nil); err != nil {
		logger.Error("bridge stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(cfg *config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the bridge until ctx is done or SIGINT/SIGTERM arrives. If
// ready is not nil, it receives the listening address once serving.
func serve(ctx context.Context, cfg *config, logger *slog.Logger, ready chan<- net.Addr) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var router *affinity.Router
	if len(cfg.affinitySecret) > 0 {
		self, err := affinity.ResolveSelf(ctx, cfg.AffinityAddr, cfg.Listen, nil)
		if err != nil {
			return fmt.Errorf("--affinity-addr: %w", err)
		}
		if router, err = affinity.New(&affinity.Options{Self: self, Secret: cfg.affinitySecret}); err != nil {
			return fmt.Errorf("session affinity: %w", err)
		}
		logger.Info("session affinity on: session IDs name this instance", "self", self)
	}
	var newID func() (string, error)
	var inflight func(int)
	if router != nil {
		newID = router.NewID
	} else {
		// With affinity, requests forwarded to their owner are not in
		// flight here: the governor would not see them, so it stays off.
		var stopGovernor func()
		inflight, stopGovernor = procs.Start(logger)
		defer stopGovernor()
	}
	var fe frontend
	if cfg.file != nil {
		m := newMulti(cfg, logger, newID, inflight)
		if err := m.start(ctx); err != nil {
			return err
		}
		defer onSIGHUP(func() { m.reload(ctx) })()
		fe = m
	} else {
		launcher, closeLauncher, err := newLauncher(ctx, cfg, logger)
		if err != nil {
			return err
		}
		defer closeLauncher()
		sessOpts := sessionOptions(cfg, session.LauncherOf(launcher), logger)
		sessOpts.NewID, sessOpts.Inflight = newID, inflight
		reg := session.NewRegistry(sessOpts)
		fe = single{bridge.NewHandler(reg, handlerOptions(cfg, cfg.Path, logger)), reg}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = fe.Shutdown(context.Background())
		return fmt.Errorf("listening on %s: %w (is another process using the port? choose another with --listen)", cfg.Listen, err)
	}
	ln = bridge.LimitListener(ln, &bridge.LimitOptions{
		MaxConnections:          connectionLimit(cfg.MaxConnections, cfg.MaxSessions, logger),
		MaxConnectionsPerClient: cfg.MaxConnectionsPerClient,
		Logger:                  logger,
	})
	var handler http.Handler = fe
	if router != nil {
		fwd := bridge.NewForwarder(router, &bridge.ForwardOptions{Logger: logger})
		defer fwd.Close()
		handler = fwd.Wrap(fe)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout or WriteTimeout: they would cut long-lived SSE
		// streams. The handler bounds each body read and each event write
		// instead (--body-read-timeout, --write-timeout).
		IdleTimeout: cfg.HTTPIdleTimeout,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if m, ok := fe.(*multi); ok {
		logger.Info("bridge listening", "url", "http://"+ln.Addr().String(), "config", cfg.Config,
			"servers", m.servers.Names(), "paths", bridge.ServerPath("NAME"), "auth", len(cfg.tokens) > 0)
	} else {
		logger.Info("bridge listening", "url", "http://"+ln.Addr().String()+cfg.Path,
			"command", strings.Join(cfg.command, " "), "sandbox", cfg.Sandbox, "auth", len(cfg.tokens) > 0)
	}
	if ready != nil {
		ready <- ln.Addr()
	}

	select {
	case err := <-served:
		_ = fe.Shutdown(context.Background())
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}

	// Shutdown order: stop accepting (the listener closes, readiness
	// fails), let requests in flight finish within the grace period, then
	// end every session (what is still in flight gets a JSON-RPC error and
	// every stream ends), stop the servers, and close what remains.
	logger.Info("shutting down", "grace", cfg.ShutdownGrace, "sessions", fe.Len())
	fe.Drain()
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(context.Background()) }()
	graceCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := fe.WaitIdle(graceCtx); err != nil {
		logger.Warn("ending sessions with requests still in flight after the shutdown grace period", "err", err)
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 2*cfg.StopGrace+30*time.Second)
	defer cancelStop()
	if err := fe.Shutdown(stopCtx); err != nil {
		logger.Error("some MCP servers did not stop", "err", err)
	}
	// Every stream has ended; give handlers a moment to write their last
	// events before cutting connections that are stuck on slow clients.
	select {
	case <-httpDone:
	case <-time.After(5 * time.Second):
		_ = srv.Close()
		<-httpDone
	}
	logger.Info("bridge stopped")
	return nil
}

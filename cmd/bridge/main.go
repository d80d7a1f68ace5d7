// Command bridge puts a stdio MCP server on the network: it serves MCP
// Streamable HTTP on one endpoint and runs one server per session, locally
// or in a locked-down Docker container.
//
//	bridge [flags] -- COMMAND [ARGS...]
//	bridge image build --from SPEC ...
//	bridge deploy aws --stack NAME ...
//	bridge connect URL [flags]
//	bridge pin --output mcp-lock.json -- COMMAND [ARGS...]
//	bridge check -- COMMAND [ARGS...]
//
// Every flag has a BRIDGE_* environment variable; flags win. cmd/bridge owns
// start-up and the shutdown order: stop accepting, drain, end sessions, exit.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/gcfloor"
	"github.com/mcp-bridge/mcp-bridge/internal/logx"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

func main() {
	// The supervisor of a local server (sandbox/supervise.go): this binary
	// re-executed, before anything else runs.
	if len(os.Args) > 1 && os.Args[1] == sandbox.SuperviseArg {
		sandbox.Supervise(os.Args[2:])
	}
	// The egress proxy (egress/), in its container: this binary again.
	if len(os.Args) > 1 && os.Args[1] == egress.ProxyArg {
		os.Exit(egress.Main(os.Stdin, os.Stdout, os.Getenv))
	}
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
		case "help":
			// "bridge help" is a question, not a server named help (that
			// is "bridge -- help").
			usage(newFlagSet(defaultConfig()), stdout)
			return 0
		case "version", "-version", "--version":
			fmt.Fprintln(stdout, version())
			return 0
		case "connect":
			return runConnect(ctx, args[1:], os.Stdin, stdout, stderr)
		case "pin":
			return runPin(ctx, args[1:], stdout, stderr)
		case "check":
			return runCheck(ctx, args[1:], stdout, stderr)
		}
	}
	cfg, err := parseConfig(args)
	if errors.Is(err, flag.ErrHelp) {
		// The defaults shown include the environment's.
		usage(newFlagSet(helpConfig()), stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge: %v\nRun 'bridge --help' for usage.\n", err)
		return 2
	}
	logger := newLogger(cfg, stderr)
	warnLoosenings(cfg, logger)
	if err := serve(ctx, cfg, logger, nil); err != nil {
		var se startError
		if errors.As(err, &se) {
			// Nothing was served: one plain line, like a configuration error.
			fmt.Fprintf(stderr, "bridge: %v\n", se.err)
			return 1
		}
		logger.Error("bridge stopped", "err", err)
		return 1
	}
	return 0
}

// startError is an error of serve before it served anything.
type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }
func (e startError) Unwrap() error { return e.err }

// version is the module version and VCS revision the binary was built from.
func version() string {
	v := "bridge (unknown version)"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v = "bridge " + bi.Main.Version
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" (revision %s, %s%s)", rev, at, modified)
	}
	return v + " " + bi.GoVersion
}

func newLogger(cfg *config, w io.Writer) *slog.Logger {
	return logx.New(w, cfg.LogFormat, cfg.logLevel)
}

// serve runs the bridge until ctx is done or SIGINT/SIGTERM arrives. If
// ready is not nil, it receives the listening address once serving.
func serve(ctx context.Context, cfg *config, logger *slog.Logger, ready chan<- net.Addr) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A SIGHUP during start-up (a Docker pull, a slow --warm) must not end
	// the process either: it waits here until onSIGHUP handles it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	defer gcfloor.Start()()

	var scopes []string
	if cfg.policy != nil {
		scopes = cfg.policy.Scopes()
	}
	// The servers of a config file share the global audit log; the one
	// server of the command opens its own.
	var sharedAudit string
	if cfg.file != nil {
		sharedAudit = cfg.AuditLog
	}
	proc, err := endpoint.NewProcess(ctx, &endpoint.ProcessOptions{
		Telemetry: *telemetryOptions(cfg),
		Auth: auth.Options{StaticTokens: cfg.tokens, Issuer: cfg.OAuthIssuer, ResourceURL: cfg.ResourceURL,
			Scopes: cfg.OAuthScopes, TokenTypes: cfg.OAuthTokenTypes, IntrospectionURL: cfg.OAuthIntrospectionURL,
			ClientID: cfg.OAuthClientID, ClientSecret: cfg.OAuthClientSecret},
		AffinitySecret: cfg.affinitySecret, AffinitySelf: cfg.AffinityAddr, Listen: cfg.Listen,
		LogMaxTotalBytes: int64(cfg.LogMaxTotalBytes),
		AuditLog:         sharedAudit, AuditArgs: cfg.AuditArgs,
		Scopes: scopes, Logger: logger,
	})
	if err != nil {
		return startError{explain(err)}
	}
	defer proc.Close()
	sh := proc.Shared
	if sh.Auth.OAuth() {
		warnResourcePath(cfg, logger)
	}
	// TLS files are checked before any server starts: a bad key ends
	// start-up with nothing to undo.
	tlsConf, reloadTLS, err := bridge.NewTLSConfig(&bridge.TLSOptions{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, ClientCAFile: cfg.TLSClientCA, Logger: logger})
	if err != nil {
		return startError{err}
	}
	// Servers of a bridge that died with their supervisors (kill -9 of
	// both, the OOM killer) are ended before serving: once per process,
	// not per server or reload, and never by a library user's endpoints
	// (a test's in-process bridge must not end another test's orphans).
	if n, err := sandbox.KillLocalLeftovers(); err != nil {
		logger.Warn("could not end every process left by an earlier bridge", "err", err)
	} else if n > 0 {
		logger.Info("ended processes left by an earlier bridge", "count", n)
	}
	var fe endpoint.FrontEnd
	var reload []func() // what SIGHUP reloads
	if cfg.file != nil {
		m := newMulti(cfg, logger, sh)
		if err := m.start(ctx); err != nil {
			return startError{err}
		}
		reload = append(reload, func() { m.reload(ctx) })
		fe = m
	} else {
		one := endpoint.NewSet(&endpoint.SetOptions{One: true, Grace: cfg.ShutdownGrace,
			StopBudget: sandbox.StopBudget(cfg.StopGrace), Logger: logger})
		fe = one
		if _, err := one.Apply(ctx, []endpoint.Member{{Build: func(ctx context.Context) (*endpoint.Endpoint, error) {
			return buildServer(ctx, sh, cfg, cfg.Path)
		}}}); err != nil {
			return startError{err}
		}
	}

	if reloadTLS != nil {
		reload = append(reload, reloadTLS)
	}
	// One SIGHUP handler for all that reloads, started before the bridge
	// listens: a SIGHUP sent once it says so never meets the default
	// action (exit).
	defer onSIGHUP(logger, hup, reload...)()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = fe.Close(context.Background())
		hint := "choose another address with --listen"
		if errors.Is(err, syscall.EADDRINUSE) {
			hint = "another process is using the port; " + hint
		}
		return startError{fmt.Errorf("--listen %s: %w (%s)", cfg.Listen, err, hint)}
	}
	ln = bridge.LimitListener(ln, &bridge.LimitOptions{
		MaxConnections:          bridge.ConnectionLimit(cfg.MaxConnections, cfg.MaxSessions+max(cfg.Warm, 0), logger),
		MaxConnectionsPerClient: cfg.MaxConnectionsPerClient,
		Logger:                  logger,
	})
	scheme := "http://"
	if tlsConf != nil {
		ln, scheme = tls.NewListener(ln, tlsConf), "https://"
	}
	logServerEnv(cfg, logger)
	base := scheme + bridge.ListenURLHost(cfg.Listen, ln.Addr())
	if cfg.file != nil {
		logger.Info("bridge listening", "url", base, "config", cfg.Config,
			"servers", fe.Names(), "paths", bridge.ServerPath("NAME"), "auth", authMode(cfg))
	} else {
		logger.Info("bridge listening", "url", base+cfg.Path,
			"command", strings.Join(cfg.command, " "), "sandbox", cfg.Sandbox, "auth", authMode(cfg))
	}
	if ready != nil {
		ready <- ln.Addr()
	}

	return endpoint.Serve(ctx, ln, fe, &endpoint.ServeOptions{Handler: proc.Handler(fe), IdleTimeout: time.Duration(cfg.HTTPIdleTimeout),
		Grace: cfg.ShutdownGrace, StopBudget: sandbox.StopBudget(cfg.StopGrace), Logger: logger})
}

// telemetryOptions are the process's metrics and tracing options; they log
// to the process's logger (ProcessOptions.Logger).
func telemetryOptions(cfg *config) *endpoint.TelemetryOptions {
	return &endpoint.TelemetryOptions{NoMetrics: cfg.NoMetrics, MetricsListen: cfg.MetricsListen,
		AllowedHosts: cfg.AllowedHosts, OTLPEndpoint: cfg.OTLPEndpoint}
}

// warnResourcePath warns when --resource-url names another path than the
// one-command form's endpoint (accepted silently). Clients take
// the URL they connect to as the resource they ask a token for, and check
// that the protected resource metadata names it ("MCP clients MUST use the
// canonical URI of the MCP server as the resource parameter", RFC 8707 as
// the authorization spec applies it), so a mismatch fails every client's
// authorization. A warning, not a refusal: behind a reverse proxy that
// rewrites paths, the public path is not the bridge's own. Under --config
// the servers' paths are many (/servers/NAME/mcp): not checked.
func warnResourcePath(cfg *config, logger *slog.Logger) {
	if cfg.Config != "" {
		return
	}
	u, err := url.Parse(cfg.ResourceURL)
	if err != nil || u.Path == cfg.Path {
		return
	}
	logger.Warn("--resource-url names another path than the MCP endpoint's: clients that connect to the endpoint ask for a token for its URL, which then names another resource",
		"resource_url", cfg.ResourceURL, "resource_path", u.Path, "endpoint_path", cfg.Path,
		"hint", "give --resource-url the URL clients reach this endpoint at (path "+cfg.Path+"), unless a reverse proxy rewrites the path")
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/mcp-bridge/mcp-bridge/check"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

const checkUsage = `Usage:
  bridge check [--initialize-timeout D] [--env NAME] [sandbox flags] -- COMMAND [ARGS...]

Starts the server once, as bridge would for a session (--env, --env-inherit,
--sandbox, --image and the other sandbox flags apply), sends initialize and
lists its tools, prompts, resources and resource templates (those its
capabilities announce), then says in plain words what is wrong: not an MCP
server (what it writes on stdout is not JSON-RPC), alive but silent (a
block-buffered stdout, e.g. Python's), exited, slow to start, noisy on stderr,
or descriptions hiding Unicode a reviewer does not see (zero-width characters,
bidirectional controls, tag characters). Exits 0 when nothing is wrong, 1
otherwise (warnings alone do not fail).

Run 'bridge --help' for every flag.
`

// runCheck is "bridge check": it reads the flags into check.Options and
// prints what check.Run found.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, usageErr, code := parseOneServer("check", args, stdout, stderr, checkUsage, nil, "initialize-timeout", "max-description-bytes", "allow-hidden-unicode")
	if cfg == nil {
		return code
	}
	if len(cfg.command) == 0 && !(cfg.Sandbox == "docker" && cfg.Image != "") {
		return usageErr("no server command: give it after --, as in: bridge check -- python3 server.py")
	}
	if cfg.Config != "" {
		return usageErr("--config: check one server at a time, its command after --")
	}
	if err := cfg.finish(); err != nil {
		return usageErr(err.Error())
	}
	o := endpointOptions(cfg)
	r := check.Run(ctx, &check.Options{
		NewLauncher: func(ctx context.Context, logger *slog.Logger) (sandbox.Launcher, func(), error) {
			return endpoint.NewLauncher(ctx, o, logger)
		},
		InitializeTimeout: time.Duration(cfg.InitializeTimeout),
		MaxMessageBytes:   int(cfg.MaxMessageBytes),
		Inspection:        cfg.inspection(),
		StopGrace:         cfg.StopGrace,
		BufferingHint:     o.BufferingHint(),
		Logger:            newLogger(cfg, stderr),
	})
	r.Print(stdout)
	if len(r.Problems) > 0 {
		return 1
	}
	return 0
}

// parseOneServer reads the environment, then the flags, of a subcommand
// that starts the server once (bridge check, bridge pin): extra adds its
// own flags, and --help shows the flags named in help beside the process
// and sandbox groups. Without a configuration to run (help, a bad flag or
// variable) it returns nil and the exit status; usageErr says a mistake
// and returns 2.
func parseOneServer(name string, args []string, stdout, stderr io.Writer, usage string, extra func(*flag.FlagSet), help ...string) (cfg *config, usageErr func(string) int, code int) {
	usageErr = func(msg string) int {
		fmt.Fprintf(stderr, "bridge %s: %s\nRun 'bridge %s --help' for usage.\n", name, msg, name)
		return 2
	}
	cfg = defaultConfig()
	if err := envconfig.Process("", cfg); err != nil {
		return nil, usageErr, usageErr(envError(err).Error())
	}
	fs := newFlagSet(cfg)
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			flagHelp.Subcommand(stdout, usage, fs, help, gProcs, gDocker)
			return nil, usageErr, 0
		}
		return nil, usageErr, usageErr(err.Error())
	}
	cfg.command = fs.Args()
	return cfg, usageErr, 0
}

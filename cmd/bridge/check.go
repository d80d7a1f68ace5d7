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
	cfg := defaultConfig()
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "bridge check: %s\nRun 'bridge check --help' for usage.\n", msg)
		return 2
	}
	if err := envconfig.Process("", cfg); err != nil {
		return usageErr(envError(err).Error())
	}
	fs := newFlagSet(cfg)
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			flagHelp.Subcommand(stdout, checkUsage, fs, []string{"initialize-timeout", "max-description-bytes", "allow-hidden-unicode"}, gProcs, gDocker)
			return 0
		}
		return usageErr(err.Error())
	}
	cfg.command = fs.Args()
	if len(cfg.command) == 0 && !(cfg.Sandbox == "docker" && cfg.Image != "") {
		return usageErr("no server command: give it after --, as in: bridge check -- python3 server.py")
	}
	if cfg.Config != "" {
		return usageErr("--config: check one server at a time, its command after --")
	}
	if err := cfg.finish(); err != nil {
		return usageErr(err.Error())
	}
	r := check.Run(ctx, &check.Options{
		NewLauncher: func(ctx context.Context, logger *slog.Logger) (sandbox.Launcher, func(), error) {
			return newInnerLauncher(ctx, cfg, logger)
		},
		InitializeTimeout: time.Duration(cfg.InitializeTimeout),
		MaxMessageBytes:   int(cfg.MaxMessageBytes),
		Inspection:        cfg.inspection(),
		StopGrace:         cfg.StopGrace,
		BufferingHint:     pythonHint(cfg),
		Logger:            newLogger(cfg, stderr),
	})
	r.Print(stdout)
	if len(r.Problems) > 0 {
		return 1
	}
	return 0
}

package main

import (
	"context"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// newLauncher builds the launcher the configuration asks for, and a
// function that releases it at exit.
func newLauncher(ctx context.Context, cfg *config, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	if cfg.Sandbox == "docker" {
		return newDockerLauncher(ctx, cfg, logger)
	}
	l := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:         cfg.command[0],
		Args:            cfg.command[1:],
		StopGrace:       cfg.StopGrace,
		StderrLineBytes: cfg.StderrLineBytes,
		Logger:          logger,
	})
	return l, func() {}, nil
}

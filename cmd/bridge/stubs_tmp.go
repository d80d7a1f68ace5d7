package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

func newDockerLauncher(ctx context.Context, cfg *config, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	return nil, nil, errors.New("docker: not wired yet")
}

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

func runImage(args []string, stdout, stderr io.Writer) int  { return 2 }
func runDeploy(args []string, stdout, stderr io.Writer) int { return 2 }
func newDockerLauncher(ctx context.Context, cfg *config, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	return nil, nil, errors.New("docker: not wired yet")
}

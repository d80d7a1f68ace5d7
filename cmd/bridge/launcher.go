package main

import (
	"context"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// newInnerLauncher is the sandbox's launcher of the configuration's server
// alone (endpoint.NewLauncher), for the subcommands that run one child.
func newInnerLauncher(ctx context.Context, cfg *config, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	o, err := endpointOptions(cfg)
	if err != nil {
		return nil, nil, err
	}
	return endpoint.NewLauncher(ctx, o, logger)
}

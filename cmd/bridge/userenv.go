package main

// Per-user credentials (--user-env NAME=SECRET, a server's "userEnv" key,
// --secrets-dir): checked here, given to each child by endpoint (see
// endpoint.ServerOptions.UserEnv).

import (
	"errors"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// userVar is one per-user variable: the child's NAME, filled from SECRET.
type userVar = endpoint.UserVar

// userEnvEra makes the 2026-07-28 pool of a server with per-user
// variables run legacy children, which it keys by principal, when the edge
// authenticates: auto becomes legacy, modern is refused.
func (c *config) userEnvEra() error {
	if len(c.userVars) == 0 || !c.authenticates() {
		return nil
	}
	switch c.ChildEra {
	case pool.EraModern:
		return errors.New("--user-env with authentication needs --child-era legacy (or auto): a modern child serves every user of the pool")
	case pool.EraAuto:
		c.ChildEra = pool.EraLegacy
	}
	return nil
}

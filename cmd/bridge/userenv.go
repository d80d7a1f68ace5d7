package main

// Per-user credentials (--user-env NAME=SECRET, a server's "userEnv" key,
// --secrets-dir): checked here, given to each child by endpoint (see
// endpoint.ServerOptions.UserEnv).

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// secretName is what a secret may be called: it is a file name.
var secretName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

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

// parseUserEnv checks --user-env entries (NAME=SECRET).
func parseUserEnv(list []string) ([]userVar, error) {
	var out []userVar
	for _, e := range list {
		name, secret, ok := strings.Cut(e, "=")
		if !ok || !secretName.MatchString(secret) {
			return nil, fmt.Errorf("--user-env %q: want NAME=SECRET, SECRET a file name (letters, digits, '.', '_', '-')", e)
		}
		if _, err := sandbox.ParseEnv([]string{name + "=x"}, nil); err != nil {
			return nil, fmt.Errorf("--user-env %q: %v", e, errors.Unwrap(err))
		}
		out = append(out, userVar{Name: name, Secret: secret})
	}
	return out, nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// wantAggregate reports whether -only names the aggregate phase: like
// instr, it is never part of a run of every phase, so that a default run
// keeps its rounds (and their timing) as they were.
func (c *config) wantAggregate() bool {
	return slices.Contains(strings.Split(c.only, ","), "aggregate")
}

// aggregateMember is the name of the minimal server in the aggregate
// phase's configuration file; its echo is advertised at /mcp as
// aggregateMember + "__echo".
const aggregateMember = "m"

// aggregateTargets are the aggregate phase's targets: a call through /mcp,
// the aggregate of one member (the minimal server), against the same call
// on the member's own path /servers/m/mcp, in 2025 sessions and in
// revision 2026-07-28, each in a bridge of its own serving the same
// configuration file; each aggregate target is paired with its member
// path's in the same rounds. cleanup removes the file.
func aggregateTargets(c *config) (ts []*target, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "bridge-bench-aggregate-")
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	file, err := json.Marshal(map[string]any{"mcpServers": map[string]any{aggregateMember: map[string]any{"command": c.minimal}}})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	path := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		cleanup()
		return nil, nil, err
	}
	configTarget := func(name, urlPath, tool string, stateless bool) *target {
		return &target{name: name, phase: "aggregate", tool: tool, stateless: stateless,
			start: func(ctx context.Context) (string, func(), *process, *bridgeProc, error) {
				b, err := startBridge(ctx, c.bridge, "", false, "--config", path, "--max-sessions", "5000")
				if err != nil {
					return "", nil, nil, nil, err
				}
				return b.url + urlPath, func() { b.stopAndReport(name, 60*time.Second) }, b.process, b, nil
			}}
	}
	for _, era := range []struct {
		what      string
		stateless bool
	}{{"2025 sessions (SSE)", false}, {"2026-07-28 stateless", true}} {
		own := configTarget(fmt.Sprintf("bridge --config, %s, the member's own path /servers/%s/mcp", era.what, aggregateMember), "/servers/"+aggregateMember+"/mcp", "", era.stateless)
		agg := configTarget(fmt.Sprintf("bridge --config, %s, through the aggregate /mcp (%s__echo)", era.what, aggregateMember), "/mcp", aggregateMember+"__echo", era.stateless)
		agg.pair, agg.pairWhat = own, "the member's own path"
		ts = append(ts, own, agg)
	}
	return ts, cleanup, nil
}

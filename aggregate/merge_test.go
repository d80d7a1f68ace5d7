package aggregate_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// memberWith is a member running cacheServer with spec and extra
// environment.
func memberWith(t *testing.T, name, spec string, env ...string) aggregate.Member {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return aggregate.Member{Name: name, Launcher: sandbox.NewLocal(&sandbox.LocalOptions{
		Command: exe, Env: append(append(os.Environ(), cacheEnv+"="+spec), env...), StopGrace: 2 * time.Second, Logger: logger(t)})}
}

// initialize (2025) and server/discover (2026-07-28) merge the members'
// capabilities, a capability only if some member has it (no member has
// prompts; resources without subscribe, as the one member with resources
// says), and their instructions, each under its member's name. A URI two
// members list is refused: listed by neither, its read an error naming
// both, and one error line naming both.
func TestMergedCapabilitiesAndURIs(t *testing.T) {
	logs := &testlog.Buffer{}
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members = []aggregate.Member{
			memberWith(t, "x", "60000 public", cacheInstructionsEnv+"=use x gently", cacheResourceEnv+"=dup://note"),
			memberWith(t, "y", "30000 public", cacheResourceEnv+"=dup://note"),
		}
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			cs := f.connect(t, version, nil)
			init := cs.InitializeResult()
			caps := init.Capabilities
			if caps.Tools == nil || caps.Prompts != nil || caps.Resources == nil || caps.Resources.Subscribe {
				t.Errorf("capabilities %+v %+v; want tools and resources without subscribe, no prompts", caps, caps.Resources)
			}
			if !strings.Contains(init.Instructions, "## x\n\nuse x gently") || strings.Contains(init.Instructions, "## y") {
				t.Errorf("instructions %q; want x's under its name, nothing of y (which has none)", init.Instructions)
			}
			list, err := cs.ListResources(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range list.Resources {
				if r.URI == "dup://note" {
					t.Errorf("resources/list lists dup://note, which x and y both list; want it refused")
				}
			}
			_, err = cs.ReadResource(ctxT(t), &mcp.ReadResourceParams{URI: "dup://note"})
			if err == nil || !strings.Contains(err.Error(), `aggregate members "x", "y" all list "dup://note"`) {
				t.Errorf("reading dup://note: %v; want an error naming x and y", err)
			}
		})
	}
	if l := logs.String(); !strings.Contains(l, "aggregate members list one resource URI: it is refused") || !strings.Contains(l, `members="\"x\", \"y\""`) {
		t.Errorf("no log line naming both members of the URI dup://note:\n%s", l)
	}
}

package aggregate_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// cacheEnv makes the test binary a stdio MCP server (cacheServer) whose
// lists say the ttlMs and cacheScope of its value, "TTL SCOPE", or which
// speaks the 2025 revisions only ("legacy").
const cacheEnv = "AGGREGATE_TEST_CACHE_SERVER"

// cacheInstructionsEnv gives cacheServer these instructions.
const cacheInstructionsEnv = "AGGREGATE_TEST_CACHE_INSTRUCTIONS"

// cacheResourceEnv gives cacheServer a resource of that URI.
const cacheResourceEnv = "AGGREGATE_TEST_CACHE_RESOURCE"

// cacheServerMain runs the test binary as that server, when asked to.
func cacheServerMain() {
	spec := os.Getenv(cacheEnv)
	if spec == "" {
		return
	}
	o := &mcp.ServerOptions{Instructions: os.Getenv(cacheInstructionsEnv)}
	switch spec {
	case "legacy":
		o.SupportedProtocolVersions = []string{"2025-11-25"}
	case "modern-only":
		o.SupportedProtocolVersions = []string{"2026-07-28"}
	default:
		ttl, scope, _ := strings.Cut(spec, " ")
		ms, _ := strconv.Atoi(ttl)
		o.SetCacheable = func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = ms, scope }
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "cache", Version: "1"}, o)
	if uri := os.Getenv(cacheResourceEnv); uri != "" {
		// A resource, without resources.subscribe (no SubscribeHandler).
		s.AddResource(&mcp.Resource{URI: uri, Name: "note"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "note of " + spec}}}, nil
		})
	}
	mcp.AddTool(s, &mcp.Tool{Name: "hello"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "cache server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// cacheMember is a member running cacheServer with spec.
func cacheMember(t *testing.T, name, spec string) aggregate.Member {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return aggregate.Member{Name: name, Launcher: sandbox.NewLocal(&sandbox.LocalOptions{
		Command: exe, Env: append(os.Environ(), cacheEnv+"="+spec), StopGrace: 2 * time.Second, Logger: logger(t)})}
}

// Members of revision 2026-07-28 (found with server/discover) give the
// aggregate's lists their freshness: ttlMs is the least of the members',
// cacheScope "private" when any member's is. A member of the 2025
// revisions only (its server/discover refused, then initialized) says
// nothing: the list is stale at once, as a legacy server's.
func TestModernMembersCacheHints(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs [2]string
		ttl   int
		scope string
	}{
		{"least ttl", [2]string{"60000 public", "30000 public"}, 30000, "public"},
		{"any private", [2]string{"60000 public", "30000 private"}, 30000, "private"},
		{"a legacy member", [2]string{"60000 public", "legacy"}, 0, "public"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *aggregate.Options) {
				o.Members = []aggregate.Member{cacheMember(t, "x", tc.specs[0]), cacheMember(t, "y", tc.specs[1])}
			})
			cs := f.connect(t, "2026-07-28", nil)
			names, res := listTools(t, cs)
			if strings.Join(names, " ") != "x__hello y__hello" {
				t.Fatalf("tools/list: %v, want x__hello y__hello", names)
			}
			if res.TTLMs != tc.ttl || res.CacheScope != tc.scope {
				t.Errorf("tools/list: ttlMs %d, cacheScope %q; want %d, %q", res.TTLMs, res.CacheScope, tc.ttl, tc.scope)
			}
			old := f.connect(t, "2025-11-25", nil)
			if got := callText(t, old, "y__hello", nil); got != "hello" {
				t.Errorf("y__hello: %q", got)
			}
			// A 2026-07-28 call reaches a member limited to the 2025
			// revisions without the request's 2026-07-28 _meta, which
			// such a server refuses ("unsupported protocol version").
			if got := callText(t, cs, "y__hello", nil); got != "hello" {
				t.Errorf("y__hello: %q", got)
			}
		})
	}
}

// A member of revision 2026-07-28 only (its SDK answers initialize with
// 2025-11-25 and refuses what follows in a 2025 revision): the aggregate
// lists it (its catalog speaks 2026-07-28) and its calls are answered in
// both eras, though the member children serving sessions are initialized
// as 2025-11-25.
func TestModernOnlyMember(t *testing.T) {
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members = []aggregate.Member{cacheMember(t, "x", "modern-only"), cacheMember(t, "y", "legacy")}
	})
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			cs := f.connect(t, version, nil)
			if names := listed(t, cs); strings.Join(names, " ") != "x__hello y__hello" {
				t.Fatalf("tools/list: %v, want x__hello y__hello", names)
			}
			for _, name := range []string{"x__hello", "y__hello"} {
				res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: name})
				if err != nil || res.IsError {
					t.Errorf("%s in %s: %v %+v", name, version, err, res)
				}
			}
		})
	}
}

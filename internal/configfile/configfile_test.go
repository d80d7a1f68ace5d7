package configfile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
)

func write(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A file of servers, a group and the aggregates' bounds: servers sorted
// by name without the disabled ones (left out of their groups too), each
// server's own keys decoded, the group's bounds the file's with its own
// keys over them.
func TestRead(t *testing.T) {
	path := write(t, `{
		"bridge": {"log-level": "debug"},
		"mcpServers": {
			"b": {"command": "srv", "args": ["-v"], "env": {"K": "v"}, "request-timeout": "2m", "prefix": "bee"},
			"a": {"url": "https://example.com/mcp", "type": "sse", "headers": {"X": "1"}},
			"off": {"command": "srv", "disabled": true}
		},
		"aggregate": {"maxChildren": 8, "idleTimeout": "never"},
		"groups": {"g": {"servers": ["a", "b", "off"], "maxChildrenPerSession": 1, "failClosed": true}}
	}`)
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 2 || f.Servers[0].Name != "a" || f.Servers[1].Name != "b" {
		t.Fatalf("servers %+v, want a and b", f.Servers)
	}
	a, b := f.Servers[0], f.Servers[1]
	if a.Remote == nil || a.Remote.URL != "https://example.com/mcp" || a.Remote.Transport != "sse" || a.Remote.Headers["X"] != "1" {
		t.Errorf("remote a: %+v", a.Remote)
	}
	if !slices.Equal(b.Command, []string{"srv", "-v"}) || b.Env["K"] != "v" || b.Prefix != "bee" || !b.Opts.Has("request-timeout") || b.Opts.Has("max-sessions") ||
		time.Duration(b.Opts.RequestTimeout) != 2*time.Minute {
		t.Errorf("server b: %+v", b)
	}
	wantAll := endpoint.AggregateBounds{MaxChildren: 8, IdleTimeout: -1}
	if f.Bounds != wantAll {
		t.Errorf("bounds %+v, want %+v", f.Bounds, wantAll)
	}
	g := f.Groups[0]
	wantG := endpoint.AggregateBounds{MaxChildren: 8, MaxChildrenPerSession: 1, IdleTimeout: -1, FailClosed: true}
	if g.Name != "g" || !slices.Equal(g.Servers, []string{"a", "b"}) || g.Bounds != wantG {
		t.Errorf("group %+v, want servers a and b, bounds %+v", g, wantG)
	}
	if string(f.Global["log-level"]) != `"debug"` {
		t.Errorf("global %s", f.Global)
	}
}

// What is wrong is named by file, server or group, and key.
func TestReadErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{`{"mcpServers": {"a": {"command": "x", "max-sesions": 3}}}`, `server "a": key "max-sesions": unknown key`},
		{`{"mcpServers": {"a": {"command": "x", "request-timeout": "10"}}}`, `server "a": key "request-timeout": "10": a duration needs a unit, e.g. 10s`},
		{`{"mcpServers": {"a": {"url": "ftp://x"}}}`, `server "a": key "url": want the remote MCP server's URL`},
		{`{"mcpServers": {"a": {"url": "http://x", "command": "y"}}}`, `server "a": key "url": and command both given`},
		{`{"mcpServers": {"a": {"command": "x"}}, "groups": {"g": {"servers": ["z"]}}}`, `group "g": key "servers": "z" is not a server of mcpServers`},
		{`{"mcpServers": {"a": {"command": "x"}}, "groups": {"g": {"servers": ["a"], "maxChildren": -1}}}`, `group "g": key "maxChildren": want a whole number, 1 or more`},
		{`{"mcpServers": {"a": {"command": "x"}}, "aggregate": {"idleTimeout": "0s"}}`, `key "aggregate": idleTimeout: want a duration`},
		{`{"mcpServers": {"a": {"command": "x"}}, "bridge": {"config": "other.json"}}`, `key "bridge": config cannot name another config file`},
	} {
		path := write(t, c.file)
		_, err := Read(path)
		want := "config " + path + ": " + c.want
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s:\n%v\nwant it to start with\n%s", c.file, err, want)
		}
	}
}

// A reload compares entries in one form per content: key order and
// spacing do not matter.
func TestCanonical(t *testing.T) {
	x := write(t, `{"mcpServers": {"a": {"command": "x", "args": ["1"]}}, "bridge": {"log-level": "info"}}`)
	y := write(t, `{"bridge": {"log-level":"info"}, "mcpServers": {"a": {"args": ["1"],   "command": "x"}}}`)
	fx, err := Read(x)
	if err != nil {
		t.Fatal(err)
	}
	fy, err := Read(y)
	if err != nil {
		t.Fatal(err)
	}
	if fx.Servers[0].Canon != fy.Servers[0].Canon || Canonical(fx.Global)["log-level"] != Canonical(fy.Global)["log-level"] {
		t.Fatalf("%q and %q differ", fx.Servers[0].Canon, fy.Servers[0].Canon)
	}
}

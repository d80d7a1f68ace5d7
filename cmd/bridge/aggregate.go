package main

// Aggregation and remote servers in the --config file (issue 31).
//
//	{
//	  "bridge": {"aggregate-separator": "__"},
//	  "mcpServers": {
//	    "files":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"], "prefix": "fs"},
//	    "github": {"url": "https://api.githubcopilot.com/mcp/", "type": "http",
//	               "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
//	    "search": {"url": "https://search.example/mcp", "headerFiles": {"X-Api-Key": "/run/secrets/search-key"}}
//	  },
//	  "groups": {"code": {"servers": ["files", "github"], "separator": ".", "maxChildrenPerSession": 1}},
//	  "aggregate": {"maxChildren": 64, "idleTimeout": "10m"}
//	}
//
// /mcp serves every enabled server aggregated (unless --no-aggregate),
// /groups/NAME/mcp each group's servers; each server stays at
// /servers/NAME/mcp. A server's tools and prompts are advertised as
// PREFIX + separator + NAME, PREFIX being its "prefix" key or its name
// (a prefix keeps clients' names when the server is renamed).
//
// A server with "url" and no "command" is a remote MCP server, reached
// with connect's launcher: "type" "http" is Streamable HTTP, "sse" the
// legacy HTTP+SSE transport, none tries Streamable HTTP and falls back to
// HTTP+SSE. Its credentials come from the configuration only (the
// client's own Authorization never reaches it): "headers" are sent with
// every request, a "${VAR}" in a value replaced by the bridge's variable
// VAR (unset: an error at load), and "headerFiles" names a file per
// header, whose content (trailing newline dropped) is the value: both are
// read at load and at each reload (SIGHUP), which replaces the server
// when a file changed. Keys of a local server (args, env, cwd, the
// sandbox's, userEnv, allowHosts, warm, stderr-line-bytes) are refused.
//
// An aggregate's bounds and failure mode (boundKeys) are the top-level
// "aggregate" object's for every aggregate (/mcp and the groups), and a
// group's own keys for that group; what neither sets is the aggregate
// package's default.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/units"
)

// aggregateKeys are the keys of a server for aggregates and remote
// servers, beside desktopKeys' "type".
var aggregateKeys = []string{"prefix", "url", "headers", "headerFiles"}

// localOnlyKeys are refused for a remote server.
var localOnlyKeys = []string{"args", "env", "cwd", "userEnv", "allowHosts", "user-env",
	"sandbox", "image", "pull", "sandbox-network", "sandbox-egress", "sandbox-runtime", "sandbox-mount", "sandbox-env",
	"sandbox-memory", "sandbox-cpus", "sandbox-pids", "sandbox-user", "warm", "stderr-line-bytes"}

// remoteSpec is a remote server's entry.
type remoteSpec struct {
	url, transport string
	headers        map[string]string
	headerFiles    map[string]string
}

// groupSpec is one group of the file.
type groupSpec struct {
	name      string
	servers   []string
	separator string
	bounds    endpoint.AggregateBounds // the file's "aggregate", with the group's own keys
}

// boundKeys are the keys of an aggregate's bounds and failure mode, in
// the top-level "aggregate" (every aggregate's) and in a group (its own):
// maxChildren (member servers running across its sessions),
// maxChildrenPerSession, idleTimeout (a session's member server unused
// this long stops; "never") and failClosed (refuse lists and calls while
// a member is down).
var boundKeys = []string{"maxChildren", "maxChildrenPerSession", "idleTimeout", "failClosed"}

// setBound reads the value v of k, one of boundKeys, into b.
func setBound(b *endpoint.AggregateBounds, k string, v json.RawMessage) error {
	switch k {
	case "maxChildren", "maxChildrenPerSession":
		var n int
		if json.Unmarshal(v, &n) != nil || n < 1 {
			return errors.New("want a whole number, 1 or more")
		}
		if k == "maxChildren" {
			b.MaxChildren = n
		} else {
			b.MaxChildrenPerSession = n
		}
	case "idleTimeout":
		var s string
		var d units.Duration
		if json.Unmarshal(v, &s) != nil || d.UnmarshalText([]byte(s)) != nil || d == 0 {
			return errors.New(`want a duration such as 30s, 5m or 1h, or "never"`)
		}
		b.IdleTimeout = time.Duration(d)
	case "failClosed":
		if json.Unmarshal(v, &b.FailClosed) != nil {
			return errors.New("want true or false")
		}
	}
	return nil
}

// parseBounds reads the top-level "aggregate": the bounds of every
// aggregate.
func parseBounds(path string, raw json.RawMessage) (endpoint.AggregateBounds, error) {
	var b endpoint.AggregateBounds
	var entry map[string]json.RawMessage
	if strictUnmarshal(raw, &entry) != nil {
		return b, fileError(path, "", "aggregate", `want an object of the aggregates' bounds, e.g. {"maxChildren": 64, "idleTimeout": "10m"}`)
	}
	for _, k := range slices.Sorted(maps.Keys(entry)) {
		if !slices.Contains(boundKeys, k) {
			return b, fileError(path, "", "aggregate", "%s: unknown key; it takes %s", k, strings.Join(boundKeys, ", "))
		}
		if err := setBound(&b, k, entry[k]); err != nil {
			return b, fileError(path, "", "aggregate", "%s: %v", k, err)
		}
	}
	return b, nil
}

// aggregateKey reads one of aggregateKeys, or "type", of the server.
func (s *serverSpec) aggregateKey(path, k string, v json.RawMessage) error {
	remote := func() *remoteSpec {
		if s.remote == nil {
			s.remote = &remoteSpec{}
		}
		return s.remote
	}
	switch k {
	case "prefix":
		if json.Unmarshal(v, &s.prefix) != nil || s.prefix == "" {
			return fileError(path, s.name, k, "want the prefix of its tools' and prompts' names in aggregates, a non-empty string")
		}
	case "url":
		var u string
		if json.Unmarshal(v, &u) != nil || !(strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) {
			return fileError(path, s.name, k, "want the remote MCP server's URL, http:// or https://")
		}
		remote().url = u
	case "type":
		var t string
		_ = json.Unmarshal(v, &t)
		switch t {
		case "stdio":
			s.stdio = true
		case "http", "streamable-http":
			remote().transport = connect.TransportStreamable
		case "sse":
			remote().transport = connect.TransportSSE
		default:
			return fileError(path, s.name, k, "want \"stdio\" (with command), \"http\" or \"sse\" (with url; none tries Streamable HTTP, then HTTP+SSE)")
		}
	case "headers":
		if json.Unmarshal(v, &remote().headers) != nil {
			return fileError(path, s.name, k, `want an object of strings, e.g. {"Authorization": "Bearer ${TOKEN}"}`)
		}
	case "headerFiles":
		if json.Unmarshal(v, &remote().headerFiles) != nil {
			return fileError(path, s.name, k, `want an object of header names and files, e.g. {"Authorization": "/run/secrets/token"}`)
		}
	}
	return nil
}

// checkRemote checks a server's entry once read: a remote server (url)
// has no command and none of the local keys; the remote keys need a url.
func (s *serverSpec) checkRemote(path string, entry map[string]json.RawMessage) error {
	if s.remote == nil {
		return nil
	}
	if s.remote.url == "" {
		for _, k := range []string{"headers", "headerFiles", "type"} {
			if _, ok := entry[k]; ok {
				return fileError(path, s.name, k, "applies to a remote server: give its url")
			}
		}
	}
	if _, ok := entry["command"]; ok {
		return fileError(path, s.name, "url", "and command both given: a server is local (command) or remote (url), not both")
	}
	if s.stdio {
		return fileError(path, s.name, "type", "\"stdio\" is a local server (command), not a remote one (url)")
	}
	for _, k := range localOnlyKeys {
		if _, ok := entry[k]; ok {
			return fileError(path, s.name, k, "applies to local servers only; this one is remote (url)")
		}
	}
	for h := range s.remote.headers {
		if _, both := s.remote.headerFiles[h]; both {
			return fileError(path, s.name, "headerFiles", "%s is in headers too: keep one", h)
		}
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// readRemote makes the remote server's connect options: its headers with
// the variables they name and the files headerFiles names read now, and
// the digest of those files (a reload that finds them changed replaces
// the server).
func readRemote(path string, s *serverSpec) (*connect.Options, string, error) {
	h := http.Header{}
	names := make([]string, 0, len(s.remote.headers))
	for k := range s.remote.headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		var missing string
		v := envRef.ReplaceAllStringFunc(s.remote.headers[k], func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			val, ok := os.LookupEnv(name)
			if !ok && missing == "" {
				missing = name
			}
			return val
		})
		if missing != "" {
			return nil, "", fileError(path, s.name, "headers", "%s names the variable %s, which the bridge's environment does not set", k, missing)
		}
		h.Set(k, v)
	}
	digest := sha256.New()
	names = names[:0]
	for k := range s.remote.headerFiles {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		file := s.remote.headerFiles[k]
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fileError(path, s.name, "headerFiles", "%s: %v", k, err)
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return nil, "", fileError(path, s.name, "headerFiles", "%s: %s must hold one line, the header's value", k, file)
		}
		h.Set(k, v)
		fileDigest(digest, file)
	}
	return &connect.Options{URL: s.remote.url, Transport: s.remote.transport, Header: h}, hex.EncodeToString(digest.Sum(nil)), nil
}

// parseGroups reads the top-level "groups"; bounds are the file's
// "aggregate", which a group's own keys override.
func parseGroups(path string, raw json.RawMessage, bounds endpoint.AggregateBounds) ([]*groupSpec, error) {
	var groups map[string]json.RawMessage
	if strictUnmarshal(raw, &groups) != nil {
		return nil, fileError(path, "", "groups", `want an object of groups by name, e.g. {"code": {"servers": ["files", "github"]}}`)
	}
	var out []*groupSpec
	for name, raw := range groups {
		bad := func(key, format string, args ...any) error { return groupError(path, name, key, format, args...) }
		if !serverName.MatchString(name) {
			return nil, bad("", "invalid name: it is a URL path segment (/groups/NAME/mcp): use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64")
		}
		var entry map[string]json.RawMessage
		if strictUnmarshal(raw, &entry) != nil {
			return nil, bad("", `want an object with servers, e.g. {"servers": ["files", "github"]}`)
		}
		g := &groupSpec{name: name, bounds: bounds}
		for k, v := range entry {
			switch {
			case k == "servers":
				if json.Unmarshal(v, &g.servers) != nil || len(g.servers) == 0 {
					return nil, bad(k, "want the names of its servers, a non-empty array of strings")
				}
			case k == "separator":
				if json.Unmarshal(v, &g.separator) != nil || g.separator == "" {
					return nil, bad(k, "want a string of 1 to 4 of A-Z a-z 0-9 _ - .")
				}
			case slices.Contains(boundKeys, k):
				if err := setBound(&g.bounds, k, v); err != nil {
					return nil, bad(k, "%v", err)
				}
			default:
				return nil, bad(k, "unknown key; a group takes servers, separator, %s", strings.Join(boundKeys, ", "))
			}
		}
		if g.servers == nil {
			return nil, bad("servers", "missing: a group lists its servers")
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// groupError names the file, the group and the key of a problem.
func groupError(path, group, key, format string, args ...any) error {
	where := "config " + path + ": group " + strconv.Quote(group)
	if key != "" {
		where += ": key " + strconv.Quote(key)
	}
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// checkGroups checks that each group names servers of the file (a
// disabled one is left out of its group).
func (f *configFile) checkGroups(disabled []string) error {
	for _, g := range f.groups {
		var keep []string
		for _, name := range g.servers {
			switch {
			case slices.Contains(disabled, name):
			case slices.ContainsFunc(f.servers, func(s *serverSpec) bool { return s.name == name }):
				if slices.Contains(keep, name) {
					return groupError(f.path, g.name, "servers", "%q is given twice", name)
				}
				keep = append(keep, name)
			default:
				return groupError(f.path, g.name, "servers", "%q is not a server of mcpServers", name)
			}
		}
		if len(keep) == 0 {
			return groupError(f.path, g.name, "servers", "every server of the group is disabled")
		}
		g.servers = keep
	}
	return nil
}

// aggregateSpec is one aggregate of a configuration: its path, its
// servers in order, its separator.
type aggregateSpec struct {
	path    string
	group   string // "" for /mcp
	servers []*serverSpec
	sep     string
	bounds  endpoint.AggregateBounds
}

// aggregates are the aggregates of f: /mcp (unless --no-aggregate) with
// every server, and each group.
func (c *config) aggregates(f *configFile) []aggregateSpec {
	var out []aggregateSpec
	if !c.NoAggregate {
		out = append(out, aggregateSpec{path: bridge.DefaultPath, servers: f.servers, sep: c.AggregateSeparator, bounds: f.bounds})
	}
	for _, g := range f.groups {
		sp := aggregateSpec{path: endpoint.GroupPath(g.name), group: g.name, sep: cmpOr(g.separator, c.AggregateSeparator), bounds: g.bounds}
		for _, name := range g.servers {
			i := slices.IndexFunc(f.servers, func(s *serverSpec) bool { return s.name == name })
			sp.servers = append(sp.servers, f.servers[i])
		}
		out = append(out, sp)
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// check refuses an aggregate whose members would advertise one name,
// naming the server added last of the two (whose prefix is the fix), or
// the group.
func (sp *aggregateSpec) check(path string) error {
	var members []endpoint.AggregateMember
	for _, s := range sp.servers {
		members = append(members, endpoint.AggregateMember{Server: &endpoint.ServerOptions{Name: s.name}, Prefix: s.prefix})
		err := endpoint.CheckAggregate(&endpoint.AggregateOptions{Members: members, Separator: sp.sep})
		if err == nil {
			continue
		}
		if sp.group != "" {
			key := "servers"
			if strings.Contains(err.Error(), "separator") && !strings.Contains(err.Error(), "advertise") {
				key = "separator"
			}
			return groupError(path, sp.group, key, "%v", err)
		}
		if strings.Contains(err.Error(), "aggregate: separator") {
			return fileError(path, "", "bridge", "aggregate-separator: %v", err)
		}
		return fileError(path, s.name, "prefix", "in the aggregate at /mcp: %v", err)
	}
	return nil
}

// checkAggregates checks every aggregate of the file.
func (c *config) checkAggregates(f *configFile) error {
	for _, sp := range c.aggregates(f) {
		if err := sp.check(f.path); err != nil {
			return err
		}
	}
	return nil
}

// aggregateSpecs are the aggregates of f as endpoint.Aggregates applies
// them: their members' configurations checked.
func (m *multi) aggregateSpecs(f *configFile) ([]endpoint.AggregateSpec, error) {
	if err := m.cfg.checkAggregates(f); err != nil {
		return nil, err
	}
	var out []endpoint.AggregateSpec
	for _, sp := range m.cfg.aggregates(f) {
		var key strings.Builder
		fmt.Fprintf(&key, "%s\x00%+v\x00", sp.sep, sp.bounds)
		var members []endpoint.AggregateMember
		for _, s := range sp.servers {
			sc, err := serverConfig(m.cfg, f.path, s)
			if err != nil {
				return nil, err
			}
			o, err := endpointOptions(sc)
			if err != nil {
				return nil, err
			}
			members = append(members, endpoint.AggregateMember{Server: o, Prefix: s.prefix})
			fmt.Fprintf(&key, "%s\x00%s\x00%s\x00", s.name, s.canon, sc.guardFiles)
		}
		front, err := endpointOptions(m.cfg)
		if err != nil {
			return nil, err
		}
		front.Name = sp.path
		out = append(out, endpoint.AggregateSpec{
			Path: sp.path,
			Key:  key.String(),
			Build: func(ctx context.Context) (*endpoint.Aggregate, error) {
				a, err := endpoint.BuildAggregate(ctx, m.shared, &endpoint.AggregateOptions{Front: front, Members: members, Separator: sp.sep, Bounds: sp.bounds}, sp.path)
				return a, explain(err)
			},
		})
	}
	return out, nil
}

// frontEnd is what the process serves: a set of one server, or the
// servers and aggregates of a config file (multi).
type frontEnd interface {
	http.Handler
	Names() []string
	Len() int
	Drain()
	WaitIdle(ctx context.Context) error
	Close(ctx context.Context) error
}

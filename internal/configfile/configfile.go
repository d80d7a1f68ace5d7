// Package configfile reads the bridge's --config file: the mcpServers
// JSON that desktop clients keep, with the bridge's own per-server keys
// and, optionally, its global options. It checks the file's shape and
// each value, naming file, server or group, and key; the command maps
// what it read onto its options.
//
//	{
//	  "bridge": {"listen": "127.0.0.1:8080", "log-level": "debug"},
//	  "mcpServers": {
//	    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
//	              "env": {"DEBUG": "1"}, "request-timeout": "2m"},
//	    "fetch": {"command": "uvx", "args": ["mcp-server-fetch"], "sandbox": "docker",
//	              "image": "mcp/fetch", "sandbox-network": "bridge"}
//	  }
//	}
//
// The keys of "bridge" are the names of the flags; flags and BRIDGE_*
// variables win over them. A server's own keys are the names of the flags
// that can differ between servers (ServerOptions); they win over the global
// options. Unknown keys are errors: a typo must not silently drop a limit.
//
// Aggregates, groups and remote servers:
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
// An aggregate's bounds and failure mode (BoundKeys) are the top-level
// "aggregate" object's for every aggregate (/mcp and the groups), and a
// group's own keys for that group; what neither sets is the aggregate
// package's default.
package configfile

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"maps"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
	"github.com/mcp-bridge/mcp-bridge/internal/units"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// ServerOptions is what a server of the config file may set for itself,
// beside the desktop clients' keys (DesktopKeys). cmd/bridge's config
// embeds it: its key (the tag) is the flag that sets it for every server,
// its envconfig tag that flag's variable. Adding a field here makes its
// flag a per-server key. The
// rest of config is global: flags, BRIDGE_* variables and the file's
// "bridge" object set it for all servers.
type ServerOptions struct {
	Sandbox               endpoint.Sandbox   `key:"sandbox" envconfig:"BRIDGE_SANDBOX"`
	Image                 string             `key:"image" envconfig:"BRIDGE_IMAGE"`
	Pull                  sandbox.PullPolicy `key:"pull" envconfig:"BRIDGE_PULL"`
	SandboxNetwork        string             `key:"sandbox-network" envconfig:"BRIDGE_SANDBOX_NETWORK"`
	SandboxEgress         []string           `key:"sandbox-egress" envconfig:"BRIDGE_SANDBOX_EGRESS"`
	SandboxRuntime        string             `key:"sandbox-runtime" envconfig:"BRIDGE_SANDBOX_RUNTIME"`
	UserEnv               []string           `key:"user-env" envconfig:"BRIDGE_USER_ENV"`
	SandboxMounts         []string           `key:"sandbox-mount" envconfig:"BRIDGE_SANDBOX_MOUNT"`
	SandboxEnv            []string           `key:"sandbox-env" envconfig:"BRIDGE_SANDBOX_ENV"`
	SandboxMemory         units.Bytes        `key:"sandbox-memory" envconfig:"BRIDGE_SANDBOX_MEMORY"`
	SandboxCPUs           float64            `key:"sandbox-cpus" envconfig:"BRIDGE_SANDBOX_CPUS"`
	SandboxPids           int64              `key:"sandbox-pids" envconfig:"BRIDGE_SANDBOX_PIDS"`
	SandboxUser           string             `key:"sandbox-user" envconfig:"BRIDGE_SANDBOX_USER"`
	Warm                  int                `key:"warm" envconfig:"BRIDGE_WARM"`
	StopGrace             time.Duration      `key:"stop-grace" envconfig:"BRIDGE_STOP_GRACE"`
	StderrLineBytes       units.Bytes        `key:"stderr-line-bytes" envconfig:"BRIDGE_STDERR_LINE_BYTES"`
	SessionIdleTimeout    units.Duration     `key:"session-idle-timeout" envconfig:"BRIDGE_SESSION_IDLE_TIMEOUT"`
	InitializeTimeout     units.Duration     `key:"initialize-timeout" envconfig:"BRIDGE_INITIALIZE_TIMEOUT"`
	RequestTimeout        units.Duration     `key:"request-timeout" envconfig:"BRIDGE_REQUEST_TIMEOUT"`
	MaxSessions           int                `key:"max-sessions" envconfig:"BRIDGE_MAX_SESSIONS"`
	MaxRequestsPerSession int                `key:"max-requests-per-session" envconfig:"BRIDGE_MAX_REQUESTS_PER_SESSION"`
	MaxQueuedBytes        units.Bytes        `key:"max-queued-bytes" envconfig:"BRIDGE_MAX_QUEUED_BYTES"`
	MaxMessageBytes       units.Bytes        `key:"max-message-bytes" envconfig:"BRIDGE_MAX_MESSAGE_BYTES"`
	LogMaxEvents          int                `key:"log-max-events" envconfig:"BRIDGE_LOG_MAX_EVENTS"`
	LogMaxBytes           units.Bytes        `key:"log-max-bytes" envconfig:"BRIDGE_LOG_MAX_BYTES"`
	JSONResponse          bool               `key:"json-response" envconfig:"BRIDGE_JSON_RESPONSE"`
	SSEPollAfter          units.Interval     `key:"sse-poll-after" envconfig:"BRIDGE_SSE_POLL_AFTER"`
	SSERetry              time.Duration      `key:"sse-retry" envconfig:"BRIDGE_SSE_RETRY"`
	Policy                string             `key:"policy" envconfig:"BRIDGE_POLICY"`
	PinFile               string             `key:"pin-file" envconfig:"BRIDGE_PIN_FILE"`
	OnPinViolation        pin.Action         `key:"on-pin-violation" envconfig:"BRIDGE_ON_PIN_VIOLATION"`
	AuditLog              string             `key:"audit-log" envconfig:"BRIDGE_AUDIT_LOG"`
	ChildEra              pool.Era           `key:"child-era" envconfig:"BRIDGE_CHILD_ERA"`
	PoolMin               int                `key:"pool-min" envconfig:"BRIDGE_POOL_MIN"`
	PoolMax               int                `key:"pool-max" envconfig:"BRIDGE_POOL_MAX"`
	PoolMaxPerPrincipal   int                `key:"pool-max-per-principal" envconfig:"BRIDGE_POOL_MAX_PER_PRINCIPAL"`
	PoolEvictIdle         time.Duration      `key:"pool-evict-idle" envconfig:"BRIDGE_POOL_EVICT_IDLE"`
	RequestStateTTL       time.Duration      `key:"request-state-ttl" envconfig:"BRIDGE_REQUEST_STATE_TTL"`

	given map[string]bool // the keys the server set
}

// ServerKeys are the keys of ServerOptions, in its order.
var ServerKeys = func() []string {
	t := reflect.TypeFor[ServerOptions]()
	var keys []string
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("key"); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}()

// FlagSet binds a flag to each field of o, named by its key, of the type of
// the flag of the same name (the same parser, the same messages).
func (o *ServerOptions) FlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	v := reflect.ValueOf(o).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key := f.Tag.Get("key")
		if key == "" {
			continue
		}
		switch p := v.Field(i).Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, key, *p, "")
		case *int:
			fs.IntVar(p, key, *p, "")
		case *int64:
			fs.Int64Var(p, key, *p, "")
		case *float64:
			fs.Float64Var(p, key, *p, "")
		case *bool:
			fs.BoolVar(p, key, *p, "")
		case *time.Duration:
			fs.DurationVar(p, key, *p, "")
		case *[]string:
			fs.Var(&flagx.List{Dst: p}, key, "")
		case encoding.TextUnmarshaler:
			fs.TextVar(p, key, v.Field(i).Interface().(encoding.TextMarshaler), "")
		default:
			panic("ServerOptions." + f.Name + ": no flag for its type")
		}
	}
	return fs
}

// set decodes the value of one key (a string, a number, true or false, or
// for a list an array of strings) into its field.
func (o *ServerOptions) set(fs *flag.FlagSet, key string, raw json.RawMessage) error {
	f := fs.Lookup(key)
	vals, err := flagx.JSONValues(raw, flagx.IsList(f))
	if err != nil {
		return err
	}
	for _, v := range vals {
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("%q: %s", v, flagx.Problem(f.Value, v, err))
		}
	}
	if o.given == nil {
		o.given = map[string]bool{}
	}
	o.given[key] = true
	return nil
}

// Has reports whether the server set key itself.
func (o *ServerOptions) Has(key string) bool { return o.given[key] }

// ApplyTo sets the fields of dst (a copy of the global options) that the
// server set itself, leaving the others as they are.
func (o *ServerOptions) ApplyTo(dst *ServerOptions) {
	src, d := reflect.ValueOf(o).Elem(), reflect.ValueOf(dst).Elem()
	for i := range src.NumField() {
		if k := src.Type().Field(i).Tag.Get("key"); k != "" && o.Has(k) {
			d.Field(i).Set(src.Field(i))
		}
	}
}

// DesktopKeys are the keys of a server in the desktop clients' format.
var DesktopKeys = []string{"command", "args", "env", "cwd", "type", "disabled"}

// serverName is what a server may be called: it is a path segment.
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// File is a parsed --config file.
type File struct {
	Path    string
	Global  map[string]json.RawMessage // "bridge"
	Servers []*Server                  // sorted by name; disabled ones left out
	Groups  []*Group                   // sorted by name
	Bounds  endpoint.AggregateBounds   // "aggregate": every aggregate's
}

// Server is one server of the file.
type Server struct {
	Name    string
	Command []string
	Env     map[string]string
	Cwd     string
	Opts    ServerOptions // its own options
	// allowHosts: its sandbox-egress came from the key allowHosts.
	AllowHosts bool
	// canon is the server's entry in a Canonical form: a reload compares
	// it to tell an unchanged server from a changed one.
	Canon string
	// Its keys of aggregation and remote servers.
	Prefix string
	Remote *Remote // nil: a local server
	Stdio  bool    // "type": "stdio"
}

// Errorf names the file, the server and the key of a problem.
func Errorf(path, server, key, format string, args ...any) error {
	where := "config " + path
	if server != "" {
		where += ": server " + strconv.Quote(server)
	}
	if key != "" {
		where += ": key " + strconv.Quote(key)
	}
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// Read reads and checks the shape of a config file, and decodes
// each server's options (ServerOptions). The global options ("bridge") are
// applied to the flags by the command (ApplyKeys).
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, errors.Unwrap(err))
	}
	var top map[string]json.RawMessage
	if err := strictUnmarshal(data, &top); err != nil {
		return nil, Errorf(path, "", "", "not a JSON object: %v", jsonProblem(data, err))
	}
	f := &File{Path: path}
	for k := range top {
		if k != "mcpServers" && k != "bridge" && k != "groups" && k != "aggregate" {
			return nil, Errorf(path, "", k, "unknown key at the top level; want mcpServers (the servers), groups (aggregates of some of them), aggregate (the aggregates' bounds) and bridge (global options, named as the flags)")
		}
	}
	if raw, ok := top["bridge"]; ok {
		if err := strictUnmarshal(raw, &f.Global); err != nil {
			return nil, Errorf(path, "", "bridge", "want an object of flag names and values")
		}
		for k := range f.Global {
			if k == "config" {
				return nil, Errorf(path, "", "bridge", "config cannot name another config file")
			}
		}
	}
	raw, ok := top["mcpServers"]
	if !ok {
		return nil, Errorf(path, "", "mcpServers", "missing: the file must list its servers under mcpServers")
	}
	var servers map[string]json.RawMessage
	if err := strictUnmarshal(raw, &servers); err != nil {
		return nil, Errorf(path, "", "mcpServers", "want an object of servers by name")
	}
	var disabled []string
	for name, raw := range servers {
		s, err := ParseServer(path, name, raw)
		if err != nil {
			return nil, err
		}
		if s != nil {
			f.Servers = append(f.Servers, s)
		} else {
			disabled = append(disabled, name)
		}
	}
	if len(f.Servers) == 0 {
		return nil, Errorf(path, "", "mcpServers", "no server to serve (all are disabled, or none is listed)")
	}
	sort.Slice(f.Servers, func(i, j int) bool { return f.Servers[i].Name < f.Servers[j].Name })
	if raw, ok := top["aggregate"]; ok {
		if f.Bounds, err = parseBounds(path, raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["groups"]; ok {
		if f.Groups, err = parseGroups(path, raw, f.Bounds); err != nil {
			return nil, err
		}
		if err := f.checkGroups(disabled); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func ParseServer(path, name string, raw json.RawMessage) (*Server, error) {
	if !serverName.MatchString(name) {
		return nil, Errorf(path, name, "", "invalid name: it is a URL path segment (/servers/NAME/mcp): use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64")
	}
	var entry map[string]json.RawMessage
	if err := strictUnmarshal(raw, &entry); err != nil {
		return nil, Errorf(path, name, "", "want an object with command, args and env")
	}
	s := &Server{Name: name}
	own := map[string]json.RawMessage{} // its options, by key
	var cmd string
	var args []string
	for k, v := range entry {
		var err error
		switch {
		case k == "command":
			if err = json.Unmarshal(v, &cmd); err == nil && strings.TrimSpace(cmd) == "" {
				err = errors.New("empty")
			}
			if err != nil {
				return nil, Errorf(path, name, k, "want the server's program, a non-empty string")
			}
		case k == "args":
			if json.Unmarshal(v, &args) != nil {
				return nil, Errorf(path, name, k, "want an array of strings")
			}
		case k == "env":
			if json.Unmarshal(v, &s.Env) != nil {
				return nil, Errorf(path, name, k, `want an object of strings, e.g. {"API_KEY": "..."}`)
			}
			for ek, ev := range s.Env {
				if ek == "" || strings.ContainsAny(ek, "=\x00") {
					return nil, Errorf(path, name, k, "invalid variable name %q", ek)
				}
				// The checks of --env: never a variable of the bridge's own.
				if _, err := sandbox.ParseEnv([]string{ek + "=" + ev}, nil); err != nil {
					return nil, Errorf(path, name, k, "%s: %v", ek, errors.Unwrap(err))
				}
			}
		case k == "cwd":
			if json.Unmarshal(v, &s.Cwd) != nil {
				return nil, Errorf(path, name, k, "want a directory, a string")
			}
		case k == "type" || slices.Contains(AggregateKeys, k):
			if err := s.aggregateKey(path, k, v); err != nil {
				return nil, err
			}
		case k == "disabled":
			var d bool
			if json.Unmarshal(v, &d) != nil {
				return nil, Errorf(path, name, k, "want true or false")
			}
			if d {
				return nil, nil
			}
		case k == "userEnv":
			// Per-user variables: {"GITHUB_TOKEN": "github"}, its user-env.
			var m map[string]string
			if json.Unmarshal(v, &m) != nil {
				return nil, Errorf(path, name, k, `want an object of variable names and secret names, e.g. {"GITHUB_TOKEN": "github"}`)
			}
			list := make([]string, 0, len(m))
			for ek, ev := range m {
				list = append(list, ek+"="+ev)
			}
			sort.Strings(list)
			if _, err := endpoint.ParseUserEnv(list); err != nil {
				return nil, Errorf(path, name, k, "%v", strings.TrimPrefix(err.Error(), "--user-env "))
			}
			raw, _ := json.Marshal(list)
			own["user-env"] = raw
		case k == "allowHosts":
			// The hosts the server may reach: its sandbox-egress.
			if _, both := entry["sandbox-egress"]; both {
				return nil, Errorf(path, name, k, "and sandbox-egress say the same: keep one")
			}
			own["sandbox-egress"] = v
			s.AllowHosts = true
		case slices.Contains(ServerKeys, k):
			own[k] = v
		default:
			return nil, Errorf(path, name, k, "unknown key; a server takes %s, %s, and the per-server options %s, allowHosts, userEnv",
				strings.Join(DesktopKeys, ", "), strings.Join(AggregateKeys, ", "), strings.Join(ServerKeys, ", "))
		}
	}
	if err := s.checkRemote(path, entry); err != nil {
		return nil, err
	}
	fs := s.Opts.FlagSet()
	for _, k := range slices.Sorted(maps.Keys(own)) {
		if err := s.Opts.set(fs, k, own[k]); err != nil {
			key := k
			if k == "sandbox-egress" && s.AllowHosts {
				key = "allowHosts"
			}
			return nil, Errorf(path, name, key, "%v", err)
		}
	}
	if cmd != "" {
		s.Command = append([]string{cmd}, args...)
	} else if len(args) > 0 {
		return nil, Errorf(path, name, "command", "missing: args are given without a command")
	}
	canon, err := json.Marshal(entry) // map keys sorted: one form per content
	if err != nil {
		return nil, Errorf(path, name, "", "%v", err)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, canon) == nil {
		canon = buf.Bytes()
	}
	s.Canon = string(canon)
	return s, nil
}

// strictUnmarshal decodes one JSON value and nothing after it.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the top-level value")
	}
	return nil
}

// jsonProblem says where a syntax error is, as line:column.
func jsonProblem(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:se.Offset], []byte("\n"))
		col := se.Offset - int64(bytes.LastIndexByte(data[:se.Offset], '\n'))
		return fmt.Sprintf("line %d, column %d: %v", line, col-1, err)
	}
	return err.Error()
}

// ApplyKeys sets flags of fs from keys of the file, skipping those in skip.
// A value is a string, a number, true or false, or for a repeatable flag an
// array of strings.
func ApplyKeys(fs *flag.FlagSet, path, server string, keys map[string]json.RawMessage, skip func(string) bool) error {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if skip != nil && skip(k) {
			continue
		}
		f := fs.Lookup(k)
		if f == nil {
			return Errorf(path, server, k, "unknown option; the keys are the names of the flags (bridge --help)")
		}
		vals, err := flagx.JSONValues(keys[k], flagx.IsList(f))
		if err != nil {
			return Errorf(path, server, k, "%v", err)
		}
		for _, v := range vals {
			if err := fs.Set(k, v); err != nil {
				return Errorf(path, server, k, "%q: %s", v, flagx.Problem(f.Value, v, err))
			}
		}
	}
	return nil
}

// Digest adds the name and content of a file to h (a file that cannot
// be read adds its error: it was read a moment ago).
func Digest(h hash.Hash, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		data = []byte(err.Error())
	}
	fmt.Fprintf(h, "%s\x00%d\x00", path, len(data))
	h.Write(data)
}

// AggregateKeys are the keys of a server for aggregates and remote
// servers, beside DesktopKeys' "type".
var AggregateKeys = []string{"prefix", "url", "headers", "headerFiles"}

// LocalOnlyKeys are refused for a remote server.
var LocalOnlyKeys = []string{"args", "env", "cwd", "userEnv", "allowHosts", "user-env",
	"sandbox", "image", "pull", "sandbox-network", "sandbox-egress", "sandbox-runtime", "sandbox-mount", "sandbox-env",
	"sandbox-memory", "sandbox-cpus", "sandbox-pids", "sandbox-user", "warm", "stderr-line-bytes"}

// Remote is a remote server's entry.
type Remote struct {
	URL, Transport string
	Headers        map[string]string
	HeaderFiles    map[string]string
}

// Group is one group of the file.
type Group struct {
	Name      string
	Servers   []string
	Separator string
	Bounds    endpoint.AggregateBounds // the file's "aggregate", with the group's own keys
}

// BoundKeys are the keys of an aggregate's bounds and failure mode, in
// the top-level "aggregate" (every aggregate's) and in a group (its own):
// maxChildren (member servers running across its sessions),
// maxChildrenPerSession, idleTimeout (a session's member server unused
// this long stops; "never") and failClosed (refuse lists and calls while
// a member is down).
var BoundKeys = []string{"maxChildren", "maxChildrenPerSession", "idleTimeout", "failClosed"}

// setBound reads the value v of k, one of BoundKeys, into b.
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
		return b, Errorf(path, "", "aggregate", `want an object of the aggregates' bounds, e.g. {"maxChildren": 64, "idleTimeout": "10m"}`)
	}
	for _, k := range slices.Sorted(maps.Keys(entry)) {
		if !slices.Contains(BoundKeys, k) {
			return b, Errorf(path, "", "aggregate", "%s: unknown key; it takes %s", k, strings.Join(BoundKeys, ", "))
		}
		if err := setBound(&b, k, entry[k]); err != nil {
			return b, Errorf(path, "", "aggregate", "%s: %v", k, err)
		}
	}
	return b, nil
}

// aggregateKey reads one of AggregateKeys, or "type", of the server.
func (s *Server) aggregateKey(path, k string, v json.RawMessage) error {
	remote := func() *Remote {
		if s.Remote == nil {
			s.Remote = &Remote{}
		}
		return s.Remote
	}
	switch k {
	case "prefix":
		if json.Unmarshal(v, &s.Prefix) != nil || s.Prefix == "" {
			return Errorf(path, s.Name, k, "want the prefix of its tools' and prompts' names in aggregates, a non-empty string")
		}
	case "url":
		var u string
		if json.Unmarshal(v, &u) != nil || !(strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) {
			return Errorf(path, s.Name, k, "want the remote MCP server's URL, http:// or https://")
		}
		remote().URL = u
	case "type":
		var t string
		_ = json.Unmarshal(v, &t)
		switch t {
		case "stdio":
			s.Stdio = true
		case "http", "streamable-http":
			remote().Transport = connect.TransportStreamable
		case "sse":
			remote().Transport = connect.TransportSSE
		default:
			return Errorf(path, s.Name, k, "want \"stdio\" (with command), \"http\" or \"sse\" (with url; none tries Streamable HTTP, then HTTP+SSE)")
		}
	case "headers":
		if json.Unmarshal(v, &remote().Headers) != nil {
			return Errorf(path, s.Name, k, `want an object of strings, e.g. {"Authorization": "Bearer ${TOKEN}"}`)
		}
	case "headerFiles":
		if json.Unmarshal(v, &remote().HeaderFiles) != nil {
			return Errorf(path, s.Name, k, `want an object of header names and files, e.g. {"Authorization": "/run/secrets/token"}`)
		}
	}
	return nil
}

// checkRemote checks a server's entry once read: a remote server (url)
// has no command and none of the local keys; the remote keys need a url.
func (s *Server) checkRemote(path string, entry map[string]json.RawMessage) error {
	if s.Remote == nil {
		return nil
	}
	if s.Remote.URL == "" {
		for _, k := range []string{"headers", "headerFiles", "type"} {
			if _, ok := entry[k]; ok {
				return Errorf(path, s.Name, k, "applies to a remote server: give its url")
			}
		}
	}
	if _, ok := entry["command"]; ok {
		return Errorf(path, s.Name, "url", "and command both given: a server is local (command) or remote (url), not both")
	}
	if s.Stdio {
		return Errorf(path, s.Name, "type", "\"stdio\" is a local server (command), not a remote one (url)")
	}
	for _, k := range LocalOnlyKeys {
		if _, ok := entry[k]; ok {
			return Errorf(path, s.Name, k, "applies to local servers only; this one is remote (url)")
		}
	}
	for h := range s.Remote.Headers {
		if _, both := s.Remote.HeaderFiles[h]; both {
			return Errorf(path, s.Name, "headerFiles", "%s is in headers too: keep one", h)
		}
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// ReadRemote makes the remote server's connect options: its headers with
// the variables they name and the files headerFiles names read now, and
// the digest of those files (a reload that finds them changed replaces
// the server).
func ReadRemote(path string, s *Server) (*connect.Options, string, error) {
	h := http.Header{}
	names := make([]string, 0, len(s.Remote.Headers))
	for k := range s.Remote.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		var missing string
		v := envRef.ReplaceAllStringFunc(s.Remote.Headers[k], func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			val, ok := os.LookupEnv(name)
			if !ok && missing == "" {
				missing = name
			}
			return val
		})
		if missing != "" {
			return nil, "", Errorf(path, s.Name, "headers", "%s names the variable %s, which the bridge's environment does not set", k, missing)
		}
		h.Set(k, v)
	}
	digest := sha256.New()
	names = names[:0]
	for k := range s.Remote.HeaderFiles {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		file := s.Remote.HeaderFiles[k]
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, "", Errorf(path, s.Name, "headerFiles", "%s: %v", k, err)
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return nil, "", Errorf(path, s.Name, "headerFiles", "%s: %s must hold one line, the header's value", k, file)
		}
		h.Set(k, v)
		Digest(digest, file)
	}
	return &connect.Options{URL: s.Remote.URL, Transport: s.Remote.Transport, Header: h}, hex.EncodeToString(digest.Sum(nil)), nil
}

// parseGroups reads the top-level "groups"; bounds are the file's
// "aggregate", which a group's own keys override.
func parseGroups(path string, raw json.RawMessage, bounds endpoint.AggregateBounds) ([]*Group, error) {
	var groups map[string]json.RawMessage
	if strictUnmarshal(raw, &groups) != nil {
		return nil, Errorf(path, "", "groups", `want an object of groups by name, e.g. {"code": {"servers": ["files", "github"]}}`)
	}
	var out []*Group
	for name, raw := range groups {
		bad := func(key, format string, args ...any) error { return GroupErrorf(path, name, key, format, args...) }
		if !serverName.MatchString(name) {
			return nil, bad("", "invalid name: it is a URL path segment (/groups/NAME/mcp): use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64")
		}
		var entry map[string]json.RawMessage
		if strictUnmarshal(raw, &entry) != nil {
			return nil, bad("", `want an object with servers, e.g. {"servers": ["files", "github"]}`)
		}
		g := &Group{Name: name, Bounds: bounds}
		for k, v := range entry {
			switch {
			case k == "servers":
				if json.Unmarshal(v, &g.Servers) != nil || len(g.Servers) == 0 {
					return nil, bad(k, "want the names of its servers, a non-empty array of strings")
				}
			case k == "separator":
				if json.Unmarshal(v, &g.Separator) != nil || g.Separator == "" {
					return nil, bad(k, "want a string of 1 to 4 of A-Z a-z 0-9 _ - .")
				}
			case slices.Contains(BoundKeys, k):
				if err := setBound(&g.Bounds, k, v); err != nil {
					return nil, bad(k, "%v", err)
				}
			default:
				return nil, bad(k, "unknown key; a group takes servers, separator, %s", strings.Join(BoundKeys, ", "))
			}
		}
		if g.Servers == nil {
			return nil, bad("servers", "missing: a group lists its servers")
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GroupErrorf names the file, the group and the key of a problem.
func GroupErrorf(path, group, key, format string, args ...any) error {
	where := "config " + path + ": group " + strconv.Quote(group)
	if key != "" {
		where += ": key " + strconv.Quote(key)
	}
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// checkGroups checks that each group names servers of the file (a
// disabled one is left out of its group).
func (f *File) checkGroups(disabled []string) error {
	for _, g := range f.Groups {
		var keep []string
		for _, name := range g.Servers {
			switch {
			case slices.Contains(disabled, name):
			case slices.ContainsFunc(f.Servers, func(s *Server) bool { return s.Name == name }):
				if slices.Contains(keep, name) {
					return GroupErrorf(f.Path, g.Name, "servers", "%q is given twice", name)
				}
				keep = append(keep, name)
			default:
				return GroupErrorf(f.Path, g.Name, "servers", "%q is not a server of mcpServers", name)
			}
		}
		if len(keep) == 0 {
			return GroupErrorf(f.Path, g.Name, "servers", "every server of the group is disabled")
		}
		g.Servers = keep
	}
	return nil
}

// Canonical is a JSON object's members with their values compacted, to
// compare two of them.
func Canonical(v map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(v))
	for k, raw := range v {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			b.Reset()
			b.Write(raw)
		}
		out[k] = b.String()
	}
	return out
}

// An Aggregate is one aggregate of a file: its path, its servers in
// order, its separator and bounds.
type Aggregate struct {
	Path      string
	Group     string // "" for /mcp
	Servers   []*Server
	Separator string
	Bounds    endpoint.AggregateBounds
}

// Aggregates are the aggregates of f: the one at /mcp with every server
// (unless noAll), and each group. sep is the separator of those that
// do not set their own.
func (f *File) Aggregates(sep string, noAll bool) []Aggregate {
	var out []Aggregate
	if !noAll {
		out = append(out, Aggregate{Path: bridge.DefaultPath, Servers: f.Servers, Separator: sep, Bounds: f.Bounds})
	}
	for _, g := range f.Groups {
		a := Aggregate{Path: endpoint.GroupPath(g.Name), Group: g.Name, Separator: cmp.Or(g.Separator, sep), Bounds: g.Bounds}
		for _, name := range g.Servers {
			i := slices.IndexFunc(f.Servers, func(s *Server) bool { return s.Name == name })
			a.Servers = append(a.Servers, f.Servers[i])
		}
		out = append(out, a)
	}
	return out
}

// Check refuses an aggregate whose members would advertise one name,
// naming the server added last of the two (whose prefix is the fix), or
// the group, in the words of the file at path.
func (a *Aggregate) Check(path string) error {
	var members []endpoint.AggregateMember
	for _, s := range a.Servers {
		members = append(members, endpoint.AggregateMember{Server: &endpoint.ServerOptions{Name: s.Name}, Prefix: s.Prefix})
		err := endpoint.CheckAggregate(&endpoint.AggregateOptions{Members: members, Separator: a.Separator})
		if err == nil {
			continue
		}
		if a.Group != "" {
			key := "servers"
			if strings.Contains(err.Error(), "separator") && !strings.Contains(err.Error(), "advertise") {
				key = "separator"
			}
			return GroupErrorf(path, a.Group, key, "%v", err)
		}
		if strings.Contains(err.Error(), "aggregate: separator") {
			return Errorf(path, "", "bridge", "aggregate-separator: %v", err)
		}
		return Errorf(path, s.Name, "prefix", "in the aggregate at /mcp: %v", err)
	}
	return nil
}

package main

// The --config file: the mcpServers JSON that desktop clients keep, with
// the bridge's own per-server keys and, optionally, its global options.
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
// that can differ between servers (serverOptions); they win over the global
// options. Unknown keys are errors: a typo must not silently drop a limit.

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
	"github.com/mcp-bridge/mcp-bridge/internal/units"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// serverOptions is what a server of the config file may set for itself,
// beside the desktop clients' keys (desktopKeys): each field is the field of
// config of the same name, and its key (the tag) the flag that sets it for
// every server. Adding a field here makes its flag a per-server key. The
// rest of config is global: flags, BRIDGE_* variables and the file's
// "bridge" object set it for all servers.
type serverOptions struct {
	Sandbox               string             `key:"sandbox"`
	Image                 string             `key:"image"`
	Pull                  sandbox.PullPolicy `key:"pull"`
	SandboxNetwork        string             `key:"sandbox-network"`
	SandboxEgress         []string           `key:"sandbox-egress"`
	SandboxRuntime        string             `key:"sandbox-runtime"`
	UserEnv               []string           `key:"user-env"`
	SandboxMounts         []string           `key:"sandbox-mount"`
	SandboxEnv            []string           `key:"sandbox-env"`
	SandboxMemory         units.Bytes        `key:"sandbox-memory"`
	SandboxCPUs           float64            `key:"sandbox-cpus"`
	SandboxPids           int64              `key:"sandbox-pids"`
	SandboxUser           string             `key:"sandbox-user"`
	Warm                  int                `key:"warm"`
	StopGrace             time.Duration      `key:"stop-grace"`
	StderrLineBytes       units.Bytes        `key:"stderr-line-bytes"`
	SessionIdleTimeout    units.Duration     `key:"session-idle-timeout"`
	InitializeTimeout     units.Duration     `key:"initialize-timeout"`
	RequestTimeout        units.Duration     `key:"request-timeout"`
	MaxSessions           int                `key:"max-sessions"`
	MaxRequestsPerSession int                `key:"max-requests-per-session"`
	MaxQueuedBytes        units.Bytes        `key:"max-queued-bytes"`
	MaxMessageBytes       units.Bytes        `key:"max-message-bytes"`
	LogMaxEvents          int                `key:"log-max-events"`
	LogMaxBytes           units.Bytes        `key:"log-max-bytes"`
	JSONResponse          bool               `key:"json-response"`
	SSEPollAfter          units.Interval     `key:"sse-poll-after"`
	SSERetry              time.Duration      `key:"sse-retry"`
	Policy                string             `key:"policy"`
	PinFile               string             `key:"pin-file"`
	OnPinViolation        pin.Action         `key:"on-pin-violation"`
	AuditLog              string             `key:"audit-log"`
	ChildEra              pool.Era           `key:"child-era"`
	PoolMin               int                `key:"pool-min"`
	PoolMax               int                `key:"pool-max"`
	PoolMaxPerPrincipal   int                `key:"pool-max-per-principal"`
	PoolEvictIdle         time.Duration      `key:"pool-evict-idle"`
	RequestStateTTL       time.Duration      `key:"request-state-ttl"`

	given map[string]bool // the keys the server set
}

// serverKeys are the keys of serverOptions, in its order.
var serverKeys = func() []string {
	t := reflect.TypeFor[serverOptions]()
	var keys []string
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("key"); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}()

// flagSet binds a flag to each field of o, named by its key, of the type of
// the flag of the same name (the same parser, the same messages).
func (o *serverOptions) flagSet() *flag.FlagSet {
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
			panic("serverOptions." + f.Name + ": no flag for its type")
		}
	}
	return fs
}

// set decodes the value of one key (a string, a number, true or false, or
// for a list an array of strings) into its field.
func (o *serverOptions) set(fs *flag.FlagSet, key string, raw json.RawMessage) error {
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

// has reports whether the server set key itself.
func (o *serverOptions) has(key string) bool { return o.given[key] }

// apply sets the fields of c that the server set.
func (o *serverOptions) apply(c *config) {
	src := reflect.ValueOf(o).Elem()
	dst := reflect.ValueOf(c).Elem()
	for i := range src.NumField() {
		f := src.Type().Field(i)
		if k := f.Tag.Get("key"); k != "" && o.given[k] {
			dst.FieldByName(f.Name).Set(src.Field(i))
		}
	}
}

// desktopKeys are the keys of a server in the desktop clients' format.
var desktopKeys = []string{"command", "args", "env", "cwd", "type", "disabled"}

// serverName is what a server may be called: it is a path segment.
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// configFile is a parsed --config file.
type configFile struct {
	path    string
	global  map[string]json.RawMessage // "bridge"
	servers []*serverSpec              // sorted by name; disabled ones left out
	groups  []*groupSpec               // sorted by name (aggregate.go)
	bounds  endpoint.AggregateBounds   // "aggregate": every aggregate's (aggregate.go)
}

// serverSpec is one server of the file.
type serverSpec struct {
	name    string
	command []string
	env     map[string]string
	cwd     string
	opts    serverOptions // its own options
	// allowHosts: its sandbox-egress came from the key allowHosts.
	allowHosts bool
	// canon is the server's entry in a canonical form: a reload compares
	// it to tell an unchanged server from a changed one.
	canon string
	// Its keys of aggregation and remote servers (aggregate.go).
	prefix string
	remote *remoteSpec // nil: a local server
	stdio  bool        // "type": "stdio"
}

// fileError names the file, the server and the key of a problem.
func fileError(path, server, key, format string, args ...any) error {
	where := "config " + path
	if server != "" {
		where += ": server " + strconv.Quote(server)
	}
	if key != "" {
		where += ": key " + strconv.Quote(key)
	}
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// readConfigFile reads and checks the shape of a config file, and decodes
// each server's options (serverOptions). The global options ("bridge") are
// applied to the flags later (readFile, applyKeys).
func readConfigFile(path string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, errors.Unwrap(err))
	}
	var top map[string]json.RawMessage
	if err := strictUnmarshal(data, &top); err != nil {
		return nil, fileError(path, "", "", "not a JSON object: %v", jsonProblem(data, err))
	}
	f := &configFile{path: path}
	for k := range top {
		if k != "mcpServers" && k != "bridge" && k != "groups" && k != "aggregate" {
			return nil, fileError(path, "", k, "unknown key at the top level; want mcpServers (the servers), groups (aggregates of some of them), aggregate (the aggregates' bounds) and bridge (global options, named as the flags)")
		}
	}
	if raw, ok := top["bridge"]; ok {
		if err := strictUnmarshal(raw, &f.global); err != nil {
			return nil, fileError(path, "", "bridge", "want an object of flag names and values")
		}
		for k := range f.global {
			if k == "config" {
				return nil, fileError(path, "", "bridge", "config cannot name another config file")
			}
		}
	}
	raw, ok := top["mcpServers"]
	if !ok {
		return nil, fileError(path, "", "mcpServers", "missing: the file must list its servers under mcpServers")
	}
	var servers map[string]json.RawMessage
	if err := strictUnmarshal(raw, &servers); err != nil {
		return nil, fileError(path, "", "mcpServers", "want an object of servers by name")
	}
	var disabled []string
	for name, raw := range servers {
		s, err := parseServer(path, name, raw)
		if err != nil {
			return nil, err
		}
		if s != nil {
			f.servers = append(f.servers, s)
		} else {
			disabled = append(disabled, name)
		}
	}
	if len(f.servers) == 0 {
		return nil, fileError(path, "", "mcpServers", "no server to serve (all are disabled, or none is listed)")
	}
	sort.Slice(f.servers, func(i, j int) bool { return f.servers[i].name < f.servers[j].name })
	if raw, ok := top["aggregate"]; ok {
		if f.bounds, err = parseBounds(path, raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["groups"]; ok {
		if f.groups, err = parseGroups(path, raw, f.bounds); err != nil {
			return nil, err
		}
		if err := f.checkGroups(disabled); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func parseServer(path, name string, raw json.RawMessage) (*serverSpec, error) {
	if !serverName.MatchString(name) {
		return nil, fileError(path, name, "", "invalid name: it is a URL path segment (/servers/NAME/mcp): use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64")
	}
	var entry map[string]json.RawMessage
	if err := strictUnmarshal(raw, &entry); err != nil {
		return nil, fileError(path, name, "", "want an object with command, args and env")
	}
	s := &serverSpec{name: name}
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
				return nil, fileError(path, name, k, "want the server's program, a non-empty string")
			}
		case k == "args":
			if json.Unmarshal(v, &args) != nil {
				return nil, fileError(path, name, k, "want an array of strings")
			}
		case k == "env":
			if json.Unmarshal(v, &s.env) != nil {
				return nil, fileError(path, name, k, `want an object of strings, e.g. {"API_KEY": "..."}`)
			}
			for ek, ev := range s.env {
				if ek == "" || strings.ContainsAny(ek, "=\x00") {
					return nil, fileError(path, name, k, "invalid variable name %q", ek)
				}
				// The checks of --env: never a variable of the bridge's own.
				if _, err := sandbox.ParseEnv([]string{ek + "=" + ev}, nil); err != nil {
					return nil, fileError(path, name, k, "%s: %v", ek, errors.Unwrap(err))
				}
			}
		case k == "cwd":
			if json.Unmarshal(v, &s.cwd) != nil {
				return nil, fileError(path, name, k, "want a directory, a string")
			}
		case k == "type" || slices.Contains(aggregateKeys, k):
			if err := s.aggregateKey(path, k, v); err != nil {
				return nil, err
			}
		case k == "disabled":
			var d bool
			if json.Unmarshal(v, &d) != nil {
				return nil, fileError(path, name, k, "want true or false")
			}
			if d {
				return nil, nil
			}
		case k == "userEnv":
			// Per-user variables: {"GITHUB_TOKEN": "github"}, its user-env.
			var m map[string]string
			if json.Unmarshal(v, &m) != nil {
				return nil, fileError(path, name, k, `want an object of variable names and secret names, e.g. {"GITHUB_TOKEN": "github"}`)
			}
			list := make([]string, 0, len(m))
			for ek, ev := range m {
				list = append(list, ek+"="+ev)
			}
			sort.Strings(list)
			if _, err := parseUserEnv(list); err != nil {
				return nil, fileError(path, name, k, "%v", strings.TrimPrefix(err.Error(), "--user-env "))
			}
			raw, _ := json.Marshal(list)
			own["user-env"] = raw
		case k == "allowHosts":
			// The hosts the server may reach: its sandbox-egress.
			if _, both := entry["sandbox-egress"]; both {
				return nil, fileError(path, name, k, "and sandbox-egress say the same: keep one")
			}
			own["sandbox-egress"] = v
			s.allowHosts = true
		case slices.Contains(serverKeys, k):
			own[k] = v
		default:
			return nil, fileError(path, name, k, "unknown key; a server takes %s, %s, and the per-server options %s, allowHosts, userEnv",
				strings.Join(desktopKeys, ", "), strings.Join(aggregateKeys, ", "), strings.Join(serverKeys, ", "))
		}
	}
	if err := s.checkRemote(path, entry); err != nil {
		return nil, err
	}
	fs := s.opts.flagSet()
	for _, k := range slices.Sorted(maps.Keys(own)) {
		if err := s.opts.set(fs, k, own[k]); err != nil {
			key := k
			if k == "sandbox-egress" && s.allowHosts {
				key = "allowHosts"
			}
			return nil, fileError(path, name, key, "%v", err)
		}
	}
	if cmd != "" {
		s.command = append([]string{cmd}, args...)
	} else if len(args) > 0 {
		return nil, fileError(path, name, "command", "missing: args are given without a command")
	}
	canon, err := json.Marshal(entry) // map keys sorted: one form per content
	if err != nil {
		return nil, fileError(path, name, "", "%v", err)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, canon) == nil {
		canon = buf.Bytes()
	}
	s.canon = string(canon)
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

// applyKeys sets flags of fs from keys of the file, skipping those in skip.
// A value is a string, a number, true or false, or for a repeatable flag an
// array of strings.
func applyKeys(fs *flag.FlagSet, path, server string, keys map[string]json.RawMessage, skip func(string) bool) error {
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
			return fileError(path, server, k, "unknown option; the keys are the names of the flags (bridge --help)")
		}
		vals, err := flagx.JSONValues(keys[k], flagx.IsList(f))
		if err != nil {
			return fileError(path, server, k, "%v", err)
		}
		for _, v := range vals {
			if err := fs.Set(k, v); err != nil {
				return fileError(path, server, k, "%q: %s", v, flagx.Problem(f.Value, v, err))
			}
		}
	}
	return nil
}

// readFile reads --config and sets its global options ("bridge") that
// neither a flag nor a BRIDGE_* variable gave.
// fs is the flag set that parsed the command line.
func (c *config) readFile(fs *flag.FlagSet) error {
	if c.Config == "" {
		return nil
	}
	f, err := readConfigFile(c.Config)
	if err != nil {
		return err
	}
	c.file = f
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	return applyKeys(fs, f.path, "", f.global, func(k string) bool {
		if given[k] {
			return true
		}
		v, ok := os.LookupEnv(envName(k))
		return ok && v != ""
	})
}

// serverConfig is the configuration of one server: the global one with the
// server's keys, command and environment.
func serverConfig(global *config, path string, s *serverSpec) (*config, error) {
	sc := *global
	sc.serverName = s.name
	s.opts.apply(&sc)
	sc.command = s.command
	sc.serverDir = s.cwd
	envKeys := make([]string, 0, len(s.env))
	for k := range s.env {
		envKeys = append(envKeys, k)
	}
	sort.Strings(envKeys)
	sc.serverEnv = nil
	for _, k := range envKeys {
		sc.serverEnv = append(sc.serverEnv, k+"="+s.env[k])
	}
	bad := func(key, format string, args ...any) error { return fileError(path, s.name, key, format, args...) }
	kind, headerFiles := sc.Sandbox, ""
	if s.remote != nil {
		kind = "remote"
	}
	switch kind {
	case "remote":
		var err error
		if sc.remote, headerFiles, err = readRemote(path, s); err != nil {
			return nil, err
		}
	case "local":
		if len(sc.command) == 0 {
			return nil, bad("command", "missing: a local server needs its program (or give \"sandbox\": \"docker\" and an image)")
		}
		if s.opts.has("sandbox-egress") && len(sc.SandboxEgress) > 0 {
			key := "sandbox-egress"
			if s.allowHosts {
				key = "allowHosts"
			}
			return nil, bad(key, "%s", strings.TrimPrefix(localEgressError(key).Error(), key+": "))
		}
		// Known now, not at the first session's 502.
		if _, err := exec.LookPath(sc.command[0]); err != nil {
			err = unwrapExec(err)
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is in the message already
			}
			return nil, bad("command", "%q cannot be run: %v; give a program that exists and is executable (a path, or a name on PATH)", sc.command[0], err)
		}
	case "docker":
		if err := checkEgress(sc.SandboxEgress, sc.SandboxNetwork); err != nil {
			key := "sandbox-egress"
			if s.allowHosts {
				key = "allowHosts"
			}
			return nil, bad(key, "%v", err)
		}
		if sc.Image == "" {
			return nil, bad("image", "missing: \"sandbox\": \"docker\" needs an image")
		}
		if sc.cwdSet() {
			return nil, bad("cwd", "applies to local servers only (a container's working directory is its image's)")
		}
	default:
		return nil, bad("sandbox", "%q: want local or docker", sc.Sandbox)
	}
	if err := sc.checkLimits(); err != nil {
		var le *limitError
		if errors.As(err, &le) && le.file != "" {
			key := le.key
			if !s.opts.has(key) && key == "pool-min" {
				key = "pool-max" // the server's own pool-max is below the global pool-min
			}
			return nil, bad(key, "%s", le.file)
		}
		return nil, err
	}
	sc.memory = int64(sc.SandboxMemory)
	if err := sc.checkUserEnv(); err != nil {
		return nil, bad("userEnv", "%v", err)
	}
	if err := sc.userEnvEra(); err != nil {
		return nil, bad("userEnv", "%v", err)
	}
	if err := serverGuardKeys(&sc, s, bad); err != nil {
		return nil, err
	}
	sc.guardFiles += headerFiles
	return &sc, nil
}

// serverGuardKeys checks a server's keys of the interception point and the
// stateless pool, and reads the policy and pin files it names itself (the
// global ones were read with the global options).
func serverGuardKeys(sc *config, s *serverSpec, bad func(key, format string, args ...any) error) error {
	digest := sha256.New()
	if err := sc.readGuardFiles(s.opts.has, digest); err != nil {
		var le *limitError
		if errors.As(err, &le) {
			return bad(le.key, "%s", le.file)
		}
		return err
	}
	sc.guardFiles = hex.EncodeToString(digest.Sum(nil))
	return nil
}

// fileDigest adds the name and content of a file to h (a file that cannot
// be read adds its error: it was read a moment ago).
func fileDigest(h hash.Hash, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		data = []byte(err.Error())
	}
	fmt.Fprintf(h, "%s\x00%d\x00", path, len(data))
	h.Write(data)
}

// checkServers checks the configuration of each server of the file, once
// the global one is complete.
func (c *config) checkServers() error {
	if c.file == nil {
		return nil
	}
	for _, s := range c.file.servers {
		if _, err := serverConfig(c, c.file.path, s); err != nil {
			return err
		}
	}
	return c.checkAggregates(c.file)
}

func (c *config) cwdSet() bool { return c.serverDir != "" }

package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/cloudformation"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/logx"
	"github.com/mcp-bridge/mcp-bridge/internal/units"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Every flag is also read from its BRIDGE_* variable, into the same field.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	fs := newFlagSet(&config{})
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		var v string
		switch typ := fmt.Sprintf("%T", f.Value); typ {
		case "*flag.boolValue":
			v = "true"
		case "*flag.durationValue":
			v = "7s"
		case "*flag.intValue", "*flag.int64Value":
			v = "7"
		case "*flag.float64Value":
			v = "0.5"
		case "*flag.stringValue":
			v = "some-value"
		case "*flagx.List":
			v = "a,b"
		case "*flagx.Repeat":
			v = "A=1"
		case "flag.textValue": // a typed value: one other than its default
			switch f.Value.(flag.Getter).Get().(type) {
			case *units.Duration, *units.Interval:
				v = "7s"
			case *units.Bytes:
				v = "7KiB"
			case *sandbox.PullPolicy:
				v = "always"
			case *pin.Action:
				v = "end-session"
			case *pool.Era:
				v = "modern"
			case *endpoint.Sandbox:
				v = "docker"
			case *logx.Format:
				v = "json"
			default:
				t.Fatalf("flag --%s has an unhandled type %T", f.Name, f.Value.(flag.Getter).Get())
			}
		default:
			t.Fatalf("flag --%s has an unhandled type %s", f.Name, typ)
		}
		if f.Name == "config" {
			// It names a file that must exist.
			v = filepath.Join(t.TempDir(), "servers.json")
			os.WriteFile(v, []byte(`{"mcpServers": {"a": {"command": "x"}}}`), 0o600)
		}
		t.Run(f.Name, func(t *testing.T) {
			fromFlag, err := loadConfig([]string{"--" + f.Name + "=" + v})
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(envName(f.Name), v)
			fromEnv, err := loadConfig(nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{envName(f.Name)}; !reflect.DeepEqual(fromEnv.given, want) || !reflect.DeepEqual(fromFlag.given, []string{"--" + f.Name}) {
				t.Fatalf("given: %q and %q", fromFlag.given, fromEnv.given)
			}
			fromFlag.given, fromEnv.given = nil, nil
			if !reflect.DeepEqual(fromFlag, fromEnv) {
				t.Fatalf("--%s=%s and %s=%s configure different things:\n%#v\n%#v", f.Name, v, envName(f.Name), v, fromFlag, fromEnv)
			}
			os.Unsetenv(envName(f.Name))
			defaults, _ := loadConfig(nil)
			if reflect.DeepEqual(defaults, fromEnv) {
				t.Fatalf("%s=%s changed nothing", envName(f.Name), v)
			}
		})
	})
	if n < 25 {
		t.Fatalf("only %d flags", n)
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	t.Setenv("BRIDGE_LISTEN", "127.0.0.1:1111")
	t.Setenv("BRIDGE_SESSION_IDLE_TIMEOUT", "1m")
	t.Setenv("BRIDGE_ALLOWED_ORIGINS", "https://a.example,https://b.example")
	c, err := parseConfig([]string{"--listen", "127.0.0.1:2222", "--allowed-origins", "https://c.example", "--", "srv", "-x"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:2222" || time.Duration(c.SessionIdleTimeout) != time.Minute ||
		strings.Join(c.AllowedOrigins, " ") != "https://c.example" || strings.Join(c.command, " ") != "srv -x" {
		t.Fatalf("%+v", c)
	}
}

// envconfig falls back to an unprefixed name; our tags must not let the
// shell's $PATH become --path.
func TestShellPathIsNotTheEndpointPath(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	c, err := parseConfig([]string{"--", "srv"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != "/mcp" {
		t.Fatalf("path = %q", c.Path)
	}
}

func TestConfigErrors(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("# comment\n\nsecret-1\nsecret-2\n"), 0o600)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("# none\n"), 0o600)
	affinitySecret := filepath.Join(t.TempDir(), "affinity")
	os.WriteFile(affinitySecret, []byte(strings.Repeat("k", 32)), 0o600)
	tests := []struct {
		args []string
		err  string
	}{
		{nil, "no server command"},
		{[]string{"--listen", "0.0.0.0:8080", "--", "srv"}, "refusing to listen on 0.0.0.0:8080 without authentication"},
		{[]string{"--listen", ":8080", "--", "srv"}, "without authentication"},
		{[]string{"--listen", "0.0.0.0:8080", "--insecure-no-auth", "--", "srv"}, ""},
		{[]string{"--listen", "0.0.0.0:8080", "--auth-token-file", tokens, "--", "srv"}, ""},
		{[]string{"--auth-token-file", empty, "--", "srv"}, "holds no token"},
		{[]string{"--auth-token-file", "/nonexistent/tokens", "--", "srv"}, "--auth-token-file"},
		{[]string{"--log-format", "xml", "--", "srv"}, "--log-format"},
		{[]string{"--log-level", "loud", "--", "srv"}, "--log-level"},
		{[]string{"--sandbox", "vm", "--", "srv"}, "--sandbox"},
		{[]string{"--sandbox", "docker", "--", "srv"}, "needs --image"},
		{[]string{"--sandbox", "docker", "--image", "x"}, ""},
		{[]string{"--pull", "sometimes", "--", "srv"}, "--pull"},
		{[]string{"--path", "mcp", "--", "srv"}, "must start with /"},
		{[]string{"--sandbox-memory", "lots", "--", "srv"}, "--sandbox-memory"},
		{[]string{"--max-sessions", "0", "--", "srv"}, "--max-sessions 0: want 1 or more"},
		{[]string{"--log-max-bytes", "-1", "--", "srv"}, "--log-max-bytes -1: want 1 or more"},
		{[]string{"--pool-min", "5", "--pool-max", "2", "--", "srv"}, "--pool-min 5 is above --pool-max 2"},
		{[]string{"--max-requests-per-session", "-1", "--", "srv"}, "--max-requests-per-session -1: want 0 or more"},
		{[]string{"--request-state-ttl", "0s", "--", "srv"}, "--request-state-ttl 0s: want a positive duration"},
		{[]string{"--path", "mcp", "--", "srv"}, `--path "mcp" must start with /`},
		{[]string{"--warm", "-1", "--", "srv"}, "--warm -1: want 0 or more"},
		{[]string{"--max-queued-bytes", "-1", "--", "srv"}, "--max-queued-bytes -1: want 0 or more"},
		{[]string{"--max-message-bytes", "0", "--", "srv"}, "--max-message-bytes 0: want 1 or more"},
		{[]string{"--log-max-events", "-2", "--", "srv"}, "--log-max-events -2: want 1 or more"},
		{[]string{"--pool-max", "-1", "--", "srv"}, "--pool-max -1: want 1 or more"},
		{[]string{"--stderr-line-bytes", "0", "--", "srv"}, "--stderr-line-bytes 0: want 1 or more"},
		{[]string{"--stderr-line-bytes", "-1", "--", "srv"}, "--stderr-line-bytes -1: want 1 or more"},
		{[]string{"--aggregate-separator=", "--", "srv"}, `--aggregate-separator "": want 1 to 4 of A-Z a-z 0-9 _ - .`},
		{[]string{"--sandbox", "podman", "--", "srv"}, `--sandbox "podman": want local or docker`},
		{[]string{"--pool-max-per-principal", "-1", "--", "srv"}, "--pool-max-per-principal -1: want 0 (the default) or a number of servers"},
		{[]string{"--pool-evict-idle", "-1s", "--", "srv"}, "--pool-evict-idle -1s: want a duration, 0 to stop at once"},
		{[]string{"--request-state-ttl", "-1s", "--", "srv"}, "--request-state-ttl -1s: want a positive duration"},
		{[]string{"--sse-retry", "-1s", "--", "srv"}, "--sse-retry -1s: want 0 or more"},
		{[]string{"--allowed-origins", "app.example", "--", "srv"}, `--allowed-origins "app.example": want an origin such as https://app.example.com`},
		{[]string{"--audit-args", "--", "srv"}, "--audit-args needs --audit-log"},
		{[]string{"--pool-min", "-1", "--pool-max", "1", "--", "srv"}, ""},
		{[]string{"--max-message-bytes", "lots", "--", "srv"}, "--max-message-bytes lots: want a size such as 512k, 16MiB, 1g or a number of bytes"},
		{[]string{"--child-era", "old", "--", "srv"}, `--child-era "old": want auto, legacy or modern`},
		{[]string{"--pull", "sometimes", "--sandbox", "docker", "--image", "x"}, `--pull "sometimes": want never, missing or always`},
		{[]string{"--max-sessions", "--", "srv"}, "--max-sessions --: want a whole number"},
		{[]string{"--request-timeout"}, "--request-timeout needs a value"},
		{[]string{"--listen", "0.0.0.0:8080", "--oauth-issuer", "https://auth.example.com", "--", "srv"}, ""},
		{[]string{"--oauth-client-secret-file", "/nonexistent/secret", "--", "srv"}, "--oauth-client-secret-file"},
		{[]string{"--accept-session-id", "--", "srv"}, ""},
		{[]string{"--accept-session-id", "--affinity-addr", "10.0.0.1:8080", "--affinity-secret-file", affinitySecret, "--", "srv"},
			"--accept-session-id cannot be combined with --affinity-addr"},
		{[]string{"--oauth-issuer", "https://auth.example.com", "--affinity-addr", "10.0.0.1:8080", "--affinity-secret-file", affinitySecret, "--", "srv"},
			"--oauth-issuer cannot be combined with --affinity-addr"},
	}
	for _, tc := range tests {
		c, err := parseConfig(tc.args)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
		}
		if tc.err == "" && len(tc.args) > 2 && tc.args[2] == tokens && len(c.tokens) != 2 {
			t.Errorf("tokens read: %q", c.tokens)
		}
	}
	t.Setenv("BRIDGE_AUTH_TOKENS", " , ")
	if _, err := parseConfig([]string{"--listen", "0.0.0.0:1", "--", "srv"}); err == nil {
		t.Fatal("blank BRIDGE_AUTH_TOKENS counted as a token")
	}
	if _, err := parseConfig([]string{"--affinity-addr", "10.0.0.1:8080", "--", "srv"}); err == nil || !strings.Contains(err.Error(), "needs a secret") {
		t.Fatalf("--affinity-addr without a secret: %v", err)
	}
	t.Setenv("BRIDGE_AFFINITY_SECRET", strings.Repeat("s", 32))
	if _, err := parseConfig([]string{"--", "srv"}); err == nil || !strings.Contains(err.Error(), "needs --affinity-addr") {
		t.Fatalf("an affinity secret without --affinity-addr: %v", err)
	}
	t.Setenv("BRIDGE_AFFINITY_SECRET", "")
	t.Setenv("BRIDGE_AUTH_TOKENS", "t1,t2")
	c, err := parseConfig([]string{"--listen", "0.0.0.0:1", "--", "srv"})
	if err != nil || len(c.tokens) != 2 {
		t.Fatalf("BRIDGE_AUTH_TOKENS: %v %q", err, c.tokens)
	}
	if strings.Join(c.AllowedHosts, ",") != "" {
		t.Fatalf("non-loopback listen restricts hosts to %q", c.AllowedHosts)
	}
	c, _ = parseConfig([]string{"--", "srv"})
	if strings.Join(c.AllowedHosts, ",") != "localhost,127.0.0.1,::1" {
		t.Fatalf("loopback listen allows hosts %q", c.AllowedHosts)
	}
}

func TestHelpShowsFlagsAndVariables(t *testing.T) {
	var out bytes.Buffer
	code := run(t.Context(), []string{"--help"}, &out, io.Discard)
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	help := out.String()
	newFlagSet(&config{}).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "--"+f.Name+" ") || !strings.Contains(help, "env "+envName(f.Name)) {
			t.Errorf("--help lacks --%s or %s", f.Name, envName(f.Name))
		}
	})
	if !strings.Contains(help, "BRIDGE_AUTH_TOKENS") {
		t.Error("--help lacks BRIDGE_AUTH_TOKENS")
	}
}

// The defaults of the HTTP edge's flags are the bridge package's constants,
// which document them.
func TestHTTPEdgeDefaults(t *testing.T) {
	c, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		flag      string
		got, want any
	}{
		{"body-read-timeout", time.Duration(c.BodyReadTimeout), bridge.DefaultBodyReadTimeout},
		{"write-timeout", time.Duration(c.WriteTimeout), bridge.DefaultWriteTimeout},
		{"http-idle-timeout", time.Duration(c.HTTPIdleTimeout), bridge.DefaultIdleTimeout},
		{"max-connections", c.MaxConnections, bridge.DefaultMaxConnections},
		{"max-connections-per-client", c.MaxConnectionsPerClient, bridge.DefaultMaxConnectionsPerClient},
		{"max-body-bytes-in-flight", int64(c.MaxBodyBytesInFlight), int64(bridge.DefaultMaxBodyBytesInFlight)},
	} {
		if d.got != d.want {
			t.Errorf("--%s defaults to %v, the bridge package to %v", d.flag, d.got, d.want)
		}
	}
}

// envNamesRead are the variables cmd/bridge reads: the envconfig tags.
func envNamesRead(t *testing.T) map[string]bool {
	t.Helper()
	read := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(config{})) {
		if tag := f.Tag.Get("envconfig"); tag != "" {
			read[tag] = true
		}
	}
	return read
}

// Every BRIDGE_* variable that the CloudFormation template (bridge.yaml and
// the names cloudformation.go exports for it) and the Dockerfiles set is one
// that cmd/bridge reads: a renamed flag must not silently drop a deployment's
// setting.
func TestDeploymentsSetVariablesTheBridgeReads(t *testing.T) {
	read := envNamesRead(t)
	named := regexp.MustCompile(`\bBRIDGE_[A-Z0-9_]+\b`)
	sources := map[string][]byte{"cloudformation/bridge.yaml": cloudformation.Template}
	for _, f := range []string{"cloudformation/cloudformation.go", "dockerfiles/Dockerfile", "dockerfiles/scratch.Dockerfile",
		"dockerfiles/go.Dockerfile.tmpl", "dockerfiles/npx.Dockerfile.tmpl", "dockerfiles/uvx.Dockerfile.tmpl",
		"deploy/kubernetes/bridge.yaml", "deploy/compose/compose.yaml", "deploy/compose/Dockerfile",
		"cmd/bridge/testdata/deploy/dry-run-agentcore-npx.golden", "deploy/agentcore.go"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		sources[f] = b
	}
	for f, b := range sources {
		names := named.FindAllString(string(b), -1)
		if len(names) == 0 {
			t.Errorf("%s sets no BRIDGE_* variable", f)
		}
		for _, n := range names {
			if !read[n] {
				t.Errorf("%s sets %s, which cmd/bridge does not read", f, n)
			}
		}
	}
	for _, n := range []string{cloudformation.EnvListen, cloudformation.EnvPath, cloudformation.EnvSandbox, cloudformation.EnvAffinityAddr,
		cloudformation.EnvLogFormat, cloudformation.EnvAuthTokens, cloudformation.EnvAffinitySecret} {
		if !read[n] {
			t.Errorf("cloudformation names %s, which cmd/bridge does not read", n)
		}
	}
}

// A default lives once, in the package that uses it: no envconfig default
// tag repeats it (defaultConfig sets it from the package's constant).
func TestNoDefaultTags(t *testing.T) {
	for _, f := range reflect.VisibleFields(reflect.TypeOf(config{})) {
		if d, ok := f.Tag.Lookup("default"); ok {
			t.Errorf("config.%s has default:%q; set it in defaultConfig from the package's exported constant", f.Name, d)
		}
	}
	// The help shows the packages' defaults.
	var out bytes.Buffer
	usage(newFlagSet(defaultConfig()), &out)
	for _, want := range []string{"default " + session.DefaultIdleTimeout.String(), "default " + sandbox.DefaultStopGrace.String(),
		fmt.Sprintf("default %d", session.DefaultMaxSessions), "default " + sandbox.DefaultDockerUser} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// Every option of the table names a flag that exists, and a library error
// that names its option gets the flag.
func TestOptionFlagsExist(t *testing.T) {
	fs := newFlagSet(defaultConfig())
	for opt, f := range optionFlags {
		if fs.Lookup(f) == nil {
			t.Errorf("option %s maps to --%s, which is not a flag", opt, f)
		}
	}
	err := fmt.Errorf("docker sandbox: %w", optErr{"sandbox.DockerOptions.User", "want UID:GID"})
	if got := explain(err).Error(); got != "--sandbox-user: docker sandbox: want UID:GID" {
		t.Errorf("explain: %q", got)
	}
}

type optErr struct{ opt, msg string }

func (e optErr) Error() string  { return e.msg }
func (e optErr) Option() string { return e.opt }

// The global options of a config file apply below BRIDGE_* variables and
// flags; a server's keys apply over all of them, for that server only.
func TestConfigFileGlobalsAndServerKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "servers.json")
	os.WriteFile(path, []byte(`{
		"bridge": {"max-sessions": 7, "log-level": "debug", "request-timeout": "1m", "allowed-origins": ["https://a.example"]},
		"mcpServers": {"a": {"command": "sh", "args": ["-x"], "request-timeout": "3m", "sandbox-mount": ["/x:/y"], "env": {"B": "2", "A": "1"}},
		               "b": {"command": "sh"}}}`), 0o600)
	t.Setenv("BRIDGE_LOG_LEVEL", "warn")
	c, err := parseConfig([]string{"--config", path, "--request-timeout", "2m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxSessions != 7 || c.LogLevel != "warn" || time.Duration(c.RequestTimeout) != 2*time.Minute || strings.Join(c.AllowedOrigins, ",") != "https://a.example" {
		t.Fatalf("globals: max-sessions %d, log-level %s, request-timeout %s, allowed-origins %v", c.MaxSessions, c.LogLevel, c.RequestTimeout, c.AllowedOrigins)
	}
	a, err := serverConfig(c, path, c.file.Servers[0])
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(a.RequestTimeout) != 3*time.Minute || a.MaxSessions != 7 || strings.Join(a.command, " ") != "sh -x" ||
		strings.Join(a.SandboxMounts, ",") != "/x:/y" || strings.Join(a.serverEnv, ",") != "A=1,B=2" {
		t.Fatalf("server a: %+v", a)
	}
	b, err := serverConfig(c, path, c.file.Servers[1])
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(b.RequestTimeout) != 2*time.Minute || len(b.SandboxMounts) != 0 || len(b.serverEnv) != 0 {
		t.Fatalf("server b took a's keys: %+v", b)
	}
}

// A typed value reads the same from a flag, a variable and the config
// file: sizes with units, durations that may be never.
func TestTypedValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "servers.json")
	os.WriteFile(path, []byte(`{"bridge": {"log-max-bytes": "2MiB"},
		"mcpServers": {"a": {"command": "sh", "max-message-bytes": "1m", "request-timeout": "never", "pull": "always", "sandbox": "docker", "image": "x"}}}`), 0o600)
	t.Setenv("BRIDGE_MAX_QUEUED_BYTES", "512k")
	c, err := parseConfig([]string{"--config", path, "--max-message-bytes", "16MiB", "--sse-keepalive", "never", "--session-idle-timeout", "never", "--on-pin-violation", "end-session", "--child-era", "legacy"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxMessageBytes != 16<<20 || c.MaxQueuedBytes != 512<<10 || c.LogMaxBytes != 2<<20 || c.SSEKeepAlive != 0 || !c.SessionIdleTimeout.IsNever() ||
		c.OnPinViolation != pin.EndSession || c.ChildEra != pool.EraLegacy {
		t.Fatalf("read %+v", c)
	}
	a, err := serverConfig(c, path, c.file.Servers[0])
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxMessageBytes != 1<<20 || !a.RequestTimeout.IsNever() || a.Pull != sandbox.PullAlways {
		t.Fatalf("server a: max-message-bytes %v, request-timeout %v, pull %v", a.MaxMessageBytes, a.RequestTimeout, a.Pull)
	}
}

// Each loosening of a server's options names the flag that sets it
// (optionFlags), in the command's warning.
func TestLooseningsNameFlags(t *testing.T) {
	cfg, err := parseConfig([]string{"--sandbox", "docker", "--image", "alpine", "--allow-hidden-unicode",
		"--max-description-bytes", "-1", "--audit-log", "-", "--audit-args",
		"--sandbox-egress", "api.example", "--sandbox-mount", "/a:/a", "--sandbox-env", "K=v", "--sandbox-user", "0:0",
		"--sandbox-memory", "1g", "--sandbox-cpus", "1.5", "--sandbox-pids", "512"})
	if err != nil {
		t.Fatal(err)
	}
	ls := endpointOptions(cfg).Loosenings()
	if len(ls) != 10 {
		t.Errorf("%d loosenings, want 10: %v", len(ls), ls)
	}
	cfg.SandboxEgress, cfg.SandboxNetwork = nil, "bridge" // excluded by --sandbox-egress
	ls = append(ls, endpointOptions(cfg).Loosenings()...)
	for _, l := range ls {
		if optionFlags[l.Option] == "" {
			t.Errorf("loosening of %s: no flag in optionFlags", l.Option)
		}
	}
}

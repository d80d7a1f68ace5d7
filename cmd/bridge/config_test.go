package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// Every flag is also read from its BRIDGE_* variable, into the same field.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	fs := newFlagSet(&config{}, io.Discard)
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
		case "*main.listFlag":
			v = "a,b"
		default:
			t.Fatalf("flag --%s has an unhandled type %s", f.Name, typ)
		}
		if f.Name == "config" {
			// It names a file that must exist.
			v = filepath.Join(t.TempDir(), "servers.json")
			os.WriteFile(v, []byte(`{"mcpServers": {"a": {"command": "x"}}}`), 0o600)
		}
		t.Run(f.Name, func(t *testing.T) {
			fromFlag, err := loadConfig([]string{"--" + f.Name + "=" + v}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(envName(f.Name), v)
			fromEnv, err := loadConfig(nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fromFlag, fromEnv) {
				t.Fatalf("--%s=%s and %s=%s configure different things:\n%#v\n%#v", f.Name, v, envName(f.Name), v, fromFlag, fromEnv)
			}
			os.Unsetenv(envName(f.Name))
			defaults, _ := loadConfig(nil, io.Discard)
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
	c, err := parseConfig([]string{"--listen", "127.0.0.1:2222", "--allowed-origins", "https://c.example", "--", "srv", "-x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:2222" || c.SessionIdleTimeout != time.Minute ||
		strings.Join(c.AllowedOrigins, " ") != "https://c.example" || strings.Join(c.command, " ") != "srv -x" {
		t.Fatalf("%+v", c)
	}
}

// envconfig falls back to an unprefixed name; our tags must not let the
// shell's $PATH become --path.
func TestShellPathIsNotTheEndpointPath(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	c, err := parseConfig([]string{"--", "srv"}, io.Discard)
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
		{[]string{"--max-sessions", "0", "--", "srv"}, "must be positive"},
	}
	for _, tc := range tests {
		c, err := parseConfig(tc.args, io.Discard)
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
	if _, err := parseConfig([]string{"--listen", "0.0.0.0:1", "--", "srv"}, io.Discard); err == nil {
		t.Fatal("blank BRIDGE_AUTH_TOKENS counted as a token")
	}
	if _, err := parseConfig([]string{"--affinity-addr", "10.0.0.1:8080", "--", "srv"}, io.Discard); err == nil || !strings.Contains(err.Error(), "needs a secret") {
		t.Fatalf("--affinity-addr without a secret: %v", err)
	}
	t.Setenv("BRIDGE_AFFINITY_SECRET", strings.Repeat("s", 32))
	if _, err := parseConfig([]string{"--", "srv"}, io.Discard); err == nil || !strings.Contains(err.Error(), "needs --affinity-addr") {
		t.Fatalf("an affinity secret without --affinity-addr: %v", err)
	}
	t.Setenv("BRIDGE_AFFINITY_SECRET", "")
	t.Setenv("BRIDGE_AUTH_TOKENS", "t1,t2")
	c, err := parseConfig([]string{"--listen", "0.0.0.0:1", "--", "srv"}, io.Discard)
	if err != nil || len(c.tokens) != 2 {
		t.Fatalf("BRIDGE_AUTH_TOKENS: %v %q", err, c.tokens)
	}
	if strings.Join(c.AllowedHosts, ",") != "" {
		t.Fatalf("non-loopback listen restricts hosts to %q", c.AllowedHosts)
	}
	c, _ = parseConfig([]string{"--", "srv"}, io.Discard)
	if strings.Join(c.AllowedHosts, ",") != "localhost,127.0.0.1,::1" {
		t.Fatalf("loopback listen allows hosts %q", c.AllowedHosts)
	}
}

func TestHelpShowsFlagsAndVariables(t *testing.T) {
	var out bytes.Buffer
	code := run(t.Context(), []string{"--help"}, io.Discard, &out)
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	help := out.String()
	newFlagSet(&config{}, io.Discard).VisitAll(func(f *flag.Flag) {
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
	c, err := loadConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		flag      string
		got, want any
	}{
		{"body-read-timeout", c.BodyReadTimeout, bridge.DefaultBodyReadTimeout},
		{"write-timeout", c.WriteTimeout, bridge.DefaultWriteTimeout},
		{"http-idle-timeout", c.HTTPIdleTimeout, bridge.DefaultIdleTimeout},
		{"max-connections", c.MaxConnections, bridge.DefaultMaxConnections},
		{"max-connections-per-client", c.MaxConnectionsPerClient, bridge.DefaultMaxConnectionsPerClient},
		{"max-body-bytes-in-flight", c.MaxBodyBytesInFlight, int64(bridge.DefaultMaxBodyBytesInFlight)},
	} {
		if d.got != d.want {
			t.Errorf("--%s defaults to %v, the bridge package to %v", d.flag, d.got, d.want)
		}
	}
}

// The global options of a config file apply below BRIDGE_* variables and
// flags; a server's keys apply over all of them, for that server only.
func TestConfigFileGlobalsAndServerKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "servers.json")
	os.WriteFile(path, []byte(`{
		"bridge": {"max-sessions": 7, "log-level": "debug", "request-timeout": "1m", "allowed-origins": ["https://a.example"]},
		"mcpServers": {"a": {"command": "srv", "args": ["-x"], "request-timeout": "3m", "sandbox-mount": ["/x:/y"], "env": {"B": "2", "A": "1"}},
		               "b": {"command": "other"}}}`), 0o600)
	t.Setenv("BRIDGE_LOG_LEVEL", "warn")
	c, err := parseConfig([]string{"--config", path, "--request-timeout", "2m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxSessions != 7 || c.LogLevel != "warn" || c.RequestTimeout != 2*time.Minute || strings.Join(c.AllowedOrigins, ",") != "https://a.example" {
		t.Fatalf("globals: max-sessions %d, log-level %s, request-timeout %s, allowed-origins %v", c.MaxSessions, c.LogLevel, c.RequestTimeout, c.AllowedOrigins)
	}
	a, err := serverConfig(c, path, c.file.servers[0])
	if err != nil {
		t.Fatal(err)
	}
	if a.RequestTimeout != 3*time.Minute || a.MaxSessions != 7 || strings.Join(a.command, " ") != "srv -x" ||
		strings.Join(a.SandboxMounts, ",") != "/x:/y" || strings.Join(a.serverEnv, ",") != "A=1,B=2" {
		t.Fatalf("server a: %+v", a)
	}
	b, err := serverConfig(c, path, c.file.servers[1])
	if err != nil {
		t.Fatal(err)
	}
	if b.RequestTimeout != 2*time.Minute || len(b.SandboxMounts) != 0 || len(b.serverEnv) != 0 {
		t.Fatalf("server b took a's keys: %+v", b)
	}
}

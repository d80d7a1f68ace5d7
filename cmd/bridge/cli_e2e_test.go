package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runBinary runs the bridge binary to its end and returns its stdout,
// stderr and exit status. The environment holds no BRIDGE_* variable but
// those given.
func runBinary(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// A bridge that should exit at once but serves instead is stopped.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix+"_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Errorf("bridge %q was still running after 2 minutes", args)
	}
	return out.String(), errOut.String(), code
}

// The messages a newcomer sees for a bad command line: one line saying what
// was wrong, naming the flag as the documentation does, then one pointing at
// --help; never the whole usage.
func TestCLIMessages(t *testing.T) {
	bin, hello := buildBinaries(t)
	const help = "Run 'bridge --help' for usage.\n"
	tests := []struct {
		args []string
		env  []string
		want string // the whole of stderr
		code int
	}{
		{args: []string{"--session-idle-timeout", "5", "--", hello},
			want: "bridge: --session-idle-timeout 5: a duration needs a unit, e.g. 5s\n" + help, code: 2},
		{args: []string{"--max-sessions", "abc", "--", hello},
			want: "bridge: --max-sessions abc: want a whole number\n" + help, code: 2},
		{args: []string{"--max-sessions", "-5", "--", hello},
			want: "bridge: --max-sessions -5: want 1 or more\n" + help, code: 2},
		{args: []string{"--listen", "127.0.0.1:99999", "--", hello},
			want: "bridge: --listen 127.0.0.1:99999: port 99999 is invalid: want a number from 0 to 65535\n" + help, code: 2},
		{args: []string{"--listen", "notanaddress", "--", hello},
			want: "bridge: --listen notanaddress: malformed address: want HOST:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:8080\n" + help, code: 2},
		{args: []string{"--sse-poll-after", "-1s", "--", hello},
			want: "bridge: --sse-poll-after -1s: want 0 (never) or more\n" + help, code: 2},
		{args: []string{"--allowed-origins", "not a url", "--", hello},
			want: "bridge: --allowed-origins \"not a url\": want an origin such as https://app.example.com (scheme://host[:port], no path) or *\n" + help, code: 2},
		{args: []string{"--no-such-flag", "--", hello},
			want: "bridge: unknown flag --no-such-flag\n" + help, code: 2},
		{args: []string{"--", hello}, env: []string{"BRIDGE_SESSION_IDLE_TIMEOUT=90"},
			want: "bridge: BRIDGE_SESSION_IDLE_TIMEOUT=90: a duration needs a unit, e.g. 90s\n" + help, code: 2},
		{args: []string{"--sandbox-user", "0:0", "--", hello},
			want: "bridge: --sandbox-user only applies to --sandbox docker (with --sandbox local, the default, the server is a process of the bridge's user); remove it or add --sandbox docker\n" + help, code: 2},
		{args: []string{"--sandbox-network", "bridge", "--", hello}, env: []string{"BRIDGE_SANDBOX_MEMORY=1g"},
			want: "bridge: BRIDGE_SANDBOX_MEMORY, --sandbox-network only apply to --sandbox docker (with --sandbox local, the default, the server is a process of the bridge's user); remove them or add --sandbox docker\n" + help, code: 2},
		{args: []string{"--", "/nonexistent/server"},
			want: "bridge: the MCP server command \"/nonexistent/server\" cannot be run: stat /nonexistent/server: no such file or directory; give a program that exists and is executable (a path, or a name on PATH) after --\n", code: 1},
		{args: []string{"--", "no-such-mcp-server-anywhere"},
			want: "bridge: the MCP server command \"no-such-mcp-server-anywhere\" cannot be run: executable file not found in $PATH; give a program that exists and is executable (a path, or a name on PATH) after --\n", code: 1},
	}
	notExec := filepath.Join(t.TempDir(), "server.py")
	if err := os.WriteFile(notExec, []byte("print()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct {
		args []string
		env  []string
		want string
		code int
	}{args: []string{"--", notExec},
		want: "bridge: the MCP server command \"" + notExec + "\" cannot be run: permission denied; give a program that exists and is executable (a path, or a name on PATH) after --\n", code: 1})
	for _, tc := range tests {
		stdout, stderr, code := runBinary(t, bin, tc.env, tc.args...)
		if stderr != tc.want || code != tc.code || stdout != "" {
			t.Errorf("bridge %q (env %q): exit %d, stdout %q, stderr:\n%s\nwant exit %d, stderr:\n%s", tc.args, tc.env, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// Only a port that another process holds is blamed on another process.
func TestCLIPortInUse(t *testing.T) {
	bin, hello := buildBinaries(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	stdout, stderr, code := runBinary(t, bin, nil, "--listen", addr, "--", hello)
	want := "bridge: --listen " + addr + ": listen tcp " + addr + ": bind: address already in use (another process is using the port; choose another address with --listen)\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant:\n%s", code, stdout, stderr, want)
	}
}

// --help and "bridge help" print the usage to stdout and exit 0; "bridge
// help" does not start a server named help.
func TestCLIHelpAndVersion(t *testing.T) {
	bin, _ := buildBinaries(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--listen", "127.0.0.1:0", "--help"}} {
		stdout, stderr, code := runBinary(t, bin, nil, args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "Usage:\n  bridge [flags] -- COMMAND [ARGS...]") || !strings.Contains(stdout, "--max-sessions int") {
			t.Errorf("bridge %q: exit %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		stdout, stderr, code := runBinary(t, bin, nil, args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "bridge ") || !strings.HasSuffix(stdout, " "+runtime.Version()+"\n") {
			t.Errorf("bridge %q: exit %d, stderr %q, stdout %q", args, code, stderr, stdout)
		}
	}
}

// Each loosening of a safe default is logged as a WARN with its risk.
func TestCLIWarnsOfLoosenings(t *testing.T) {
	bin, hello := buildBinaries(t)
	p := startBridgeBinary(t, bin, "--allowed-origins", "*", "--listen", "0.0.0.0:0", "--insecure-no-auth", "--", hello)
	p.cmd.Process.Signal(os.Interrupt)
	p.cmd.Wait()
	var warned []string
	for _, l := range <-p.done {
		var rec struct{ Level, Msg, Flag, Value string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Level == "WARN" {
			warned = append(warned, rec.Flag+" "+rec.Value+": "+rec.Msg)
		}
	}
	want := []string{
		"--insecure-no-auth true: loosened: no authentication on 0.0.0.0:0: anyone who reaches it can run your server",
		"--allowed-origins *: loosened: any web page open in a browser that reaches the bridge can call your server",
	}
	if strings.Join(warned, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(warned, "\n"), strings.Join(want, "\n"))
	}
}

// A server that cannot start for a session (here a script whose interpreter
// is missing: it passes the start-up check, and fails at exec) gets an error
// that names the session once. Unsupervised, because under the supervisor
// the exec fails in the supervisor, and the session ends as a server that
// exited with status 127 (its stderr says why).
func TestLaunchErrorNamesSessionOnce(t *testing.T) {
	bin, _ := buildBinaries(t)
	script := filepath.Join(t.TempDir(), "server")
	if err := os.WriteFile(script, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startBridgeBinary(t, bin, "--local-unsupervised", "--", script)
	req, _ := http.NewRequest("POST", p.url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`session ([0-9a-f]{8,32})`).FindStringSubmatch(body.Error.Message)
	if resp.StatusCode != http.StatusBadGateway || m == nil || strings.Count(body.Error.Message, m[1]) != 1 ||
		!strings.HasPrefix(body.Error.Message, "cannot start the MCP server for session "+m[1]+": ") {
		t.Fatalf("status %d, error %q: want 502 naming the session once", resp.StatusCode, body.Error.Message)
	}
}

// The subcommands' help, when asked for, goes to stdout too; a bad flag
// gets one line and a pointer to --help on stderr.
func TestCLISubcommandHelp(t *testing.T) {
	bin, _ := buildBinaries(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "--help"}, "Usage:\n  bridge image build "},
		{[]string{"image", "build", "--help"}, "Usage:\n  bridge image build "},
		{[]string{"deploy", "--help"}, "Usage:\n  bridge deploy aws "},
		{[]string{"deploy", "aws", "-h"}, "Usage:\n  bridge deploy aws "},
	} {
		stdout, stderr, code := runBinary(t, bin, nil, tc.args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, tc.want) {
			t.Errorf("bridge %q: exit %d, stderr %q, stdout:\n%s", tc.args, code, stderr, stdout)
		}
	}
	stdout, stderr, code := runBinary(t, bin, nil, "image", "build", "--bogus")
	if want := "bridge image build: unknown flag --bogus\nRun 'bridge image build --help' for usage.\n"; code != 2 || stdout != "" || stderr != want {
		t.Errorf("bridge image build --bogus: exit %d, stdout %q, stderr %q, want %q", code, stdout, stderr, want)
	}
}

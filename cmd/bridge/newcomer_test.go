package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveOnce runs serve in this process with args (and the environment the
// test set), waits until it listens, stops it, and returns its JSON log
// records in order.
func serveOnce(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	_, stop := serveStart(t, args...)
	return stop()
}

// serveStart runs serve in this process until stop, which returns the JSON
// log records in order. url is the MCP endpoint (one-command mode).
func serveStart(t *testing.T, args ...string) (url string, stop func() []map[string]any) {
	t.Helper()
	cfg, err := parseConfig(append([]string{"--log-format", "json"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var out testlog.Buffer
	logger := newLogger(cfg, &out)
	warnLoosenings(cfg, logger)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logger, ready) }()
	select {
	case addr := <-ready:
		url = "http://" + addr.String() + cfg.Path
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v\n%s", err, out.String())
	}
	var recs []map[string]any
	stopped := false
	stop = func() []map[string]any {
		if stopped {
			return recs
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			recs = append(recs, rec)
		}
		return recs
	}
	t.Cleanup(func() { stop() })
	return url, stop
}

// logRecord is the first record with msg, or nil.
func logRecord(recs []map[string]any, msg string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

// The start-up line names the authentication in force, not
// whether there are static tokens (it said auth=false with --oauth-issuer).
func TestStartupLineNamesAuth(t *testing.T) {
	_, helloBin := buildBinaries(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokenFile, []byte("a-long-enough-token-for-the-test\n"), 0o600)
	ca := newTestCA(t)
	cert, key := ca.issue(t, 2, false)
	for name, data := range map[string][]byte{"cert.pem": cert, "key.pem": key, "ca.pem": ca.pem} {
		os.WriteFile(filepath.Join(dir, name), data, 0o600)
	}
	const resource = "http://localhost/mcp"
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "none"},
		{[]string{"--auth-token-file", tokenFile}, "tokens"},
		{[]string{"--oauth-issuer", as.URL, "--resource-url", resource}, "oauth"},
		{[]string{"--oauth-issuer", as.URL, "--resource-url", resource, "--auth-token-file", tokenFile}, "tokens+oauth"},
		{[]string{"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"),
			"--tls-client-ca", filepath.Join(dir, "ca.pem")}, "mtls"},
	} {
		args := append([]string{"--listen", "127.0.0.1:0"}, tc.args...)
		rec := logRecord(serveOnce(t, append(args, "--", helloBin)...), "bridge listening")
		if rec == nil || rec["auth"] != tc.want {
			t.Errorf("%q: the start-up line says auth=%v, want %s", tc.args, rec["auth"], tc.want)
		}
	}
}

// The start-up line keeps --listen's host: --listen 0.0.0.0:PORT once
// logged http://[::]:PORT.
func TestStartupLineURLKeepsListenHost(t *testing.T) {
	_, helloBin := buildBinaries(t)
	rec := logRecord(serveOnce(t, "--listen", "0.0.0.0:0", "--insecure-no-auth", "--", helloBin), "bridge listening")
	url, _ := rec["url"].(string)
	if !strings.HasPrefix(url, "http://0.0.0.0:") || !strings.HasSuffix(url, "/mcp") || strings.HasSuffix(url, ":0/mcp") {
		t.Errorf("--listen 0.0.0.0:0 logged url %q, want http://0.0.0.0:PORT/mcp", url)
	}
}

// A TLS key that does not match its certificate is a start-up
// error of one plain line, like every other, not a log record.
func TestCLIMismatchedTLSKey(t *testing.T) {
	bin, hello := buildBinaries(t)
	dir := t.TempDir()
	ca := newTestCA(t)
	cert, _ := ca.issue(t, 2, false)
	_, otherKey := ca.issue(t, 3, false)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, cert, 0o600)
	os.WriteFile(keyFile, otherKey, 0o600)
	stdout, stderr, code := runBinary(t, bin, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--", hello)
	want := "bridge: loading --tls-cert " + certFile + " and --tls-key " + keyFile + ": tls: private key does not match public key\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1, stderr:\n%s", code, stdout, stderr, want)
	}
}

// A token a guesser finds at once, or a token file other users
// can read, is accepted with a WARN that says so.
func TestWeakTokensWarn(t *testing.T) {
	_, helloBin := buildBinaries(t)
	dir := t.TempDir()
	readable := filepath.Join(dir, "tokens")
	os.WriteFile(readable, []byte("a-long-enough-token-for-the-test\n"), 0o644)
	os.Chmod(readable, 0o644) // whatever the umask
	t.Setenv("BRIDGE_AUTH_TOKENS", "x")
	recs := serveOnce(t, "--listen", "127.0.0.1:0", "--auth-token-file", readable, "--", helloBin)
	var warned []string
	for _, r := range recs {
		if r["level"] == "WARN" {
			warned = append(warned, r["msg"].(string))
		}
	}
	got := strings.Join(warned, "\n")
	for _, want := range []string{
		"a bearer token is too short to resist guessing (1 of at least 16 characters): use 32 random characters or more (openssl rand -hex 32)",
		"--auth-token-file " + readable + " is readable by other users of this host (mode 0644): they can read the tokens; chmod 600 it",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no WARN %q; WARN lines:\n%s", want, got)
		}
	}
}

// The flags users of other bridges type get a hint toward ours.
func TestUnknownFlagHints(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--port", "unknown flag --port: the bridge takes the address and port together: --listen 127.0.0.1:8080 (0.0.0.0:8080 for every interface, with authentication)"},
		{"-p", "unknown flag -p: the bridge takes the address and port together: --listen 127.0.0.1:8080 (0.0.0.0:8080 for every interface, with authentication)"},
		{"--host", "unknown flag --host: the bridge takes the address and port together: --listen 127.0.0.1:8080 (0.0.0.0:8080 for every interface, with authentication)"},
		{"--token", "unknown flag --token: a token on the command line is visible to every local user: put tokens in a file for --auth-token-file, or in BRIDGE_AUTH_TOKENS"},
		{"--debug", "unknown flag --debug: use --log-level debug"},
		{"--stdio", "unknown flag --stdio: the server always speaks stdio to the bridge; give its command after --, as in: bridge -- npx -y @modelcontextprotocol/server-everything"},
		{"--no-such-flag", "unknown flag --no-such-flag"},
	} {
		_, err := parseConfig([]string{tc.arg, "8080", "--", "server"})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v\nwant %s", tc.arg, err, tc.want)
		}
	}
}

// The start-up line says what a local server gets of the
// bridge's environment and how to pass more.
func TestServerEnvironmentLine(t *testing.T) {
	_, helloBin := buildBinaries(t)
	recs := serveOnce(t, "--listen", "127.0.0.1:0", "--env", "GITHUB_TOKEN", "--env", "A=b", "--", helloBin)
	rec := logRecord(recs, "local MCP servers get only these variables of the bridge's environment, and those of --env; pass another with --env NAME, or all but BRIDGE_* with --env-inherit")
	if rec == nil {
		t.Fatalf("no line on the servers' environment")
	}
	if rec["passed"] != sandbox.DefaultEnvAllow || rec["env"] != "GITHUB_TOKEN,A" {
		t.Errorf("the environment line: %v", rec)
	}
}

// --env-inherit passes the bridge's environment but its BRIDGE_*
// variables and any variable holding one of its secrets, with a WARN.
func TestEnvInherit(t *testing.T) {
	_, helloBin := buildBinaries(t)
	const token = "a-long-enough-token-for-the-test"
	t.Setenv("BRIDGE_AUTH_TOKENS", token)
	t.Setenv("BRIDGE_SOMETHING", "bridge-only")
	t.Setenv("MY_API_KEY", "key-for-the-server")
	t.Setenv("COPY_OF_THE_TOKEN", "Bearer "+token)
	envFile := filepath.Join(t.TempDir(), "env")
	url, stop := serveStart(t, "--listen", "127.0.0.1:0", "--env-inherit", "--",
		"/bin/sh", "-c", `env > "$0"; exec "$1"`, envFile, helloBin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	cs.Close()
	recs := stop()
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "MY_API_KEY=key-for-the-server\n") {
		t.Errorf("the server did not get MY_API_KEY:\n%s", env)
	}
	for _, secret := range []string{"\nBRIDGE_", token} {
		if strings.Contains("\n"+string(env), secret) {
			t.Errorf("the server's environment holds %q:\n%s", secret, env)
		}
	}
	var warned bool
	for _, r := range recs {
		if r["level"] == "WARN" && r["flag"] == "--env-inherit" {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no WARN for --env-inherit")
	}
}

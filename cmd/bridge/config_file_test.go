package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A bad config file: the real binary refuses to start, exits 2, and names
// the file, the server and the key.
func TestConfigFileErrors(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name, file, want string
	}{
		{"syntax", `{"mcpServers": {"a": {"command": "x",}}}`,
			`config F: not a JSON object: line 1, column 38: invalid character '}' looking for beginning of object key string`},
		{"unknown top-level key", `{"servers": {}}`,
			`config F: key "servers": unknown key at the top level; want mcpServers (the servers), groups (aggregates of some of them), aggregate (the aggregates' bounds) and bridge (global options, named as the flags)`},
		{"no servers", `{"mcpServers": {}}`,
			`config F: key "mcpServers": no server to serve (all are disabled, or none is listed)`},
		{"unknown server key", `{"mcpServers": {"a": {"command": "x", "sandbox-netwrk": "bridge"}}}`,
			`config F: server "a": key "sandbox-netwrk": unknown key; a server takes command, args, env, cwd, type, disabled, prefix, url, headers, headerFiles, and the per-server options `},
		{"bad duration", `{"mcpServers": {"a": {"command": "x", "request-timeout": "10"}}}`,
			`config F: server "a": key "request-timeout": "10": a duration needs a unit, e.g. 10s`},
		{"bad type", `{"mcpServers": {"a": {"command": "x", "max-sessions": "many"}}}`,
			`config F: server "a": key "max-sessions": "many": want a whole number`},
		{"bad sandbox", `{"mcpServers": {"a": {"command": "x", "sandbox": "vm"}}}`,
			`config F: server "a": key "sandbox": "vm": want local or docker`},
		{"docker without image", `{"mcpServers": {"a": {"command": "x", "sandbox": "docker"}}}`,
			`config F: server "a": key "image": missing: "sandbox": "docker" needs an image`},
		{"no command", `{"mcpServers": {"a": {"args": ["x"]}}}`,
			`config F: server "a": key "command": missing: args are given without a command`},
		{"command not found", `{"mcpServers": {"a": {"command": "/nonexistent/srv"}}}`,
			`config F: server "a": key "command": "/nonexistent/srv" cannot be run: no such file or directory; give a program that exists and is executable (a path, or a name on PATH)`},
		{"reserved env", `{"mcpServers": {"a": {"command": "x", "env": {"BRIDGE_AUTH_TOKENS": "t"}}}}`,
			`config F: server "a": key "env": BRIDGE_AUTH_TOKENS: BRIDGE_* variables are the bridge's own (tokens, secrets) and are never passed to a server; pass the value under another name`},
		{"args not strings", `{"mcpServers": {"a": {"command": "x", "args": [1]}}}`,
			`config F: server "a": key "args": want an array of strings`},
		{"env not strings", `{"mcpServers": {"a": {"command": "x", "env": {"A": 1}}}}`,
			`config F: server "a": key "env": want an object of strings, e.g. {"API_KEY": "..."}`},
		{"remote server with a local key", `{"mcpServers": {"a": {"type": "sse", "url": "http://x", "cwd": "/"}}}`,
			`config F: server "a": key `},
		{"bad name", `{"mcpServers": {"a/b": {"command": "x"}}}`,
			`config F: server "a/b": invalid name: it is a URL path segment (/servers/NAME/mcp)`},
		{"bad global", `{"bridge": {"max-sesions": 3}, "mcpServers": {"a": {"command": "x"}}}`,
			`config F: key "max-sesions": unknown option; the keys are the names of the flags (bridge --help)`},
		{"bad global value", `{"bridge": {"json-response": "yes"}, "mcpServers": {"a": {"command": "x"}}}`,
			`config F: key "json-response": "yes": want true or false`},
		// The guards and the stateless pool of a server (HELLO: a real program).
		{"missing policy", `{"mcpServers": {"a": {"command": "HELLO", "policy": "/nonexistent/policy.yaml"}}}`,
			`config F: server "a": key "policy": `},
		{"missing pin file", `{"mcpServers": {"a": {"command": "HELLO", "pin-file": "/nonexistent/mcp-lock.json"}}}`,
			`config F: server "a": key "pin-file": `},
		{"bad pin action", `{"mcpServers": {"a": {"command": "HELLO", "on-pin-violation": "kill"}}}`,
			`config F: server "a": key "on-pin-violation": "kill": want drop or end-session`},
		{"bad child era", `{"mcpServers": {"a": {"command": "HELLO", "child-era": "old"}}}`,
			`config F: server "a": key "child-era": "old": want auto, legacy or modern`},
		{"pool-min above pool-max", `{"mcpServers": {"a": {"command": "HELLO", "pool-min": 5, "pool-max": 2}}}`,
			`config F: server "a": key "pool-min": pool-min 5 is above pool-max 2`},
		{"bad pool-max", `{"mcpServers": {"a": {"command": "HELLO", "pool-max": 0}}}`,
			`config F: server "a": key "pool-max": 0: want 1 or more`},
		{"bad request-state-ttl", `{"mcpServers": {"a": {"command": "HELLO", "request-state-ttl": "0s"}}}`,
			`config F: server "a": key "request-state-ttl": 0s: want a positive duration`},
		{"audit-args without a server's audit log", `{"bridge": {"audit-log": "/dev/null", "audit-args": true}, "mcpServers": {"a": {"command": "HELLO", "audit-log": ""}}}`,
			`config F: server "a": key "audit-log": empty, but audit-args is on`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(strings.ReplaceAll(c.file, "HELLO", helloBin)), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bridgeBin, "--listen", "127.0.0.1:0", "--config", path)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; output:\n%s", err, out)
			}
			want := "bridge: " + strings.Replace(c.want, "config F", "config "+path, 1)
			if !strings.HasPrefix(string(out), want) {
				t.Fatalf("output\n%s\nwant it to start with\n%s", out, want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(dir, "none.json")
		out, _ := exec.Command(bridgeBin, "--config", path).CombinedOutput()
		if want := "bridge: config " + path + ": no such file or directory\n"; !strings.HasPrefix(string(out), want) {
			t.Fatalf("output %q, want %q", out, want)
		}
	})
	t.Run("config and command", func(t *testing.T) {
		path := filepath.Join(dir, "ok.json")
		os.WriteFile(path, []byte(`{"mcpServers": {"a": {"command": "x"}}}`), 0o600)
		out, _ := exec.Command(bridgeBin, "--config", path, "--", helloBin).CombinedOutput()
		if want := "bridge: --config " + path + " and a command after -- exclude each other"; !strings.HasPrefix(string(out), want) {
			t.Fatalf("output %q, want %q", out, want)
		}
	})
}

// configBridge is the bridge binary serving a config file, with its log
// records as they come.
type configBridge struct {
	cmd  *exec.Cmd
	base string // http://host:port
	path string // the config file
	logs chan map[string]any
	done chan struct{}
}

func startConfigBridge(t *testing.T, bin, file string, args ...string) *configBridge {
	t.Helper()
	path := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--config", path}, args...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &configBridge{cmd: cmd, path: path, logs: make(chan map[string]any, 4096), done: make(chan struct{})}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		<-b.done
	})
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				t.Logf("bridge: %s", sc.Text())
				continue
			}
			select {
			case b.logs <- rec:
			default:
			}
		}
		close(b.logs)
	}()
	rec := b.waitLog(t, "bridge listening")
	b.base = rec["url"].(string)
	return b
}

// waitLog waits for a log record with this message and returns it.
func (b *configBridge) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	return b.waitRecord(t, strconv.Quote(msg), func(rec map[string]any) bool { return rec["msg"] == msg })
}

// waitRecord waits for a log record for which match holds, logging the
// errors and warnings it passes on the way.
func (b *configBridge) waitRecord(t *testing.T, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timeout := time.After(120 * time.Second)
	for {
		select {
		case rec, ok := <-b.logs:
			if !ok {
				t.Fatalf("the bridge exited before logging %s", what)
			}
			if match(rec) {
				return rec
			}
			if rec["level"] == "ERROR" || rec["level"] == "WARN" {
				t.Logf("bridge error: %v", rec)
			}
		case <-timeout:
			t.Fatalf("the bridge never logged %s", what)
		}
	}
}

func (b *configBridge) rewrite(t *testing.T, file string) {
	t.Helper()
	if err := os.WriteFile(b.path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// sdkConnect opens a 2025 session (the SDK's default, revision
// 2026-07-28, has none: see TestConfigFileMetricsPerServer for those).
func sdkConnect(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	// The SSE client's stream lives in the context of Connect: it must
	// last as long as the session.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func echo(ctx context.Context, cs *mcp.ClientSession, s string) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": s}})
	if err != nil {
		return err
	}
	if got := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(got, s) {
		return fmt.Errorf("echo %q answered %q", s, got)
	}
	return nil
}

// Several servers from one file, each at /servers/NAME/mcp, over both
// transports; an unknown name gets 404 with a JSON-RPC error.
func TestConfigFileServers(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	b := startConfigBridge(t, bridgeBin, fmt.Sprintf(`{
		"bridge": {"max-sessions": 5},
		"mcpServers": {
			"one": {"command": %q},
			"two": {"command": %q, "args": [], "env": {"HELLO_TEST": "1"}, "request-timeout": "2m", "type": "stdio"},
			"off": {"command": "/nonexistent", "disabled": true}
		}}`, helloBin, helloBin))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	one := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/one/mcp"})
	two := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/two/mcp"})
	legacy := sdkConnect(t, &mcp.SSEClientTransport{Endpoint: b.base + "/servers/two/sse"})
	for i, cs := range []*mcp.ClientSession{one, two, legacy} {
		if err := echo(ctx, cs, fmt.Sprint("hi ", i)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	for _, path := range []string{"/servers/off/mcp", "/servers/three/mcp", "/groups/three/mcp", "/servers/three/sse"} {
		resp, err := http.Post(b.base+path, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code int }
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || body.Error.Code != -32600 {
			t.Errorf("%s: %d, error code %d; want 404 with a JSON-RPC error", path, resp.StatusCode, body.Error.Code)
		}
	}
}

// SIGHUP under load: a server added appears, a removed one drains and then
// refuses with 404, a changed one is replaced, and the unchanged one keeps
// its session and loses no answer.
func TestConfigFileReload(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	entry := fmt.Sprintf(`{"command": %q}`, helloBin)
	changedEntry := fmt.Sprintf(`{"command": %q, "request-timeout": "3m"}`, helloBin)
	b := startConfigBridge(t, bridgeBin, `{"mcpServers": {"keep": `+entry+`, "gone": `+entry+`, "changed": `+entry+`}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	keep := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/keep/mcp"})
	keepSSE := sdkConnect(t, &mcp.SSEClientTransport{Endpoint: b.base + "/servers/keep/sse"})
	progressed := make(chan struct{}, 100)
	goneClient := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	gone, err := goneClient.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/gone/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	changed, err := goneClient.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/changed/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer changed.Close()
	for _, cs := range []*mcp.ClientSession{keep, keepSSE, gone, changed} {
		if err := echo(ctx, cs, "before"); err != nil {
			t.Fatal(err)
		}
	}

	// Load on the unchanged server, over both transports, until the
	// reload is done and some calls came after it.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var calls int
	var errs []error
	stop := make(chan struct{})
	for w, cs := range []*mcp.ClientSession{keep, keep, keepSSE, keepSSE} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := echo(ctx, cs, fmt.Sprintf("w%d-%d", w, i))
				mu.Lock()
				calls++
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	// Calls in flight on the servers about to be removed and replaced
	// finish. They last 5 s (50 steps of 0.1 s), longer than the reload
	// and the checks of the drain below take even on a loaded machine:
	// once they end, a drained server closes and its sessions get 404,
	// not the drain's 503 (seen with 1 s under load).
	inFlight := make(chan error, 2)
	for _, cs := range []*mcp.ClientSession{gone, changed} {
		go func() {
			params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"from": 50}}
			params.SetProgressToken("c")
			res, err := cs.CallTool(ctx, params)
			if err == nil && res.Content[0].(*mcp.TextContent).Text != "liftoff" {
				err = fmt.Errorf("countdown answered %v", res.Content)
			}
			inFlight <- err
		}()
		<-progressed
	}
	b.rewrite(t, `{"mcpServers": {"keep": `+entry+`, "changed": `+changedEntry+`, "added": `+entry+`}}`)
	rec := b.waitLog(t, "configuration reloaded")
	// While they drain, the removed and the replaced servers take no new
	// request in their sessions (which still reach them, not the new
	// server of the same name).
	for _, cs := range []*mcp.ClientSession{gone, changed} {
		if err := echo(ctx, cs, "during the drain"); err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
			t.Errorf("a new request to a draining server: %v, want 503", err)
		}
	}
	for range 2 {
		if err := <-inFlight; err != nil {
			t.Fatalf("a call in flight on a removed or replaced server did not finish: %v", err)
		}
	}
	for k, want := range map[string]string{"added": "[added]", "removed": "[gone]", "changed": "[changed]", "unchanged": "[keep]"} {
		if got := fmt.Sprint(rec[k]); got != want {
			t.Errorf("reload log %s = %s, want %s", k, got, want)
		}
	}
	mu.Lock()
	atReload := calls
	mu.Unlock()
	// Some calls after the reload, then stop the load.
	for n := 0; n < 20; n++ {
		if err := echo(ctx, keep, "after"); err != nil {
			t.Fatalf("the unchanged server's session failed after the reload: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d calls to the unchanged server failed across the reload; first: %v", len(errs), calls, errs[0])
	}
	t.Logf("%d calls to the unchanged server, %d of them before the reload was logged", calls, atReload)

	added := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/added/mcp"})
	if err := echo(ctx, added, "new"); err != nil {
		t.Fatal(err)
	}
	// The removed and the replaced servers drain (nothing in flight: at
	// once); then their old sessions are gone.
	b.waitLog(t, "server drained")
	b.waitLog(t, "server drained")
	if err := echo(ctx, gone, "after"); err == nil {
		t.Fatal("a session of the removed server still answers")
	}
	if err := echo(ctx, changed, "after"); err == nil {
		t.Fatal("a session of the replaced server still answers")
	}
	again := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/changed/mcp"})
	if err := echo(ctx, again, "new"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(b.base+"/servers/gone/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the removed server: %d, want 404", resp.StatusCode)
	}

	// A bad file changes nothing.
	b.rewrite(t, `{"mcpServers": {"keep": {"command": "x", "bogus": true}}}`)
	b.waitLog(t, "configuration not reloaded: still serving the previous one; fix the file and send SIGHUP again")
	if err := echo(ctx, keep, "still"); err != nil {
		t.Fatal(err)
	}
	if err := echo(ctx, added, "still"); err != nil {
		t.Fatal(err)
	}
}

// A config file mixing a local server and a Docker-sandboxed one: each is
// reached at its path, the sandboxed one in a container of its own, which
// the bridge removes when the session ends; a reload that removes it
// drains it and leaves no container.
func TestConfigFileDockerServer(t *testing.T) {
	d := setupDockerE2E(t)
	_, helloBin := buildBinaries(t)
	inst := "e2e-" + dockertest.RandomSuffix()
	gone := d.destroyed(t, inst)
	local := fmt.Sprintf(`"local": {"command": %q}`, helloBin)
	b := startConfigBridge(t, d.bridge, fmt.Sprintf(`{
		"bridge": {"instance": %q, "stop-grace": "2s", "no-aggregate": true},
		"mcpServers": {
			%s,
			"boxed": {"sandbox": "docker", "image": %q, "pull": "never", "sandbox-memory": "128m", "env": {"GREETING": "hi"}}
		}}`, inst, local, d.image))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/local/mcp"})
	bc := sdkConnect(t, &mcp.SSEClientTransport{Endpoint: b.base + "/servers/boxed/sse"})
	for _, cs := range []*mcp.ClientSession{lc, bc} {
		if err := echo(ctx, cs, "sandboxed?"); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.containers(t, inst); n != 1 {
		t.Fatalf("%d containers, want 1 for the one session of the sandboxed server", n)
	}
	b.rewrite(t, `{"bridge": {"instance": "`+inst+`", "stop-grace": "2s"}, "mcpServers": {`+local+`}}`)
	b.waitLog(t, "configuration reloaded")
	waitFor(t, gone, "the container of the removed server's session to be removed")
	if err := echo(ctx, lc, "still here"); err != nil {
		t.Fatal(err)
	}
	if n := d.containers(t, inst); n != 0 {
		t.Fatalf("%d containers left after the sandboxed server was removed", n)
	}
}

// Two bridges serve the same config file with session affinity, behind a
// proxy that sends every retry carrying a requestState to the instance
// that does not hold its parked call: a revision 2026-07-28 client (the
// SDK's default) calls a tool of the everything-server, made legacy by
// its child-era key, that asks for elicitation mid-call (MRTR); each retry
// is verified and forwarded to the owner at the same /servers/NAME/mcp.
func TestConfigFileStatelessAffinity(t *testing.T) {
	bridgeBin, _ := buildBinaries(t)
	everything := childtest.EverythingServer(t)
	t.Setenv("BRIDGE_AFFINITY_SECRET", "a secret shared by both instances, 32+ bytes")
	file := fmt.Sprintf(`{"mcpServers": {"ev": {"command": %q, "child-era": "legacy"}}}`, everything)
	var targets []*url.URL
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		b := startConfigBridge(t, bridgeBin, file, "--listen", addr, "--affinity-addr", addr)
		u, err := url.Parse(b.base)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u)
	}
	var retries atomic.Int64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := targets[0]
			if pr.In.Header.Get("X-Test-Retry") != "" {
				target = targets[1]
			}
			pr.Out.Header.Del("X-Test-Retry")
			pr.SetURL(target)
			pr.Out.URL.Path = pr.In.URL.Path
		},
		FlushInterval: -1,
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"requestState"`)) {
			retries.Add(1)
			r.Header.Set("X-Test-Retry", "1")
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "hopper"}}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: proxy.URL + "/servers/ev/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28", v)
	}
	for i := range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_elicitation", Arguments: map[string]any{"message": "who?"}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(got, "action=accept") || !strings.Contains(got, "hopper") {
			t.Fatalf("call %d answered %q", i, got)
		}
	}
	if n := retries.Load(); n < 3 {
		t.Fatalf("%d retries went through the proxy, want one per call at least", n)
	}
}

// configfile.ServerOptions is a typed part of config: each of its fields
// is the field of config of the same name and type, and its key is the
// flag of that field, with a value of the same type.
func TestServerOptionsAreConfigFields(t *testing.T) {
	var c config
	global := newFlagSet(&c)
	var o configfile.ServerOptions
	server := o.FlagSet()
	typ := reflect.TypeFor[configfile.ServerOptions]()
	n := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		key := f.Tag.Get("key")
		if key == "" {
			continue
		}
		n++
		cf, ok := reflect.TypeFor[config]().FieldByName(f.Name)
		if !ok || cf.Type != f.Type {
			t.Errorf("serverOptions.%s (%s) is not a field of config of that type", f.Name, f.Type)
			continue
		}
		gf, sf := global.Lookup(key), server.Lookup(key)
		if gf == nil || sf == nil {
			t.Errorf("key %s of serverOptions.%s is not a flag", key, f.Name)
			continue
		}
		if g, s := fmt.Sprintf("%T", getValue(gf)), fmt.Sprintf("%T", getValue(sf)); g != s {
			t.Errorf("--%s holds a %s, the key %s", key, g, s)
		}
	}
	if n != len(configfile.ServerKeys) || n < 30 {
		t.Fatalf("%d keys, configfile.ServerKeys %d", n, len(configfile.ServerKeys))
	}
}

func getValue(f *flag.Flag) any {
	if g, ok := f.Value.(flag.Getter); ok {
		return g.Get()
	}
	return f.Value
}

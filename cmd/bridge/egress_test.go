package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	dclient "github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The local sandbox cannot filter what a server sends: asking it to is
// refused in one line that says so, for the flag, its variable and a
// server's allowHosts key.
func TestSandboxEgressRefusedLocally(t *testing.T) {
	const want = "the local sandbox cannot filter egress: a local server has the bridge's own network access; run the server with --sandbox docker, or remove "
	_, err := parseConfig([]string{"--sandbox-egress", "api.github.com", "--", "sh"})
	if err == nil || err.Error() != "--sandbox-egress: "+want+"--sandbox-egress" {
		t.Errorf("--sandbox-egress with --sandbox local: %v", err)
	}
	t.Setenv("BRIDGE_SANDBOX_EGRESS", "api.github.com")
	_, err = parseConfig([]string{"--", "sh"})
	if err == nil || err.Error() != "BRIDGE_SANDBOX_EGRESS: "+want+"BRIDGE_SANDBOX_EGRESS" {
		t.Errorf("BRIDGE_SANDBOX_EGRESS with --sandbox local: %v", err)
	}
	t.Setenv("BRIDGE_SANDBOX_EGRESS", "")

	path := filepath.Join(t.TempDir(), "servers.json")
	os.WriteFile(path, []byte(`{"mcpServers": {"gh": {"command": "sh", "allowHosts": ["api.github.com"]}}}`), 0o600)
	_, err = parseConfig([]string{"--config", path})
	if err == nil || err.Error() != "config "+path+`: server "gh": key "allowHosts": `+want+"allowHosts" {
		t.Errorf("allowHosts of a local server: %v", err)
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, &out, io.Discard); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, s := range []string{"not example.com itself", "the local sandbox cannot filter egress"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help does not say %q", s)
		}
	}
}

// The bridge binary with an allow-list: a session's container sits behind
// the proxy, and after SIGTERM, or after kill -9 and a restart of the same
// instance, no container (server or proxy) and no network is left.
func TestDockerEgressEndToEnd(t *testing.T) {
	t.Parallel()
	d := setupDockerE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	networks := func(inst string) int {
		t.Helper()
		res, err := d.cli.NetworkList(ctx, dclient.NetworkListOptions{Filters: make(dclient.Filters).Add("label", "io.mcp-bridge.instance="+inst)})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Items)
	}
	for _, how := range []string{"SIGTERM", "kill -9 and restart"} {
		inst := "e2e-egress-" + dockertest.RandomSuffix()
		args := []string{"--sandbox", "docker", "--image", d.image, "--pull", "never", "--instance", inst, "--stop-grace", "2s",
			"--sandbox-egress", "api.github.com,*.example.com"}
		p := startBridgeBinary(t, d.bridge, args...)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("connecting through a Docker sandbox with egress: %v", err)
		}
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "count"}); err != nil || res.IsError {
			t.Fatalf("count: %v %v", res, err)
		}
		if c, n := d.containers(t, inst), networks(inst); c != 2 || n != 1 {
			t.Fatalf("%d containers and %d networks for one session, want the server's and the proxy's, and one", c, n)
		}
		if how == "SIGTERM" {
			p.cmd.Process.Signal(syscall.SIGTERM)
			if err := p.cmd.Wait(); err != nil {
				t.Fatalf("bridge exit: %v", err)
			}
		} else {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			p2 := startBridgeBinary(t, d.bridge, args...)
			// The restarted bridge has its own proxy and network.
			if c, n := d.containers(t, inst), networks(inst); c != 1 || n != 1 {
				t.Errorf("after kill -9 and a restart: %d containers and %d networks, want the new proxy's only", c, n)
			}
			p2.cmd.Process.Signal(syscall.SIGTERM)
			p2.cmd.Wait()
		}
		cs.Close()
		if c, n := d.containers(t, inst), networks(inst); c != 0 || n != 0 {
			t.Errorf("%s: %d containers and %d networks left", how, c, n)
		}
	}
}

// A runtime the engine does not list is refused at start, in one line.
func TestSandboxRuntimeRefused(t *testing.T) {
	dockertest.Client(t) // skips without an engine
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"--sandbox", "docker", "--image", "scratch", "--sandbox-runtime", "no-such-runtime"}, io.Discard, &stderr)
	out := stderr.String()
	if code == 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `--sandbox-runtime`) || !strings.Contains(out, `has no runtime "no-such-runtime" (it has `) {
		t.Errorf("exit %d, stderr:\n%s", code, out)
	}
	t.Log(out)
}

// bridge pin records the image digest of a Docker-sandboxed server; once
// the tag names another image, bridge --pin-file starts no container from
// it (the error names both digests) and bridge pin --check reports it.
func TestDockerImagePinned(t *testing.T) {
	t.Parallel()
	d := setupDockerE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tag := "mcp-bridge-e2e-pinned:" + dockertest.RandomSuffix()
	if _, err := d.cli.ImageTag(ctx, dclient.ImageTagOptions{Source: d.image, Target: tag}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cli.ImageRemove(context.Background(), tag, dclient.ImageRemoveOptions{}) })
	pinned, err := d.cli.ImageInspect(ctx, d.image)
	if err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(t.TempDir(), "lock.json")
	args := []string{"--sandbox", "docker", "--image", tag, "--pull", "never"}
	if out, errOut, code := runBinary(t, d.bridge, nil, append([]string{"pin", "--output", lockFile}, args...)...); code != 0 {
		t.Fatalf("bridge pin: exit %d\n%s%s", code, out, errOut)
	}
	var lock struct{ ImageDigest string }
	data, _ := os.ReadFile(lockFile)
	if json.Unmarshal(data, &lock); lock.ImageDigest != pinned.ID {
		t.Fatalf("lock file's imageDigest %q, want %s", lock.ImageDigest, pinned.ID)
	}

	// The tag moves to another image.
	other := dockertest.BuildImage(t, d.cli, "mcp-bridge-e2e-other", "FROM "+d.image+"\nLABEL changed=yes\n")
	if _, err := d.cli.ImageTag(ctx, dclient.ImageTagOptions{Source: other, Target: tag}); err != nil {
		t.Fatal(err)
	}
	moved, err := d.cli.ImageInspect(ctx, tag)
	if err != nil || moved.ID == pinned.ID {
		t.Fatalf("retagging: %v (%s)", err, moved.ID)
	}
	out, _, code := runBinary(t, d.bridge, nil, append([]string{"pin", "--check", "--pin-file", lockFile}, args...)...)
	if want := fmt.Sprintf("image %q changed: digest %s, pinned %s\n", tag, moved.ID, pinned.ID); code != 1 || !strings.Contains(out, want) {
		t.Errorf("bridge pin --check: exit %d, stdout %q; want 1 and %q", code, out, want)
	}

	inst := "e2e-pinned-" + dockertest.RandomSuffix()
	p := startBridgeBinary(t, d.bridge, append(args, "--pin-file", lockFile, "--instance", inst)...)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	if cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}); err == nil {
		cs.Close()
		t.Fatal("a session started from an image of another digest")
	}
	if n := d.containers(t, inst); n != 0 {
		t.Errorf("%d containers of a refused image", n)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	want := fmt.Sprintf("image %s has digest %s, not the pinned %s", tag, moved.ID, pinned.ID)
	if lines := <-p.done; !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) }) {
		t.Errorf("the bridge's log does not say %q:\n%s", want, strings.Join(lines, "\n"))
	}
}

// runUserEnvServer is an MCP server whose tool "token" answers its
// GITHUB_TOKEN and whether it has one.
func runUserEnvServer() {
	server := mcp.NewServer(&mcp.Implementation{Name: "userenv", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "token"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		v, ok := os.LookupEnv("GITHUB_TOKEN")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%v:%s", ok, v)}}}, nil, nil
	})
	server.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

// Per-user credentials: two users with different
// static tokens each get their own value of GITHUB_TOKEN in their own
// child; a user without one gets a JSON-RPC error at initialize; a file
// others could read is refused; no value appears in the bridge's log or
// audit file.
func TestUserEnvEndToEnd(t *testing.T) {
	t.Parallel()
	bin, _ := buildBinaries(t)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	tokens := []string{"token-alice-" + dockertest.RandomSuffix(), "token-bob-" + dockertest.RandomSuffix(), "token-carol-" + dockertest.RandomSuffix(), "token-dave-" + dockertest.RandomSuffix()}
	values := []string{"alice-value-" + dockertest.RandomSuffix(), "bob-value-" + dockertest.RandomSuffix(), "", "dave-value-" + dockertest.RandomSuffix()}
	for i, tok := range tokens {
		if values[i] == "" {
			continue // carol has none
		}
		sum := sha256.Sum256([]byte(tok))
		pd := filepath.Join(secrets, "static-"+hex.EncodeToString(sum[:8]))
		os.MkdirAll(pd, 0o700)
		mode := os.FileMode(0o600)
		if i == 3 {
			mode = 0o644 // dave's is readable by others: refused
		}
		if err := os.WriteFile(filepath.Join(pd, "github"), []byte(values[i]+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(pd, "github"), mode)
	}
	auditFile := filepath.Join(dir, "audit.jsonl")
	tokenFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")+"\n"), 0o600)
	p := startBridgeBinary(t, bin, "--log-level", "debug", "--user-env", "GITHUB_TOKEN=github", "--secrets-dir", secrets,
		"--auth-token-file", tokenFile, "--audit-log", auditFile, "--env", e2eChildEnv+"=userenv", "--", os.Args[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(i int, version string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: bearer{tokens[i]}}
		client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	}
	token := func(cs *mcp.ClientSession) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "token"})
		if err != nil || res.IsError {
			t.Fatalf("token: %v %v", res, err)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	for i := range 2 {
		cs, err := connect(i, "2025-11-25")
		if err != nil {
			t.Fatalf("user %d: %v", i, err)
		}
		if got := token(cs); got != "true:"+values[i] {
			t.Errorf("user %d's child has GITHUB_TOKEN %q, want their own", i, got)
		}
		cs.Close()
	}
	// The SDK's client keeps the body of a 502 to itself: POST.
	post := func(i int, body string, headers map[string]string) (int, string, int, string) {
		req, _ := http.NewRequest("POST", p.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tokens[i])
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var msg struct {
			ID    int
			Error struct {
				Code    int
				Message string
			}
		}
		json.Unmarshal(b, &msg)
		return resp.StatusCode, string(b), msg.Error.Code, msg.Error.Message
	}
	const noValue = `the server needs GITHUB_TOKEN, and no credential "github" is set up for you (principal static-`
	for i := 2; i < 4; i++ {
		status, body, code, msg := post(i, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`, nil)
		if status != http.StatusBadGateway || code != -32000 || !strings.Contains(msg, noValue) {
			t.Errorf("user %d without a usable value, initialize: %d %s; want 502 and a JSON-RPC error saying %q", i, status, body, noValue)
		}
	}
	// Revision 2026-07-28: the pool runs this server's children as legacy
	// ones, keyed by principal, each with its principal's values; a
	// principal without one gets an error at its first call.
	for i := range 2 {
		cs, err := connect(i, "")
		if err != nil {
			t.Fatalf("user %d, 2026-07-28: %v", i, err)
		}
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Errorf("user %d negotiated %s, want 2026-07-28", i, v)
		}
		if got := token(cs); got != "true:"+values[i] {
			t.Errorf("user %d's 2026-07-28 child has GITHUB_TOKEN %q, want their own", i, got)
		}
		cs.Close()
	}
	status, body, code, msg := post(2, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"token","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "token"})
	if status != http.StatusBadGateway || code == 0 || !strings.Contains(msg, noValue) {
		t.Errorf("user 2's first 2026-07-28 call: %d %s; want 502 and a JSON-RPC error saying %q", status, body, noValue)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	logs := strings.Join(<-p.done, "\n")
	audited, _ := os.ReadFile(auditFile)
	if !strings.Contains(logs, "mode 0644: refused") {
		t.Errorf("the log does not say why dave's file was refused:\n%s", logs)
	}
	for _, v := range values {
		if v != "" && (strings.Contains(logs, v) || strings.Contains(string(audited), v)) {
			t.Errorf("a secret value is in the bridge's log or audit file")
		}
	}
}

// The bridge binary with an allow-list, end to end: a server in a
// container fetches an allowed address and another port of it (twice);
// the audit file, /metrics and the log say exactly that.
func TestDockerEgressAudited(t *testing.T) {
	t.Parallel()
	d := setupDockerE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exe := dockertest.StaticBinary(t, "../../internal/testserver/fetchserver")
	image := dockertest.BuildImage(t, d.cli, "mcp-bridge-e2e-fetch", "FROM scratch\nCOPY fetchserver /fetchserver\nENTRYPOINT [\"/fetchserver\"]\n",
		dockertest.File{Name: "fetchserver", Mode: 0o755, Data: exe})
	gw := dockerBridgeHost(t, d.cli)
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })}
	go srv.Serve(ln)
	defer srv.Close()
	allowed := ln.Addr().String()
	_, port, _ := net.SplitHostPort(allowed)
	refused := net.JoinHostPort(gw, "1")
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	p := startBridgeBinary(t, d.bridge, "--sandbox", "docker", "--image", image, "--pull", "never", "--instance", "e2e-audit-"+dockertest.RandomSuffix(),
		"--sandbox-egress", allowed, "--audit-log", auditFile)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(addr string) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": "http://" + addr + "/"}})
		if err != nil || res.IsError {
			t.Fatalf("fetch %s: %v %v", addr, res, err)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := fetch(allowed); got != "200 hello" {
		t.Errorf("fetch %s = %q", allowed, got)
	}
	for range 2 {
		if got, want := fetch(refused), "403 egress refused: "+refused+" is not in this server's allow-list"; got != want {
			t.Errorf("fetch %s = %q, want %q", refused, got, want)
		}
	}
	cs.Close()
	// The proxy reports each connection to the bridge over its stdout once
	// it has answered it (an allowed one once it closed), so a fetch's
	// answer can come before the bridge counted it; nothing announces the
	// count to this test: look until the audit log, written after the
	// metric, holds the three connections.
	deadline := time.Now().Add(60 * time.Second)
	for egressAuditLines(auditFile) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the audit log holds %d egress lines after 60 s, want 3", egressAuditLines(auditFile))
		}
		runtime.Gosched()
	}
	resp, err := http.Get(strings.TrimSuffix(p.url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "mcp_bridge_egress_connections_total") {
			got = append(got, l)
		}
		if strings.HasPrefix(l, "mcp_bridge_egress_bytes_total") && strings.HasSuffix(l, " 0") {
			t.Errorf("no bytes counted: %s", l)
		}
	}
	if want := []string{`mcp_bridge_egress_connections_total{outcome="allowed",server="default"} 1`, `mcp_bridge_egress_connections_total{outcome="refused",server="default"} 2`}; !slices.Equal(got, want) {
		t.Errorf("metrics %q, want %q", got, want)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	lines := <-p.done
	var warns []string
	for _, l := range lines {
		if strings.Contains(l, `"msg":"egress refused"`) {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], `"allow_with":"--sandbox-egress `+refused+`"`) {
		t.Errorf("egress refused logged %d times, want once naming --sandbox-egress %s: %q", len(warns), refused, warns)
	}
	data, _ := os.ReadFile(auditFile)
	var egressLines []string
	session := ""
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["event"] != "egress" {
			continue
		}
		if s, _ := m["session"].(string); s == "" || session != "" && s != session {
			t.Errorf("audit line of session %q, want one session: %s", m["session"], l)
		} else {
			session = s
		}
		if m["outcome"] == "allowed" && (m["bytes_up"] == 0.0 || m["bytes_down"] == 0.0) {
			t.Errorf("allowed connection without bytes: %s", l)
		}
		for _, k := range []string{"time", "session", "duration_ms", "bytes_up", "bytes_down"} {
			delete(m, k)
		}
		b, _ := json.Marshal(m)
		egressLines = append(egressLines, string(b))
	}
	want := []string{
		fmt.Sprintf(`{"event":"egress","host":"%s","ip":"%s","outcome":"allowed","port":%s}`, gw, gw, port),
		fmt.Sprintf(`{"event":"egress","host":"%s","outcome":"refused","port":1,"reason":"not in the allow-list"}`, gw),
		fmt.Sprintf(`{"event":"egress","host":"%s","outcome":"refused","port":1,"reason":"not in the allow-list"}`, gw),
	}
	if !slices.Equal(egressLines, want) {
		t.Errorf("audit lines:\n%s\nwant:\n%s", strings.Join(egressLines, "\n"), strings.Join(want, "\n"))
	}
}

// dockerBridgeHost is this host's address on Docker's default bridge.
func dockerBridgeHost(t *testing.T, cli *dclient.Client) string {
	t.Helper()
	res, err := cli.NetworkInspect(context.Background(), "bridge", dclient.NetworkInspectOptions{})
	if err != nil || len(res.Network.IPAM.Config) == 0 {
		t.Fatalf("inspecting the default bridge: %v", err)
	}
	c := res.Network.IPAM.Config[0]
	if c.Gateway.IsValid() {
		return c.Gateway.String()
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && c.Subnet.Contains(ip.Unmap()) {
				return ip.Unmap().String()
			}
		}
	}
	t.Skipf("no address of this host in the default bridge's subnet %s: the engine is remote", c.Subnet)
	return ""
}

func TestUserEnvConfig(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("t1\n"), 0o600)
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--user-env", "GITHUB_TOKEN=github", "--", "sh"}, ""},
		{[]string{"--user-env", "GITHUB_TOKEN", "--", "sh"}, `--user-env "GITHUB_TOKEN": want NAME=SECRET`},
		{[]string{"--user-env", "GITHUB_TOKEN=../x", "--", "sh"}, "want NAME=SECRET"},
		{[]string{"--user-env", "BRIDGE_X=github", "--", "sh"}, "never passed to a server"},
		{[]string{"--user-env", "GITHUB_TOKEN=github", "--warm", "1", "--", "sh"}, "--user-env and --warm exclude each other"},
		{[]string{"--user-env", "GITHUB_TOKEN=github", "--secrets-dir", "/nonexistent", "--", "sh"}, "--secrets-dir /nonexistent: not a directory"},
		{[]string{"--user-env", "GITHUB_TOKEN=github", "--auth-token-file", tokens, "--child-era", "modern", "--", "sh"}, "needs --child-era legacy"},
	} {
		_, err := parseConfig(tc.args)
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.err)
		}
	}
	c, err := parseConfig([]string{"--user-env", "GITHUB_TOKEN=github", "--auth-token-file", tokens, "--", "sh"})
	if err != nil || c.ChildEra.String() != "legacy" {
		t.Errorf("with authentication, the 2026-07-28 pool's era is %q (%v), want legacy", c.ChildEra, err)
	}
	path := filepath.Join(t.TempDir(), "servers.json")
	os.WriteFile(path, []byte(`{"mcpServers": {"gh": {"command": "sh", "userEnv": {"GITHUB_TOKEN": "github", "X": "a/b"}}}}`), 0o600)
	if _, err := parseConfig([]string{"--config", path}); err == nil || !strings.Contains(err.Error(), `key "userEnv": "X=a/b": want NAME=SECRET`) {
		t.Errorf("a bad userEnv: %v", err)
	}
}

// egressAuditLines counts the egress lines of an audit log file.
func egressAuditLines(path string) int {
	data, _ := os.ReadFile(path)
	return bytes.Count(data, []byte(`"event":"egress"`))
}

package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	sdkjsonrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
	"github.com/mcp-bridge/mcp-bridge/policy"
)

// TestOAuthFlagsAndSecretsStayOut runs the binary as a resource server of
// a real authorization server, configured by flags and BRIDGE_* variables:
// a request without a token is told where the metadata is, a token of the
// issuer for --resource-url is served, and the server the bridge starts
// sees none of the bridge's secrets in its environment.
func TestOAuthFlagsAndSecretsStayOut(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	const resource = "http://localhost/mcp"
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}, Scopes: []string{"mcp:tools"}})
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "client-secret")
	os.WriteFile(secretFile, []byte(oauthtest.ResourceSecret+"\n"), 0o600)
	t.Setenv("BRIDGE_AUTH_TOKENS", "static-secret-token")
	t.Setenv("BRIDGE_OAUTH_SCOPES", "mcp:tools")
	t.Setenv("BRIDGE_OAUTH_CLIENT_SECRET", "secret-from-the-environment")
	envFile := filepath.Join(dir, "env")
	p := startBridgeBinary(t, bridgeBin, "--oauth-issuer", as.URL, "--resource-url", resource,
		"--oauth-introspection-url", as.URL+"/introspect", "--oauth-client-id", oauthtest.ResourceClient,
		"--oauth-client-secret-file", secretFile,
		"--", "/bin/sh", "-c", `env > "$0"; exec "$1"`, envFile, helloBin)

	post := func(tok string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, p.url, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := post("")
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(got, `resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp"`) ||
		!strings.Contains(got, `scope="mcp:tools"`) {
		t.Fatalf("no token: %d %q", resp.StatusCode, got)
	}
	tok := as.ClientCredentials(t, resource, "mcp:tools")
	resp = post(tok)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a token of the issuer: %d", resp.StatusCode)
	}
	readBody(t, resp)
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatalf("the server's environment: %v", err)
	}
	for _, secret := range []string{"static-secret-token", "secret-from-the-environment", oauthtest.ResourceSecret, tok} {
		if strings.Contains(string(env), secret) {
			t.Errorf("the MCP server's environment holds the secret %q", secret)
		}
	}
	resp = post("static-secret-token")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a static token beside OAuth: %d", resp.StatusCode)
	}
	readBody(t, resp)
}

func readBody(t *testing.T, resp *http.Response) {
	t.Helper()
	buf := make([]byte, 4096)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			return
		}
	}
}

// The resource server's option errors name the flags.
func TestOAuthErrorsNameFlags(t *testing.T) {
	for opts, flag := range map[*auth.Options]string{
		{Issuer: "http://auth.example.com", ResourceURL: "https://mcp.example.com/mcp"}: "--oauth-issuer: ",
		{Issuer: "https://auth.example.com"}:                                            "--resource-url: ",
	} {
		_, err := auth.New(t.Context(), opts)
		if err == nil || !strings.HasPrefix(explain(err).Error(), flag) {
			t.Errorf("%+v: %v, want it to start with %q", opts, explain(err), flag)
		}
	}
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// A tool that the policy gates behind a scope is listed and callable by a
// client whose token grants the scope, and hidden and refused, naming the
// scope, for one whose token does not: the interception point sees each
// caller's scopes, in a 2025 session (its latest POST's principal) and on
// the stateless pool's children (the principal of each request, which the
// children of one subject share whatever their tokens' scopes).
func TestPolicyScopesOfOAuthCallers(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	const resource = "http://localhost/mcp"
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}, Scopes: []string{"mcp:tools", "mail:send"}})
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  scopes:\n    echo: [mail:send]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--oauth-issuer", as.URL, "--resource-url", resource, "--policy", policyFile}
	p := startBridgeBinary(t, bridgeBin, append(args, "--", helloBin)...)
	// The pool's children of a legacy server are per principal (its tag:
	// the subject and client, whatever the token's scopes).
	legacy := startBridgeBinary(t, bridgeBin, append(args, "--child-era", "legacy", "--", helloBin)...)
	for _, c := range []struct{ name, url, version string }{
		{"session", p.url, "2025-11-25"}, // a session: its principal carries the scopes
		{"stateless", p.url, ""},         // the SDK's default: revision 2026-07-28, served by the pool
		{"stateless-legacy", legacy.url, ""},
	} {
		t.Run(c.name, func(t *testing.T) { policyScopes(t, as, c.url, resource, c.version) })
	}
}

func policyScopes(t *testing.T, as *oauthtest.Server, url, resource, version string) {
	connect := func(scopes ...string) *mcp.ClientSession {
		t.Helper()
		tok := as.Sign(t, as.Claims("alice", resource, scopes...))
		client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		var opts *mcp.ClientSessionOptions
		if version != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
		}
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{tok}},
		}, opts)
		if err != nil {
			t.Fatalf("connecting with scopes %v: %v", scopes, err)
		}
		t.Cleanup(func() { cs.Close() })
		if got := cs.InitializeResult().ProtocolVersion; version == "" && got != "2026-07-28" {
			t.Fatalf("the SDK's default client negotiated %s, want 2026-07-28", got)
		}
		return cs
	}
	listsEcho := func(cs *mcp.ClientSession) bool {
		t.Helper()
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "echo" })
	}
	call := func(cs *mcp.ClientSession) error {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
		return err
	}

	with := connect("mcp:tools", "mail:send")
	if !listsEcho(with) {
		t.Error("a token with mail:send does not see echo")
	}
	if err := call(with); err != nil {
		t.Errorf("a token with mail:send calling echo: %v", err)
	}
	without := connect("mcp:tools")
	if listsEcho(without) {
		t.Error("a token without mail:send sees echo")
	}
	err := call(without)
	if err == nil || !strings.Contains(err.Error(), "mail:send") {
		t.Fatalf("a token without mail:send calling echo: %v, want an error naming the scope", err)
	}
	// The refusal is an error of this call, not of the connection:
	// the Go SDK reads -32003 and -32004 as its own "client/server is
	// closing", and an agent that reconnects on ErrConnectionClosed would
	// loop. The code is policy.CodeInsufficientScope and the data names
	// the missing scopes; the connection serves the next request.
	if errors.Is(err, mcp.ErrConnectionClosed) {
		t.Errorf("the insufficient-scope refusal is a closing error to the Go SDK: %v", err)
	}
	var wire *sdkjsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != policy.CodeInsufficientScope {
		t.Errorf("the refusal %v is not a JSON-RPC error with code %d", err, policy.CodeInsufficientScope)
	} else {
		var data struct{ MissingScopes []string }
		if json.Unmarshal(wire.Data, &data) != nil || !slices.Equal(data.MissingScopes, []string{"mail:send"}) {
			t.Errorf("the refusal's data %s does not list missingScopes [mail:send]", wire.Data)
		}
	}
	if listsEcho(without) {
		t.Error("after the refusal, a token without mail:send sees echo")
	}
}

// A --resource-url whose path is not the endpoint's is warned about at
// start, naming both (it was accepted silently, and clients,
// which compare the resource with the URL they use, then fail their
// authorization). A warning, not a refusal: behind a reverse proxy that
// rewrites paths the public path differs from the bridge's own.
func TestResourceURLPathWarned(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{"http://localhost/tools/mcp"}})
	for _, c := range []struct {
		resource string
		warned   bool
	}{
		{"http://localhost/tools/mcp", true},
		{"http://localhost/mcp", false},
	} {
		p := startBridgeBinary(t, bridgeBin, "--oauth-issuer", as.URL, "--resource-url", c.resource, "--", helloBin)
		p.cmd.Process.Signal(syscall.SIGTERM)
		lines := <-p.done
		warned := false
		for _, l := range lines {
			if strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "--resource-url") && strings.Contains(l, "/tools/mcp") && strings.Contains(l, `/mcp`) {
				warned = true
			}
		}
		if warned != c.warned {
			t.Errorf("--resource-url %s: warned %v, want %v:\n%s", c.resource, warned, c.warned, strings.Join(lines, "\n"))
		}
	}
}

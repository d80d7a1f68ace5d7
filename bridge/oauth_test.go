package bridge_test

// The bridge as an OAuth 2.1 resource server, in front of a real
// authorization server (ory/fosite, internal/oauthtest) and with the Go
// SDK's OAuth client.

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

type oauthBridge struct {
	URL  string // the MCP endpoint, also the resource URL
	Base string
	AS   *oauthtest.Server
	Auth *auth.Authenticator
	Reg  *session.Registry
}

type oauthConfig struct {
	required []string // scopes every OAuth token must carry
	static   []string // static tokens accepted besides
	opaque   bool     // opaque tokens, introspected
	// keyRefresh is the least time between JWKS fetches for unknown keys;
	// zero means the default.
	keyRefresh time.Duration
}

// startOAuthBridge starts a bridge whose resource URL is its own endpoint,
// with an authorization server issuing tokens for it.
func startOAuthBridge(t *testing.T, cfg oauthConfig) *oauthBridge {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	ob := &oauthBridge{URL: base + bridge.DefaultPath, Base: base}
	ob.AS = oauthtest.New(t, oauthtest.Options{Audience: []string{ob.URL}, Scopes: []string{"mcp:tools", "mcp:admin"}, Opaque: cfg.opaque})
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	ao := &auth.Options{Issuer: ob.AS.URL, ResourceURL: ob.URL, Scopes: cfg.required, StaticTokens: cfg.static,
		KeyRefreshMinInterval: cfg.keyRefresh, Logger: logger}
	if cfg.opaque {
		ao.IntrospectionURL = ob.AS.URL + "/introspect"
		ao.ClientID, ao.ClientSecret = oauthtest.ResourceClient, oauthtest.ResourceSecret
	}
	ob.Auth, err = auth.New(context.Background(), ao)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	local := sandbox.NewLocal(&sandbox.LocalOptions{
		Command: exe, Env: append(os.Environ(), childEnv+"=server"), StopGrace: 2 * time.Second, Logger: logger,
	})
	reg := session.NewRegistry(&session.Options{Launcher: session.LauncherOf(local), Logger: logger})
	ob.Reg = reg
	h := bridge.NewHandler(reg, &bridge.Options{Auth: ob.Auth, Logger: logger})
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the registry: %v", err)
		}
		local.Close()
		srv.CloseClientConnections()
		srv.Close()
	})
	return ob
}

// TestOAuthSDKClient: the Go SDK's OAuth client finds the authorization
// server from the bridge's 401 and its protected resource metadata, runs
// the authorization code flow with PKCE and a resource indicator, and calls
// tools with the token it got.
func TestOAuthSDKClient(t *testing.T) {
	ob := startOAuthBridge(t, oauthConfig{required: []string{"mcp:tools"}})
	var fetched []string
	handler, err := sdkauth.NewAuthorizationCodeHandler(&sdkauth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: oauthtest.PublicClient},
		RedirectURL:         oauthtest.RedirectURL,
		AuthorizationCodeFetcher: func(ctx context.Context, args *sdkauth.AuthorizationArgs) (*sdkauth.AuthorizationResult, error) {
			fetched = append(fetched, args.URL)
			code, state, err := oauthtest.FetchCode(ctx, args.URL)
			return &sdkauth.AuthorizationResult{Code: code, State: state}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-client", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: ob.URL, OAuthHandler: handler}, nil)
	if err != nil {
		t.Fatalf("connecting with OAuth: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "hi" {
		t.Fatalf("echo: %v %+v", err, res)
	}
	if len(fetched) != 1 || !strings.Contains(fetched[0], "scope=mcp%3Atools") || !strings.Contains(fetched[0], "resource=") {
		t.Errorf("authorization URLs %q: want one, asking for the scope and the resource", fetched)
	}
}

// TestOAuthKeyRotation: the issuer rotates its signing key while a client
// holds a session. A token signed with the new key is accepted without
// restarting the bridge; the client's token, signed with the withdrawn key,
// is then refused, and the SDK client authorizes again and carries on in the
// same session: it is bound to the user and client, not to the token.
func TestOAuthKeyRotation(t *testing.T) {
	ob := startOAuthBridge(t, oauthConfig{keyRefresh: time.Nanosecond})
	authorizations := 0
	handler, err := sdkauth.NewAuthorizationCodeHandler(&sdkauth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: oauthtest.PublicClient},
		RedirectURL:         oauthtest.RedirectURL,
		AuthorizationCodeFetcher: func(ctx context.Context, args *sdkauth.AuthorizationArgs) (*sdkauth.AuthorizationResult, error) {
			authorizations++
			code, state, err := oauthtest.FetchCode(ctx, args.URL)
			return &sdkauth.AuthorizationResult{Code: code, State: state}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-client", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: ob.URL, OAuthHandler: handler}, nil)
	if err != nil {
		t.Fatalf("connecting with OAuth: %v", err)
	}
	defer cs.Close()
	first := callCount(t, cs)

	ob.AS.Rotate()
	fresh := ob.AS.ClientCredentials(t, ob.URL)
	resp := rawPost(t, ob.URL, initBody("2025-11-25"), bearer(fresh, "MCP-Protocol-Version", ""))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a token signed with the new key: %d %s", resp.StatusCode, readAll(t, resp.Body))
	}
	readAll(t, resp.Body)

	if n := callCount(t, cs); n != first+1 {
		t.Fatalf("count after the rotation: %d, want %d (the same session)", n, first+1)
	}
	if authorizations != 2 {
		t.Errorf("%d authorizations, want 2: the client's first token should have been refused after the rotation", authorizations)
	}
}

func bearer(tok string, more ...string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + tok}
	for i := 0; i+1 < len(more); i += 2 {
		h[more[i]] = more[i+1]
	}
	return h
}

// TestOAuthSessionBinding: a session is bound to the principal (issuer,
// subject, client), not to the token string, which changes on refresh.
func TestOAuthSessionBinding(t *testing.T) {
	ob := startOAuthBridge(t, oauthConfig{static: []string{"static-token"}})
	alice := ob.AS.AuthorizationCode(t, "alice", ob.URL, "mcp:tools")
	resp := rawPost(t, ob.URL, initBody("2025-11-25"), bearer(alice.AccessToken, "MCP-Protocol-Version", ""))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize with alice's token: %d %s", resp.StatusCode, readAll(t, resp.Body))
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	readAll(t, resp.Body)
	hdr := func(tok string) map[string]string {
		return bearer(tok, "Mcp-Session-Id", sid, "MCP-Protocol-Version", "2025-11-25")
	}
	resp = rawPost(t, ob.URL, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr(alice.AccessToken))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", resp.StatusCode)
	}

	refreshed := ob.AS.Refresh(t, alice)
	if refreshed.AccessToken == alice.AccessToken {
		t.Fatal("the refreshed token is the same string")
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	resp = rawPost(t, ob.URL, list, hdr(refreshed.AccessToken))
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"echo"`) {
		t.Fatalf("alice's refreshed token on her session: %d %s", resp.StatusCode, body)
	}

	bob := ob.AS.AuthorizationCode(t, "bob", ob.URL, "mcp:tools")
	resp = rawPost(t, ob.URL, list, hdr(bob.AccessToken))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's token on alice's session: %d, want 403", resp.StatusCode)
	}
	resp = rawPost(t, ob.URL, list, hdr("static-token"))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a static token on alice's session: %d, want 403", resp.StatusCode)
	}
	// Static tokens keep working beside OAuth.
	resp = rawPost(t, ob.URL, initBody("2025-11-25"), bearer("static-token", "MCP-Protocol-Version", ""))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize with a static token: %d", resp.StatusCode)
	}
}

// TestOAuthChallenges: what a client without a valid token, or without the
// scope, is told, and the protected resource metadata it is pointed to.
func TestOAuthChallenges(t *testing.T) {
	ob := startOAuthBridge(t, oauthConfig{required: []string{"mcp:tools"}})
	metaURL := ob.Base + "/.well-known/oauth-protected-resource/mcp"
	resp := rawPost(t, ob.URL, initBody("2025-11-25"), nil)
	want := `Bearer resource_metadata="` + metaURL + `", scope="mcp:tools"`
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || got != want {
		t.Fatalf("no token: %d %q, want 401 %q", resp.StatusCode, got, want)
	}
	if e := decodeError(t, readAll(t, resp.Body)); e.Error.Code != jsonrpc.CodeInvalidRequest {
		t.Errorf("no token: JSON-RPC error %+v", e)
	}
	wrongAud := ob.AS.Sign(t, ob.AS.Claims("alice", "https://other.example.com/mcp", "mcp:tools"))
	resp = rawPost(t, ob.URL, initBody("2025-11-25"), bearer(wrongAud))
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(got, `error="invalid_token"`) {
		t.Fatalf("a token for another resource: %d %q", resp.StatusCode, got)
	}
	noScope := ob.AS.AuthorizationCode(t, "alice", ob.URL, "mcp:admin")
	resp = rawPost(t, ob.URL, initBody("2025-11-25"), bearer(noScope.AccessToken))
	got := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(got, `error="insufficient_scope"`) || !strings.Contains(got, `scope="mcp:tools"`) {
		t.Fatalf("a token without the scope: %d %q, want 403 insufficient_scope", resp.StatusCode, got)
	}

	for _, u := range []string{metaURL, ob.Base + "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var meta oauthex.ProtectedResourceMetadata
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || meta.Resource != ob.URL ||
			len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != ob.AS.URL ||
			strings.Join(meta.ScopesSupported, " ") != "mcp:tools" {
			t.Errorf("GET %s: %d %+v %v", u, resp.StatusCode, meta, err)
		}
	}
}

// TestOAuthIntrospection: opaque tokens are checked at the issuer's
// introspection endpoint; while it cannot be reached, clients get 503 (their
// token may be fine), and no session is created.
func TestOAuthIntrospection(t *testing.T) {
	ob := startOAuthBridge(t, oauthConfig{opaque: true})
	tok := ob.AS.AuthorizationCode(t, "alice", ob.URL, "mcp:tools")
	if strings.Count(tok.AccessToken, ".") == 2 {
		t.Fatal("the issuer issued a JWT, want an opaque token")
	}
	resp := rawPost(t, ob.URL, initBody("2025-11-25"), bearer(tok.AccessToken, "MCP-Protocol-Version", ""))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize with an opaque token: %d %s", resp.StatusCode, readAll(t, resp.Body))
	}
	readAll(t, resp.Body)
	if n := ob.AS.Introspections.Load(); n != 1 {
		t.Errorf("%d introspections, want 1", n)
	}
	resp = rawPost(t, ob.URL, initBody("2025-11-25"), bearer("not-a-token-of-the-issuer", "MCP-Protocol-Version", ""))
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(got, `error="invalid_token"`) {
		t.Fatalf("an unknown opaque token: %d %q", resp.StatusCode, got)
	}
	ob.AS.Close()
	resp = rawPost(t, ob.URL, initBody("2025-11-25"), bearer(tok.AccessToken, "MCP-Protocol-Version", ""))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("the issuer unreachable: %d %q, want 503 without a challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if e := decodeError(t, readAll(t, resp.Body)); e.Error.Code != jsonrpc.CodeInternalError {
		t.Errorf("the issuer unreachable: JSON-RPC error %+v", e)
	}
	if n := ob.Reg.Len(); n != 1 {
		t.Errorf("%d sessions, want only the one of the valid token", n)
	}
}

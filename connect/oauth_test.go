package connect_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// oauthRS is a bridge as an OAuth resource server, with its authorization
// server (ory/fosite).
type oauthRS struct {
	url string
	as  *oauthtest.Server
	// refused counts the bridge's 401 and 403 answers.
	refused atomic.Int64
}

func startOAuthRS(t *testing.T, required ...string) *oauthRS {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	rs := &oauthRS{url: "http://" + srv.Listener.Addr().String() + bridge.DefaultPath}
	rs.as = oauthtest.New(t, oauthtest.Options{Audience: []string{rs.url}, Scopes: []string{"mcp:tools", "mcp:admin"}})
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := auth.New(context.Background(), &auth.Options{Issuer: rs.as.URL, ResourceURL: rs.url, Scopes: required,
		KeyRefreshMinInterval: time.Nanosecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), childEnv+"=1"), StopGrace: 2 * time.Second, Logger: logger})
	reg := session.NewRegistry(&session.Options{Launcher: session.LauncherOf(local), Logger: logger})
	h := bridge.NewHandler(reg, &bridge.Options{Auth: a, Logger: logger})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusUnauthorized || rec.status == http.StatusForbidden {
			rs.refused.Add(1)
		}
	})
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
	return rs
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// browser plays the user's browser: it follows the authorization URL
// (the user consents), then the redirect to bridge connect's loopback
// listener, with extra added to its query.
func browser(extra url.Values) func(context.Context, string) error {
	return func(ctx context.Context, authURL string) error {
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || resp.StatusCode/100 != 3 {
			return fmt.Errorf("authorization: %s, Location %q", resp.Status, resp.Header.Get("Location"))
		}
		q := loc.Query()
		for k, v := range extra {
			q[k] = v
		}
		loc.RawQuery = q.Encode()
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
}

// oauthRun is one bridge connect in-process, with the Go SDK's client on
// its stdio.
type oauthRun struct {
	cs     *mcp.ClientSession
	prompt *testlog.Buffer
	logs   *testlog.Buffer
	done   chan error
}

func startOAuthRun(t *testing.T, remote string, o connect.OAuthOptions) (*oauthRun, error) {
	t.Helper()
	r := &oauthRun{prompt: &testlog.Buffer{}, logs: &testlog.Buffer{}, done: make(chan error, 1)}
	if o.Prompt == nil {
		o.Prompt = r.prompt
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	go func() {
		err := connect.Run(ctx, inR, outW, &connect.Options{URL: remote, Transport: connect.TransportStreamable, OAuth: &o,
			Logger: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		outW.CloseWithError(io.EOF)
		inR.Close()
		r.done <- err
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "connect-oauth-test", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		inW.Close()
		return r, fmt.Errorf("%v (bridge connect: %v)", err, <-r.done)
	}
	r.cs = cs
	return r, nil
}

// close ends the session and returns what Run returned.
func (r *oauthRun) close() error {
	if r.cs != nil {
		r.cs.Close()
	}
	return <-r.done
}

// startEcho starts a bridge connect, calls echo through it and ends it:
// one start of a client that works.
func startEcho(t *testing.T, remote string, o connect.OAuthOptions) *oauthRun {
	t.Helper()
	r, err := startOAuthRun(t, remote, o)
	if err != nil {
		t.Fatal(err)
	}
	r.echo(t)
	r.close()
	return r
}

func (r *oauthRun) echo(t *testing.T) {
	t.Helper()
	res, err := r.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: textArgs{"hi"}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call echo: %v %+v; log:\n%s", err, res, r.logs)
	}
}

// storedTokens reads the token files of dir.
func storedTokens(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	out := map[string]map[string]any{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
		b, _ := os.ReadFile(p)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out[p] = m
	}
	return out
}

// noTokens fails when an access or refresh token of the store appears in
// what bridge connect wrote.
func noTokens(t *testing.T, dir string, outputs ...string) {
	t.Helper()
	for _, m := range storedTokens(t, dir) {
		for _, k := range []string{"access_token", "refresh_token"} {
			tok, _ := m[k].(string)
			for _, out := range outputs {
				if tok != "" && strings.Contains(out, tok) {
					t.Errorf("the %s appears in bridge connect's output", k)
				}
			}
		}
	}
}

// TestConnectOAuthCode: the authorization code flow from the bridge's 401,
// with a client registered dynamically, the browser played by an HTTP
// client; the token is stored (mode 0600) and used by the next start
// without a new login.
func TestConnectOAuthCode(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	o := connect.OAuthOptions{TokenStore: store, Browser: browser(nil)}
	r, err := startOAuthRun(t, rs.url, o)
	if err != nil {
		t.Fatal(err)
	}
	r.echo(t)
	if err := r.close(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := rs.as.Registered(); n != 1 {
		t.Errorf("%d clients registered, want 1", n)
	}
	if got := storedTokens(t, store); len(got) != 1 {
		t.Fatalf("the store holds %d tokens, want 1", len(got))
	}
	noTokens(t, store, r.prompt.String(), r.logs.String())

	startEcho(t, rs.url, o)
	if n := rs.as.Grants("authorization_code"); n != 1 {
		t.Errorf("%d logins, want 1 (the second start uses the stored token)", n)
	}
	if n := rs.as.Registered(); n != 1 {
		t.Errorf("%d clients registered, want 1 (the registration is stored)", n)
	}
}

// TestConnectOAuthClientCredentials: a confidential client and no user.
func TestConnectOAuthClientCredentials(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	r, err := startOAuthRun(t, rs.url, connect.OAuthOptions{Flow: connect.FlowClientCredentials, TokenStore: store,
		ClientID: oauthtest.ServiceClient, ClientSecret: oauthtest.ServiceSecret})
	if err != nil {
		t.Fatal(err)
	}
	r.echo(t)
	r.close()
	if n := rs.as.Grants("client_credentials"); n != 1 {
		t.Errorf("%d client credentials grants, want 1", n)
	}
	noTokens(t, store, r.prompt.String(), r.logs.String())
	if strings.Contains(r.prompt.String()+r.logs.String(), oauthtest.ServiceSecret) {
		t.Error("the client secret appears in bridge connect's output")
	}
}

// TestConnectOAuthDevice: the device flow; the user opens the printed URL
// on another device.
func TestConnectOAuthDevice(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	user := &deviceUser{t: t}
	r, err := startOAuthRun(t, rs.url, connect.OAuthOptions{Flow: connect.FlowDevice, TokenStore: store,
		ClientID: oauthtest.PublicClient, Prompt: user})
	if err != nil {
		t.Fatal(err)
	}
	r.echo(t)
	r.close()
	if n := rs.as.Grants("urn:ietf:params:oauth:grant-type:device_code"); n != 1 {
		t.Errorf("%d device grants, want 1", n)
	}
}

// deviceUser reads the prompt and approves the device at the URL it names.
type deviceUser struct {
	t    *testing.T
	once sync.Once
}

var deviceURL = regexp.MustCompile(`open (\S+) and enter the code (\S+)`)

func (u *deviceUser) Write(p []byte) (int, error) {
	if m := deviceURL.FindSubmatch(p); m != nil {
		u.once.Do(func() {
			resp, err := http.Get(string(m[1])) // synchronous: p is the writer's buffer
			if err != nil {
				u.t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	return len(p), nil
}

// editTokens rewrites each token file of dir after edit.
func editTokens(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	for p, m := range storedTokens(t, dir) {
		edit(m)
		b, _ := json.Marshal(m)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// expireSoon makes the stored tokens expire within the refresh margin.
func expireSoon(t *testing.T, dir string) {
	t.Helper()
	editTokens(t, dir, func(m map[string]any) { m["expiry"] = time.Now().Add(10 * time.Second).Format(time.RFC3339Nano) })
}

// TestConnectOAuthRefresh: a stored token about to expire is refreshed
// before it is sent; one the remote refuses (revoked) is refreshed on the
// 401; neither needs a login.
func TestConnectOAuthRefresh(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	o := connect.OAuthOptions{TokenStore: store, ClientID: oauthtest.PublicClient, Browser: browser(nil)}
	startEcho(t, rs.url, o)
	refusedAtLogin := rs.refused.Load()

	t.Run("before expiry", func(t *testing.T) {
		expireSoon(t, store)
		r := startEcho(t, rs.url, o)
		if n := rs.as.Grants("refresh_token"); n != 1 {
			t.Errorf("%d refresh grants, want 1", n)
		}
		if n := rs.refused.Load(); n != refusedAtLogin {
			t.Errorf("the bridge refused %d requests, want none after the login", n-refusedAtLogin)
		}
		noTokens(t, store, r.prompt.String(), r.logs.String())
	})
	t.Run("after a 401", func(t *testing.T) {
		// The access token is revoked: the bridge no longer takes it.
		editTokens(t, store, func(m map[string]any) { m["access_token"] = "revoked" })
		startEcho(t, rs.url, o)
		if n := rs.as.Grants("refresh_token"); n != 2 {
			t.Errorf("%d refresh grants, want 2", n)
		}
		if n := rs.refused.Load(); n != refusedAtLogin+1 {
			t.Errorf("the bridge refused %d requests, want 1 (the stale token)", n-refusedAtLogin)
		}
	})
	if n := rs.as.Grants("authorization_code"); n != 1 {
		t.Errorf("%d logins, want 1", n)
	}
	t.Run("refresh refused", func(t *testing.T) {
		// Both tokens revoked: the refresh fails, and a new login
		// follows, with one line saying why.
		editTokens(t, store, func(m map[string]any) { m["access_token"], m["refresh_token"] = "revoked", "revoked-too" })
		r := startEcho(t, rs.url, o)
		if n := rs.as.Grants("authorization_code"); n != 2 {
			t.Errorf("%d logins, want 2", n)
		}
		if n := strings.Count(r.prompt.String(), "refreshing it failed"); n != 1 || strings.Contains(r.prompt.String(), "revoked-too") {
			t.Errorf("prompt:\n%s\nwant one line saying why, without the token", r.prompt)
		}
	})
}

// TestConnectOAuthClientMetadataDocument: where the authorization server
// takes Client ID Metadata Documents, the document's URL is the client_id.
func TestConnectOAuthClientMetadataDocument(t *testing.T) {
	remote := hostileAS(t, nil, func(_ string, m map[string]any) { m["client_id_metadata_document_supported"] = true })
	const doc = "https://client.example/bridge-connect.json"
	var got string
	_, err := startOAuthRun(t, remote, connect.OAuthOptions{TokenStore: t.TempDir(), ClientMetadataURL: doc,
		Browser: func(_ context.Context, u string) error {
			pu, _ := url.Parse(u)
			got = pu.Query().Get("client_id")
			return errors.New("the user closed the browser")
		}})
	if err == nil || !strings.Contains(err.Error(), "the user closed the browser") {
		t.Fatalf("got %v", err)
	}
	if got != doc {
		t.Errorf("client_id %q, want %q", got, doc)
	}
}

// TestConnectOAuthConcurrentRefresh: two bridge connects sharing a store
// and a token about to expire refresh it once (the lock file), and both
// use the result.
func TestConnectOAuthConcurrentRefresh(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	o := connect.OAuthOptions{TokenStore: store, ClientID: oauthtest.PublicClient, Browser: browser(nil)}
	r, err := startOAuthRun(t, rs.url, o)
	if err != nil {
		t.Fatal(err)
	}
	r.close()
	expireSoon(t, store)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			r, err := startOAuthRun(t, rs.url, o)
			if err != nil {
				t.Error(err)
				return
			}
			r.echo(t)
			r.close()
		})
	}
	wg.Wait()
	if n := rs.as.Grants("refresh_token"); n != 1 {
		t.Errorf("%d refresh grants, want 1", n)
	}
	if n := rs.as.Grants("authorization_code"); n != 1 {
		t.Errorf("%d logins, want 1", n)
	}
}

// TestConnectOAuthStepUp: a token without a scope the bridge requires gets
// 403 insufficient_scope; bridge connect logs in again asking for the
// union, and the request goes through.
func TestConnectOAuthStepUp(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools", "mcp:admin")
	store := t.TempDir()
	r, err := startOAuthRun(t, rs.url, connect.OAuthOptions{TokenStore: store, ClientID: oauthtest.PublicClient,
		Scopes: []string{"mcp:tools"}, Browser: browser(nil)})
	if err != nil {
		t.Fatal(err)
	}
	r.echo(t)
	r.close()
	if n := rs.as.Grants("authorization_code"); n != 2 {
		t.Errorf("%d logins, want 2 (the step up)", n)
	}
	if !strings.Contains(r.prompt.String(), "asks for more scopes (mcp:tools mcp:admin)") {
		t.Errorf("prompt:\n%s\nwant the step up explained", r.prompt)
	}
}

// hostileAS serves the metadata of a resource and an authorization server
// in front of a real one, altered by alter; its MCP endpoint answers 401.
func hostileAS(t *testing.T, prm func(base string) map[string]any, alter func(base string, m map[string]any)) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{base + "/mcp"}, Scopes: []string{"mcp:tools"}})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/mcp":
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
			w.WriteHeader(http.StatusUnauthorized)
		case "/token":
			// Another origin: the client's credentials must not follow.
			http.Redirect(w, r, as.URL+"/token", http.StatusTemporaryRedirect)
		case "/.well-known/oauth-protected-resource/mcp":
			m := map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}}
			if prm != nil {
				m = prm(base)
			}
			json.NewEncoder(w).Encode(m)
		case "/.well-known/oauth-authorization-server":
			m := map[string]any{"issuer": base, "authorization_endpoint": as.URL + "/authorize", "token_endpoint": as.URL + "/token",
				"code_challenge_methods_supported": []string{"S256"}, "response_types_supported": []string{"code"}}
			if alter != nil {
				alter(base, m)
			}
			json.NewEncoder(w).Encode(m)
		default:
			http.NotFound(w, r)
		}
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// TestConnectOAuthRefusals: what a hostile or broken server offers is
// refused before any consent, code or secret goes to it.
func TestConnectOAuthRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prm   func(base string) map[string]any
		alter func(base string, m map[string]any)
		extra url.Values
		want  string
		// afterConsent: refused once the user consented, at the
		// redirect or the token exchange.
		afterConsent bool
	}{
		{name: "wrong iss", extra: url.Values{"iss": {"https://evil.example"}}, want: `comes from issuer "https://evil.example"`, afterConsent: true},
		{name: "PKCE downgrade", alter: func(_ string, m map[string]any) { m["code_challenge_methods_supported"] = []string{"plain"} },
			want: "does not offer PKCE with S256"},
		{name: "no PKCE", alter: func(_ string, m map[string]any) { delete(m, "code_challenge_methods_supported") },
			want: "does not offer PKCE with S256"},
		{name: "http authorization endpoint", alter: func(_ string, m map[string]any) { m["authorization_endpoint"] = "http://auth.example/authorize" },
			want: "want https (http only on a loopback address)"},
		{name: "javascript authorization endpoint", alter: func(_ string, m map[string]any) { m["authorization_endpoint"] = "javascript:alert(1)" },
			want: "is not an absolute URL"},
		{name: "shell characters", alter: func(_ string, m map[string]any) {
			m["authorization_endpoint"] = "https://auth.example/$(touch${IFS}pwned)"
		},
			want: "holds the character '$'"},
		{name: "issuer mismatch", alter: func(_ string, m map[string]any) { m["issuer"] = "https://other.example" },
			want: `names issuer "https://other.example"`},
		{name: "wrong audience", prm: func(base string) map[string]any {
			return map[string]any{"resource": "https://other.example/mcp", "authorization_servers": []string{base}}
		}, want: `got metadata resource "https://other.example/mcp"`},
		{name: "token endpoint redirecting to another origin", alter: func(base string, m map[string]any) { m["token_endpoint"] = base + "/token" },
			want: "refusing a redirect from", afterConsent: true},
		{name: "http token endpoint", alter: func(_ string, m map[string]any) { m["token_endpoint"] = "http://auth.example/token" },
			want: "token_endpoint \"http://auth.example/token\": want https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote := hostileAS(t, tc.prm, tc.alter)
			var opened atomic.Bool
			b := browser(tc.extra)
			_, err := startOAuthRun(t, remote, connect.OAuthOptions{TokenStore: t.TempDir(), ClientID: oauthtest.PublicClient,
				Browser: func(ctx context.Context, u string) error { opened.Store(true); return b(ctx, u) }})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if opened.Load() && !tc.afterConsent {
				t.Error("the browser was opened")
			}
		})
	}
}

// TestConnectOAuthBinary: the bridge connect binary, with --no-browser,
// prints the authorization URL on stderr; a user opens it; the Go SDK's
// stdio client then works through it. The token lands in the store named
// by BRIDGE_CONNECT_TOKEN_STORE.
func TestConnectOAuthBinary(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	cmd, _ := connectCmd(t, rs.url, []string{"BRIDGE_CONNECT_TOKEN_STORE=" + store}, "--oauth-client-id", oauthtest.PublicClient, "--no-browser")
	user := &codeUser{t: t}
	cmd.Stderr = user
	exercise(t, cmd)
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("bridge connect exited %d; stderr:\n%s", code, user.out.String())
	}
	if !user.opened.Load() {
		t.Errorf("no authorization URL on stderr:\n%s", user.out.String())
	}
	if got := storedTokens(t, store); len(got) != 1 {
		t.Errorf("the store holds %d tokens, want 1", len(got))
	}
	noTokens(t, store, user.out.String())
}

// codeUser reads bridge connect's stderr and opens the authorization URL
// it prints, as the user would.
type codeUser struct {
	t      *testing.T
	out    testlog.Buffer
	opened atomic.Bool
}

var codeURL = regexp.MustCompile(`to authorize access to \S+, open (\S+)\n`)

func (u *codeUser) Write(p []byte) (int, error) {
	u.out.Write(p)
	if m := codeURL.FindSubmatch(p); m != nil && !u.opened.Swap(true) {
		authURL := string(m[1]) // p is the writer's buffer
		go func() {
			if err := browser(nil)(context.Background(), authURL); err != nil {
				u.t.Errorf("the user's browser: %v", err)
			}
		}()
	}
	return len(p), nil
}

// TestConnectOAuthConcurrentProcesses: two bridge connect processes
// sharing a store and a token about to expire refresh it once, through
// the lock file.
func TestConnectOAuthConcurrentProcesses(t *testing.T) {
	rs := startOAuthRS(t, "mcp:tools")
	store := t.TempDir()
	r, err := startOAuthRun(t, rs.url, connect.OAuthOptions{TokenStore: store, ClientID: oauthtest.PublicClient, Browser: browser(nil)})
	if err != nil {
		t.Fatal(err)
	}
	r.close()
	expireSoon(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		cmd, stderr := connectCmd(t, rs.url, []string{"BRIDGE_CONNECT_TOKEN_STORE=" + store, "BRIDGE_CONNECT_OAUTH_CLIENT_ID=" + oauthtest.PublicClient, "BRIDGE_CONNECT_NO_BROWSER=true"})
		wg.Go(func() {
			client := mcp.NewClient(&mcp.Implementation{Name: "connect-oauth-test", Version: "1.0.0"}, nil)
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Errorf("connecting: %v", err)
				return
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: textArgs{"hi"}})
			if err != nil || res.IsError {
				t.Errorf("tools/call echo: %v %+v", err, res)
			}
			cs.Close()
			if strings.Contains(stderr.String(), "open http") {
				t.Errorf("a process asked for a login:\n%s", stderr)
			}
		})
	}
	wg.Wait()
	if n := rs.as.Grants("refresh_token"); n != 1 {
		t.Errorf("%d refresh grants, want 1", n)
	}
	if n := rs.as.Grants("authorization_code"); n != 1 {
		t.Errorf("%d logins, want 1", n)
	}
}

package connect

// The OAuth 2.1 client of the MCP authorization spec (basic/authorization,
// revisions 2025-11-25 and 2026-07-28): what the remote's 401 points to
// (RFC 9728 protected resource metadata, then RFC 8414 or OpenID metadata
// of its authorization server), a token for the resource (RFC 8707) by
// one of three flows, stored per (issuer, resource, client) and refreshed
// before it expires or when the remote refuses it.
//
// The wire work is golang.org/x/oauth2's (PKCE, the code exchange, the
// device flow, client credentials) and the Go SDK's oauthex (protected
// resource metadata, WWW-Authenticate, dynamic registration); this file
// decides what may be trusted.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAuth flows.
const (
	// FlowCode is the authorization code flow with PKCE and a loopback
	// redirect: a user with a browser on this machine.
	FlowCode = "code"
	// FlowDevice is the device authorization grant (RFC 8628): a user
	// with a browser elsewhere (SSH sessions, containers).
	FlowDevice = "device"
	// FlowClientCredentials is the client credentials grant: a service
	// with its own confidential client and no user.
	FlowClientCredentials = "client-credentials"
)

const (
	// DefaultFlow is used when OAuthOptions.Flow is empty.
	DefaultFlow = FlowCode
	// DefaultLoginTimeout bounds a login waiting for its user when
	// OAuthOptions.LoginTimeout is zero.
	DefaultLoginTimeout = 5 * time.Minute
	// refreshMargin: a token this close to its expiry is refreshed before
	// it is sent.
	refreshMargin = time.Minute
	// maxMetadataBytes bounds a metadata document or a token response.
	maxMetadataBytes = 1 << 20
	// oauthTimeout bounds each request to an authorization server.
	oauthTimeout = 30 * time.Second
)

// OAuthOptions configure the OAuth client of Run.
type OAuthOptions struct {
	// Flow is FlowCode, FlowDevice or FlowClientCredentials. Empty:
	// DefaultFlow.
	Flow string
	// ClientID is a client registered at the authorization server in
	// advance; ClientSecret its secret (empty for a public client).
	// Empty: a Client ID Metadata Document, or dynamic registration.
	ClientID     string
	ClientSecret string
	// ClientMetadataURL is the https URL of this client's Client ID
	// Metadata Document, used as its client_id where the authorization
	// server supports it. Empty: none.
	ClientMetadataURL string
	// Scopes are requested instead of those the remote's challenge or
	// metadata name. Nil: theirs.
	Scopes []string
	// TokenStore is the directory of the token files. Empty:
	// DefaultTokenStore().
	TokenStore string
	// NoBrowser prints the authorization URL instead of opening a browser.
	NoBrowser bool
	// Browser opens an authorization URL (flow code). Nil: the system's
	// opener, started without a shell and only for https URLs; other URLs
	// are printed.
	Browser func(ctx context.Context, authURL string) error
	// Prompt receives what the user must read: the URL to open, the
	// device code, why a new login is needed. Nil: os.Stderr.
	Prompt io.Writer
	// LoginTimeout bounds the wait for the user. Zero: DefaultLoginTimeout.
	LoginTimeout time.Duration
}

// DefaultTokenStore is the token directory under the user's configuration
// directory.
func DefaultTokenStore() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the user's configuration directory for the token store (give --token-store): %w", err)
	}
	return dir + string(os.PathSeparator) + "mcp-bridge" + string(os.PathSeparator) + "tokens", nil
}

// oauthClient holds the token of one remote.
type oauthClient struct {
	opts     OAuthOptions
	resource string // the remote's URL; the PRM's resource once known
	hc       *http.Client
	log      *slog.Logger
	store    *tokenStore

	mu  sync.Mutex // one login or refresh at a time in this process
	cur *storedToken
}

func newOAuthClient(o *OAuthOptions, resource string, base *http.Client, log *slog.Logger) (*oauthClient, error) {
	c := &oauthClient{opts: *o, resource: resource, log: log}
	if c.opts.Flow == "" {
		c.opts.Flow = DefaultFlow
	}
	switch c.opts.Flow {
	case FlowCode, FlowDevice:
	case FlowClientCredentials:
		if c.opts.ClientID == "" || c.opts.ClientSecret == "" {
			return nil, errors.New("--oauth-flow client-credentials needs a confidential client: give --oauth-client-id and its secret (--oauth-client-secret-file or BRIDGE_CONNECT_CLIENT_SECRET)")
		}
	default:
		return nil, fmt.Errorf("--oauth-flow %q: want code, device or client-credentials", c.opts.Flow)
	}
	if c.opts.ClientMetadataURL != "" {
		u, err := url.Parse(c.opts.ClientMetadataURL)
		if err != nil || u.Scheme != "https" || u.Path == "" || u.Path == "/" {
			return nil, fmt.Errorf("--oauth-client-metadata-url %q: want an https URL with a path", c.opts.ClientMetadataURL)
		}
	}
	if c.opts.Prompt == nil {
		c.opts.Prompt = os.Stderr
	}
	if c.opts.LoginTimeout <= 0 {
		c.opts.LoginTimeout = DefaultLoginTimeout
	}
	dir := c.opts.TokenStore
	if dir == "" {
		var err error
		if dir, err = DefaultTokenStore(); err != nil {
			return nil, err
		}
	}
	c.store = &tokenStore{dir: dir}
	// Requests to authorization servers: bounded, and never redirected to
	// another origin (with a client secret or a code in them).
	hc := *base
	hc.Timeout = oauthTimeout
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 3 {
			return errors.New("more than 3 redirects")
		}
		if origin(req.URL) != origin(via[0].URL) {
			return fmt.Errorf("refusing a redirect from %s to another origin, %s", origin(via[0].URL), origin(req.URL))
		}
		return nil
	}
	c.hc = &hc
	return c, nil
}

func origin(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// clientKey names the client in the store before the issuer is known.
func (c *oauthClient) clientKey() string {
	switch {
	case c.opts.ClientID != "":
		return c.opts.ClientID
	case c.opts.ClientMetadataURL != "":
		return c.opts.ClientMetadataURL
	}
	return "" // dynamically registered: any
}

// token returns the access token to send, refreshing it first when it
// expires within refreshMargin. "" means none yet: the remote's 401 will
// say where to get one.
func (c *oauthClient) token(ctx context.Context) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		c.cur = c.store.find(c.resource, c.clientKey())
	}
	if c.cur == nil || c.cur.AccessToken == "" {
		return ""
	}
	if !c.cur.Expiry.IsZero() && time.Until(c.cur.Expiry) < refreshMargin {
		if err := c.refresh(ctx, c.cur.AccessToken); err != nil {
			fmt.Fprintf(c.opts.Prompt, "bridge connect: the token for %s expires and could not be refreshed (%v): logging in again\n", c.resource, err)
			c.cur.AccessToken = ""
			return ""
		}
	}
	return c.cur.AccessToken
}

// errNoRetry means the refusal is not the token's to fix.
var errNoRetry = errors.New("not an authorization problem")

// unauthorized handles a 401 or 403 answer to a request sent with token
// sent: it refreshes, logs in, or steps up, and returns nil when the
// request is worth sending again with c.token.
func (c *oauthClient) unauthorized(ctx context.Context, resp *http.Response, sent string) error {
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return fmt.Errorf("the remote's WWW-Authenticate header: %v", err)
	}
	var bearer map[string]string
	for _, ch := range challenges {
		if strings.EqualFold(ch.Scheme, "bearer") {
			bearer = ch.Params
			break
		}
	}
	var stepUp []string
	if resp.StatusCode == http.StatusForbidden {
		// "When a client makes a request with an access token with
		// insufficient scope, the server SHOULD respond with HTTP 403
		// Forbidden and a WWW-Authenticate header with
		// error="insufficient_scope"" (Scope Challenge Handling).
		if bearer["error"] != "insufficient_scope" {
			return errNoRetry
		}
		stepUp = strings.Fields(bearer["scope"])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.AccessToken != "" && c.cur.AccessToken != sent {
		return nil // another request got a new token meanwhile
	}
	if resp.StatusCode == http.StatusUnauthorized && sent != "" && c.cur != nil && c.cur.RefreshToken != "" {
		err := c.refresh(ctx, sent)
		if err == nil {
			return nil
		}
		fmt.Fprintf(c.opts.Prompt, "bridge connect: %s refused the token and refreshing it failed (%v): logging in again\n", c.resource, err)
	} else if stepUp != nil {
		fmt.Fprintf(c.opts.Prompt, "bridge connect: %s asks for more scopes (%s): logging in again\n", c.resource, strings.Join(stepUp, " "))
	} else if sent != "" {
		fmt.Fprintf(c.opts.Prompt, "bridge connect: %s refused the stored token: logging in again\n", c.resource)
	}
	return c.login(ctx, bearer, stepUp)
}

// login discovers the authorization server from the challenge and runs
// the flow. c.mu is held.
func (c *oauthClient) login(ctx context.Context, bearer map[string]string, stepUp []string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.LoginTimeout)
	defer cancel()
	prm, err := c.resourceMetadata(ctx, bearer["resource_metadata"])
	if err != nil {
		return err
	}
	asm, err := c.serverMetadata(ctx, prm.AuthorizationServers[0])
	if err != nil {
		return err
	}
	// Scopes: "Use scope parameter from the initial WWW-Authenticate
	// header in the 401 response, if provided; If scope is not available,
	// use all scopes defined in scopes_supported from the Protected
	// Resource Metadata document".
	scopes := c.opts.Scopes
	if scopes == nil {
		scopes = strings.Fields(bearer["scope"])
	}
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	if stepUp != nil {
		if c.cur != nil {
			scopes = append(slices.Clone(c.cur.Scopes), scopes...)
		}
		scopes = append(scopes, stepUp...)
		slices.Sort(scopes)
		scopes = slices.Compact(scopes)
	}
	cl, err := c.client(ctx, asm)
	if err != nil {
		return err
	}
	cfg := &oauth2.Config{
		ClientID:     cl.ClientID,
		ClientSecret: cl.ClientSecret,
		Endpoint:     oauth2.Endpoint{AuthURL: asm.AuthorizationEndpoint, TokenURL: asm.TokenEndpoint, DeviceAuthURL: asm.DeviceAuthorizationEndpoint},
		Scopes:       scopes,
	}
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	if cl.ClientSecret != "" {
		cfg.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
	}
	hctx := context.WithValue(ctx, oauth2.HTTPClient, c.hc)
	// RFC 8707: "MCP clients MUST include the resource parameter in both
	// authorization requests and token requests."
	resource := oauth2.SetAuthURLParam("resource", prm.Resource)
	var tok *oauth2.Token
	switch c.opts.Flow {
	case FlowCode:
		tok, err = c.codeFlow(hctx, cfg, asm, resource)
	case FlowDevice:
		if asm.DeviceAuthorizationEndpoint == "" {
			return fmt.Errorf("the authorization server %s offers no device flow (no device_authorization_endpoint): use --oauth-flow code or client-credentials", asm.Issuer)
		}
		var da *oauth2.DeviceAuthResponse
		da, err = cfg.DeviceAuth(hctx, resource)
		if err == nil {
			uri := da.VerificationURIComplete
			if uri == "" {
				uri = da.VerificationURI
			}
			if cerr := checkEndpoint("verification_uri", uri, true); cerr != nil {
				return cerr
			}
			fmt.Fprintf(c.opts.Prompt, "bridge connect: to authorize access to %s, open %s and enter the code %s\n", prm.Resource, uri, da.UserCode)
			tok, err = cfg.DeviceAccessToken(hctx, da, resource)
		}
	case FlowClientCredentials:
		cc := &clientcredentials.Config{ClientID: cl.ClientID, ClientSecret: cl.ClientSecret, TokenURL: asm.TokenEndpoint,
			Scopes: scopes, EndpointParams: url.Values{"resource": {prm.Resource}}, AuthStyle: oauth2.AuthStyleInHeader}
		tok, err = cc.Token(hctx)
	}
	if err != nil {
		return fmt.Errorf("logging in at %s (--oauth-flow %s): %s", asm.Issuer, c.opts.Flow, oauthError(err))
	}
	if tok.AccessToken == "" {
		return fmt.Errorf("logging in at %s: the token response holds no access token", asm.Issuer)
	}
	st := &storedToken{Issuer: asm.Issuer, Resource: prm.Resource, Remote: c.resource, ClientKey: c.clientKey(),
		ClientID: cl.ClientID, ClientSecret: cl.registeredSecret, Registered: cl.registered,
		TokenEndpoint: asm.TokenEndpoint, Scopes: scopes, AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry}
	if err := c.store.save(st); err != nil {
		c.log.Warn("the token could not be stored: the next start logs in again", "err", err)
	}
	c.cur = st
	c.log.Info("logged in", "issuer", asm.Issuer, "resource", prm.Resource, "flow", c.opts.Flow, "scopes", strings.Join(scopes, " "))
	return nil
}

// resourceMetadata fetches the protected resource metadata: "MCP clients
// MUST use the resource_metadata URL from the WWW-Authenticate header when
// present; otherwise ... the well-known URI", path-inserted first.
func (c *oauthClient) resourceMetadata(ctx context.Context, fromChallenge string) (*oauthex.ProtectedResourceMetadata, error) {
	ru, err := url.Parse(c.resource)
	if err != nil {
		return nil, err
	}
	type cand struct{ url, resource string }
	var cands []cand
	if fromChallenge != "" {
		cands = append(cands, cand{fromChallenge, c.resource})
	}
	mu := *ru
	mu.RawQuery, mu.Fragment = "", ""
	if p := strings.TrimLeft(ru.Path, "/"); p != "" {
		mu.Path = "/.well-known/oauth-protected-resource/" + p
		cands = append(cands, cand{mu.String(), c.resource})
	}
	mu.Path = "/.well-known/oauth-protected-resource"
	root := *ru
	root.Path, root.RawQuery, root.Fragment = "", "", ""
	cands = append(cands, cand{mu.String(), root.String()})
	var errs []error
	for _, cd := range cands {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, cd.url, cd.resource, c.hc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, fmt.Errorf("the protected resource metadata at %s names no authorization server", cd.url)
		}
		return prm, nil
	}
	return nil, fmt.Errorf("no usable protected resource metadata (RFC 9728) for %s: %w", c.resource, errors.Join(errs...))
}

// serverMeta is what this client reads of RFC 8414 metadata.
type serverMeta struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	DeviceAuthorizationEndpoint       string   `json:"device_authorization_endpoint"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported"`
	IssParameterSupported             bool     `json:"authorization_response_iss_parameter_supported"`
}

// serverMetadata fetches the authorization server's metadata at the URLs
// the spec lists, in order: RFC 8414 then OpenID Connect Discovery, with
// path insertion for an issuer with a path, and checks what will be
// trusted with a user's consent or a secret.
func (c *oauthClient) serverMetadata(ctx context.Context, issuer string) (*serverMeta, error) {
	if err := checkEndpoint("authorization server", issuer, false); err != nil {
		return nil, err
	}
	iu, err := url.Parse(issuer)
	if err != nil {
		return nil, err
	}
	p := strings.TrimRight(iu.Path, "/")
	var urls []string
	base := *iu
	base.RawQuery, base.Fragment = "", ""
	if p == "" {
		for _, wk := range []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
			base.Path = wk
			urls = append(urls, base.String())
		}
	} else {
		for _, wk := range []string{"/.well-known/oauth-authorization-server" + p, "/.well-known/openid-configuration" + p} {
			base.Path = wk
			urls = append(urls, base.String())
		}
		base.Path = p + "/.well-known/openid-configuration"
		urls = append(urls, base.String())
	}
	var asm *serverMeta
	var errs []error
	for _, u := range urls {
		m, status, err := getJSON[serverMeta](ctx, c.hc, u)
		if err == nil {
			asm = m
			break
		}
		if status < 400 || status >= 500 {
			errs = append(errs, err)
		}
	}
	if asm == nil {
		return nil, fmt.Errorf("no authorization server metadata (RFC 8414 or OpenID) for %s: %w", issuer, errors.Join(errs...))
	}
	// "the issuer value in the document MUST be identical to the issuer
	// identifier used to construct the well-known URL. If they differ,
	// the client MUST NOT use the metadata."
	if asm.Issuer != issuer {
		return nil, fmt.Errorf("the authorization server metadata names issuer %q, not %q: refusing it (RFC 8414, 3.3)", asm.Issuer, issuer)
	}
	// "MCP clients MUST use the S256 code challenge method when
	// technically capable" and "If code_challenge_methods_supported is
	// absent, the authorization server does not support PKCE and MCP
	// clients MUST refuse to proceed." S256 only: a list of "plain" alone
	// is a downgrade.
	if c.opts.Flow == FlowCode && !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
		return nil, fmt.Errorf("the authorization server %s does not offer PKCE with S256 (code_challenge_methods_supported %q): refusing the code flow", issuer, asm.CodeChallengeMethodsSupported)
	}
	for _, e := range []struct {
		name, value string
		required    bool
	}{
		{"authorization_endpoint", asm.AuthorizationEndpoint, c.opts.Flow == FlowCode},
		{"token_endpoint", asm.TokenEndpoint, true},
		{"registration_endpoint", asm.RegistrationEndpoint, false},
		{"device_authorization_endpoint", asm.DeviceAuthorizationEndpoint, false},
	} {
		if e.value == "" {
			if e.required {
				return nil, fmt.Errorf("the authorization server metadata of %s has no %s", issuer, e.name)
			}
			continue
		}
		if err := checkEndpoint(e.name, e.value, e.name == "authorization_endpoint"); err != nil {
			return nil, fmt.Errorf("the authorization server metadata of %s: %w", issuer, err)
		}
	}
	return asm, nil
}

// checkEndpoint refuses an endpoint that is not https (plain http only on
// loopback: "All authorization server endpoints MUST be served over
// HTTPS"), and, for what a browser opens, one with characters a shell or
// an opener could take for something else (CVE-2025-6514 ran an
// authorization_endpoint through a shell).
func checkEndpoint(name, raw string, browser bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s %q is not an absolute URL", name, raw)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && IsLoopbackURL(u):
	default:
		return fmt.Errorf("%s %q: want https (http only on a loopback address)", name, raw)
	}
	if u.User != nil {
		return fmt.Errorf("%s %q holds credentials", name, raw)
	}
	if browser {
		for _, r := range raw {
			if r <= ' ' || r >= 0x7f || strings.ContainsRune("`$;|<>(){}\\'\"!*^", r) {
				return fmt.Errorf("%s %q holds the character %q, which no sane endpoint needs: refusing it", name, raw, r)
			}
		}
	}
	return nil
}

// getJSON GETs a JSON document of at most maxMetadataBytes.
func getJSON[T any](ctx context.Context, hc *http.Client, u string) (*T, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, resp.StatusCode, fmt.Errorf("GET %s: Content-Type %q, want application/json", u, mt)
	}
	body, err := readBody(resp.Body, maxMetadataBytes)
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("GET %s: %w", u, err)
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("GET %s: %w", u, err)
	}
	return &v, resp.StatusCode, nil
}

// oauthError says what an authorization server refused without the
// response body (which may echo what was sent).
func oauthError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		s := fmt.Sprintf("the token endpoint answered %d", re.Response.StatusCode)
		if re.ErrorCode != "" {
			s += ": " + re.ErrorCode
		}
		if re.ErrorDescription != "" {
			s += " (" + re.ErrorDescription + ")"
		}
		return s
	}
	return err.Error()
}

// registration is the client used at one authorization server.
type registration struct {
	ClientID, ClientSecret string
	registered             bool   // by dynamic registration
	registeredSecret       string // kept in the store when registered
}

// client picks the client: "Clients supporting all options SHOULD use the
// following priority order: 1. Use pre-registered client information ...
// 2. Use Client ID Metadata Documents if the Authorization Server
// indicates that it supports them ... 3. Use Dynamic Client Registration
// as a fallback".
func (c *oauthClient) client(ctx context.Context, asm *serverMeta) (*registration, error) {
	if c.opts.ClientID != "" {
		return &registration{ClientID: c.opts.ClientID, ClientSecret: c.opts.ClientSecret}, nil
	}
	if c.opts.ClientMetadataURL != "" && asm.ClientIDMetadataDocumentSupported && c.opts.Flow != FlowClientCredentials {
		return &registration{ClientID: c.opts.ClientMetadataURL}, nil
	}
	if st := c.store.registered(asm.Issuer); st != nil {
		return &registration{ClientID: st.ClientID, ClientSecret: st.ClientSecret, registered: true, registeredSecret: st.ClientSecret}, nil
	}
	if asm.RegistrationEndpoint == "" {
		return nil, fmt.Errorf("the authorization server %s offers no dynamic client registration%s: give --oauth-client-id (a client registered there)", asm.Issuer,
			map[bool]string{true: " and does not take Client ID Metadata Documents", false: ""}[c.opts.ClientMetadataURL != ""])
	}
	meta := &oauthex.ClientRegistrationMetadata{
		ClientName:              "mcp-bridge connect",
		TokenEndpointAuthMethod: "none",
		GrantTypes:              []string{"authorization_code", "refresh_token"},
		ResponseTypes:           []string{"code"},
		// RFC 8252, 7.3: "The authorization server MUST allow any port
		// to be specified at the time of the request for loopback IP
		// redirect URIs", so the one registration serves every login.
		RedirectURIs: []string{"http://127.0.0.1/callback"},
	}
	if c.opts.Flow == FlowDevice {
		meta.GrantTypes = []string{"urn:ietf:params:oauth:grant-type:device_code", "refresh_token"}
		meta.ResponseTypes = nil
	}
	resp, err := oauthex.RegisterClient(ctx, asm.RegistrationEndpoint, meta, c.hc)
	if err != nil {
		return nil, fmt.Errorf("registering a client at %s: %v", asm.Issuer, err)
	}
	c.log.Info("registered a client", "issuer", asm.Issuer, "client_id", resp.ClientID)
	return &registration{ClientID: resp.ClientID, ClientSecret: resp.ClientSecret, registered: true, registeredSecret: resp.ClientSecret}, nil
}

// codeFlow runs the authorization code flow with PKCE (S256) and a
// loopback redirect (RFC 8252), checking state and, per RFC 9207, iss.
func (c *oauthClient) codeFlow(ctx context.Context, cfg *oauth2.Config, asm *serverMeta, resource oauth2.AuthCodeOption) (*oauth2.Token, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the authorization redirect: %w", err)
	}
	cfg.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	verifier := oauth2.GenerateVerifier()
	state := rand.Text()
	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	var once sync.Once
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if q.Get("state") != state {
			// Not our redirect (or a forged one): it settles nothing.
			http.Error(w, "unknown state", http.StatusBadRequest)
			return
		}
		res := result{code: q.Get("code")}
		switch iss := q.Get("iss"); {
		case q.Get("error") != "":
			res.err = fmt.Errorf("the authorization server refused: %s %s", q.Get("error"), q.Get("error_description"))
		case iss != "" && iss != asm.Issuer:
			// A present iss is compared "to the recorded issuer using
			// simple string comparison", whatever the metadata says; an
			// absent one is rejected only where the metadata promised it
			// (Authorization Response Validation, RFC 9207).
			res.err = fmt.Errorf("the authorization response comes from issuer %q, not %q: refusing it (a mix-up attack?)", iss, asm.Issuer)
		case iss == "" && asm.IssParameterSupported:
			res.err = fmt.Errorf("the authorization server %s promises an iss parameter (RFC 9207) but the response has none: refusing it", asm.Issuer)
		case res.code == "":
			res.err = errors.New("the authorization response holds no code")
		}
		if res.err != nil {
			http.Error(w, "Authorization failed: "+res.err.Error(), http.StatusBadRequest)
		} else {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, "<!doctype html><title>Authorized</title><p>bridge connect is authorized. You can close this window.</p>")
		}
		once.Do(func() { done <- res })
	})}
	go srv.Serve(ln)
	defer srv.Close()

	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), resource)
	if err := c.openBrowser(ctx, authURL); err != nil {
		return nil, err
	}
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("no authorization within %v: %w", c.opts.LoginTimeout, ctx.Err())
	}
	if res.err != nil {
		return nil, res.err
	}
	return cfg.Exchange(ctx, res.code, oauth2.VerifierOption(verifier), resource)
}

// openBrowser opens the authorization URL, or prints it.
func (c *oauthClient) openBrowser(ctx context.Context, authURL string) error {
	if c.opts.Browser != nil {
		fmt.Fprintf(c.opts.Prompt, "bridge connect: opening %s to authorize access to %s\n", authURL, c.resource)
		return c.opts.Browser(ctx, authURL)
	}
	u, _ := url.Parse(authURL)
	if !c.opts.NoBrowser && u != nil && u.Scheme == "https" {
		// Started directly, never through a shell: the URL is one argument.
		var cmd *exec.Cmd
		switch runtime.GOOS {
		case "darwin":
			cmd = exec.Command("open", authURL)
		case "windows":
			cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", authURL)
		default:
			cmd = exec.Command("xdg-open", authURL)
		}
		if err := cmd.Start(); err == nil {
			go cmd.Wait()
			fmt.Fprintf(c.opts.Prompt, "bridge connect: opened a browser to authorize access to %s; if none appeared, open %s\n", c.resource, authURL)
			return nil
		}
	}
	fmt.Fprintf(c.opts.Prompt, "bridge connect: to authorize access to %s, open %s\n", c.resource, authURL)
	return nil
}

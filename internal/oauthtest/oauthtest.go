// Package oauthtest runs a real OAuth 2.1 authorization server in-process
// for tests: ory/fosite's authorization code (with PKCE), refresh token,
// client credentials and introspection handlers over an in-memory store,
// issuing JWT access tokens (RFC 9068) signed with a rotatable ECDSA key, or
// opaque ones. What fosite does not serve is added here: RFC 8414 (or
// OpenID) metadata, the JWKS, and RFC 8707 resource indicators, which become
// the token's audience.
//
// It is imported by tests only.
package oauthtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v3"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/storage"
	fjwt "github.com/ory/fosite/token/jwt"
	oauth2c "golang.org/x/oauth2"
)

// Clients registered at every Server.
const (
	// PublicClient is a public client (no secret) for the authorization
	// code flow with PKCE, redirecting to RedirectURL.
	PublicClient = "mcp-client"
	RedirectURL  = "http://127.0.0.1/callback"
	// ServiceClient is a confidential client for the client credentials
	// grant, with secret ServiceSecret.
	ServiceClient = "service"
	ServiceSecret = "service-secret"
	// ResourceClient is the bridge's own confidential client, which may
	// introspect tokens, with secret ResourceSecret.
	ResourceClient = "bridge"
	ResourceSecret = "bridge-secret"
)

// Options configure a Server.
type Options struct {
	// Audience lists the resources (RFC 8707) clients may ask tokens for.
	Audience []string
	// Scopes are the scopes clients may ask for.
	Scopes []string
	// Opaque issues opaque access tokens, to be introspected, instead of JWTs.
	Opaque bool
	// OpenIDOnly serves the metadata only at /.well-known/openid-configuration.
	OpenIDOnly bool
}

// A Server is a running authorization server.
type Server struct {
	// URL is the issuer.
	URL string

	opts     Options
	srv      *httptest.Server
	provider fosite.OAuth2Provider
	store    *storage.MemoryStore
	x        extra

	mu   sync.Mutex
	keys []*jose.JSONWebKey // published; the last one signs
	user string             // the subject of the next authorization
	hold *JWKSHold          // when set, JWKS requests wait for its release

	// JWKSFetches counts requests for the JWKS.
	JWKSFetches atomic.Int64
	// Introspections counts introspection requests.
	Introspections atomic.Int64
}

// New starts a Server, stopped at the end of the test.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts, user: "alice"}
	// Started once set up: its handlers read what New writes, and the
	// race detector sees no order between New and a request from another
	// process (a bridge binary) otherwise.
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	s.URL = "http://" + s.srv.Listener.Addr().String()
	s.Rotate()

	s.x = extra{grants: map[string]int{}, devices: map[string]*device{}, byUser: map[string]string{}, dynamic: map[string]fosite.Client{}}
	cfg := &fosite.Config{
		AccessTokenLifespan:   time.Hour,
		RefreshTokenLifespan:  24 * time.Hour,
		AuthorizeCodeLifespan: time.Minute,
		GlobalSecret:          []byte("a-global-secret-of-32-bytes-long"),
		AccessTokenIssuer:     s.URL,
		EnforcePKCE:           true,
		ScopeStrategy:         fosite.ExactScopeStrategy,
		RefreshTokenScopes:    []string{}, // always issue refresh tokens
		JWTScopeClaimKey:      fjwt.JWTScopeFieldString,
		HashCost:              4,
	}
	s.store = storage.NewMemoryStore()
	hash := func(secret string) []byte {
		h, err := (&fosite.BCrypt{Config: cfg}).Hash(context.Background(), []byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	s.store.Clients[PublicClient] = &fosite.DefaultClient{
		ID: PublicClient, Public: true, RedirectURIs: []string{RedirectURL},
		ResponseTypes: []string{"code"}, GrantTypes: []string{"authorization_code", "refresh_token"},
		Scopes: opts.Scopes, Audience: opts.Audience,
	}
	s.store.Clients[ServiceClient] = &fosite.DefaultClient{
		ID: ServiceClient, Secret: hash(ServiceSecret),
		GrantTypes: []string{"client_credentials"}, Scopes: opts.Scopes, Audience: opts.Audience,
	}
	s.store.Clients[ResourceClient] = &fosite.DefaultClient{
		ID: ResourceClient, Secret: hash(ResourceSecret), GrantTypes: []string{"client_credentials"},
	}
	hmac := compose.NewOAuth2HMACStrategy(cfg)
	var core oauth2.CoreStrategy = hmac
	if !opts.Opaque {
		core = compose.NewOAuth2JWTStrategy(func(context.Context) (any, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.keys[len(s.keys)-1], nil
		}, hmac, cfg)
	}
	s.provider = compose.Compose(cfg, dynStore{s.store, s}, &compose.CommonStrategy{CoreStrategy: core},
		compose.OAuth2AuthorizeExplicitFactory,
		compose.OAuth2PKCEFactory,
		compose.OAuth2RefreshTokenGrantFactory,
		compose.OAuth2ClientCredentialsGrantFactory,
		compose.OAuth2TokenIntrospectionFactory,
	)
	s.srv.Start()
	return s
}

// SetUser sets the subject of the next authorizations (as if that user
// logged in and consented).
func (s *Server) SetUser(user string) {
	s.mu.Lock()
	s.user = user
	s.mu.Unlock()
}

// Rotate makes a new signing key and publishes only it: tokens signed with
// earlier keys no longer verify.
func (s *Server) Rotate() {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kid := fmt.Sprintf("key-%d", len(s.keys)+1)
	if len(s.keys) > 0 {
		kid = fmt.Sprintf("key-%d", parseKid(s.keys[len(s.keys)-1].KeyID)+1)
	}
	s.keys = []*jose.JSONWebKey{{Key: priv, KeyID: kid, Algorithm: "ES256", Use: "sig"}}
}

func parseKid(kid string) int {
	var n int
	fmt.Sscanf(kid, "key-%d", &n)
	return n
}

// KeyID is the ID of the current signing key.
func (s *Server) KeyID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1].KeyID
}

// Sign signs claims with the current key as a JWT access token, for tests
// that need tokens no well-behaved server would issue (wrong audience,
// expired...).
func (s *Server) Sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	s.mu.Lock()
	k := s.keys[len(s.keys)-1]
	s.mu.Unlock()
	return SignWith(t, k.Key.(*ecdsa.PrivateKey), k.KeyID, claims)
}

// SignTyped is Sign with the JWS header typ ("": none) rather than at+jwt.
func (s *Server) SignTyped(t testing.TB, typ string, claims map[string]any) string {
	t.Helper()
	s.mu.Lock()
	k := s.keys[len(s.keys)-1]
	s.mu.Unlock()
	return signTyped(t, k.Key.(*ecdsa.PrivateKey), k.KeyID, typ, claims)
}

// SignWith signs claims with key, naming it kid, as an access token: typ
// at+jwt (RFC 9068, section 2.1).
func SignWith(t testing.TB, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	return signTyped(t, key, kid, AccessTokenType, claims)
}

// AccessTokenType is the typ of the JWT access tokens the server issues:
// "Resource servers MUST verify that the typ header value is at+jwt or
// application/at+jwt" (RFC 9068, section 4).
const AccessTokenType = "at+jwt"

func signTyped(t testing.TB, key *ecdsa.PrivateKey, kid, typ string, claims map[string]any) string {
	t.Helper()
	jk, err := jwk.Import(key)
	if err != nil {
		t.Fatal(err)
	}
	jk.Set(jwk.KeyIDKey, kid)
	tok := jwt.New()
	for k, v := range claims {
		if err := tok.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	// jws.Sign rather than jwt.Sign, which writes typ JWT when none is given.
	payload, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	hdrs := jws.NewHeaders()
	if typ != "" {
		hdrs.Set(jws.TypeKey, typ)
	}
	b, err := jws.Sign(payload, jws.WithKey(jwa.ES256(), jk, jws.WithProtectedHeaders(hdrs)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Claims returns the claims of a token this server would issue to subject
// for resource.
func (s *Server) Claims(subject, resource string, scopes ...string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": s.URL, "sub": subject, "aud": []string{resource}, "client_id": PublicClient,
		"scope": strings.Join(scopes, " "), "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"jti": rand.Text(),
	}
}

// ClientCredentials obtains a token for ServiceClient through the token
// endpoint.
func (s *Server) ClientCredentials(t testing.TB, resource string, scopes ...string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.Join(scopes, " ")}, "resource": {resource}}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(ServiceClient, ServiceSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error_description"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusOK || body.AccessToken == "" {
		t.Fatalf("client credentials grant: %s %s", resp.Status, body.Error)
	}
	return body.AccessToken
}

// FetchCode follows an authorization URL as a browser would after the
// user consented, and returns the code and state from the redirect. It
// fits the Go SDK's auth.AuthorizationCodeFetcher.
func FetchCode(ctx context.Context, authURL string) (code, state string, err error) {
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", "", err
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode/100 != 3 {
		return "", "", fmt.Errorf("authorization: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	q := loc.Query()
	if q.Get("error") != "" {
		return "", "", fmt.Errorf("authorization: %s: %s", q.Get("error"), q.Get("error_description"))
	}
	return q.Get("code"), q.Get("state"), nil
}

// A JWKSHold makes the issuer slow: JWKS requests wait until Release.
type JWKSHold struct {
	// Entered is closed when the first JWKS request arrives and waits.
	Entered chan struct{}
	// Abandoned is closed when a waiting JWKS request's client gave up.
	Abandoned chan struct{}

	enter, abandon, rel sync.Once
	release             chan struct{}
}

// Release lets the waiting and later JWKS requests be answered.
func (h *JWKSHold) Release() { h.rel.Do(func() { close(h.release) }) }

// HoldJWKS makes the following JWKS requests wait until the hold is
// released (at the latest when the test ends).
func (s *Server) HoldJWKS(t testing.TB) *JWKSHold {
	h := &JWKSHold{Entered: make(chan struct{}), Abandoned: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.Release)
	s.mu.Lock()
	s.hold = h
	s.mu.Unlock()
	return h
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if ctx.Value(noExtraKey{}) == nil && s.serveExtra(w, r) {
		return
	}
	switch r.URL.Path {
	case "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration":
		if s.opts.OpenIDOnly != (r.URL.Path == "/.well-known/openid-configuration") {
			http.NotFound(w, r)
			return
		}
		meta := map[string]any{
			"issuer":                                s.URL,
			"authorization_endpoint":                s.URL + "/authorize",
			"token_endpoint":                        s.URL + "/token",
			"introspection_endpoint":                s.URL + "/introspect",
			"response_types_supported":              []string{"code"},
			"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
			"code_challenge_methods_supported":      []string{"S256"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "none"},
			"scopes_supported":                      s.opts.Scopes,
		}
		if !s.opts.Opaque {
			meta["jwks_uri"] = s.URL + "/jwks"
		}
		s.extendMeta(meta)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(meta)
	case "/jwks":
		s.JWKSFetches.Add(1)
		s.mu.Lock()
		hold := s.hold
		s.mu.Unlock()
		if hold != nil {
			hold.enter.Do(func() { close(hold.Entered) })
			select {
			case <-hold.release:
			case <-ctx.Done():
				hold.abandon.Do(func() { close(hold.Abandoned) })
				return
			}
		}
		s.mu.Lock()
		var set jose.JSONWebKeySet
		for _, k := range s.keys {
			set.Keys = append(set.Keys, k.Public())
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(set)
	case "/authorize":
		ar, err := s.provider.NewAuthorizeRequest(ctx, r)
		if err != nil {
			s.provider.WriteAuthorizeError(ctx, w, ar, err)
			return
		}
		for _, sc := range ar.GetRequestedScopes() {
			ar.GrantScope(sc)
		}
		// RFC 8707: the resource indicator becomes the audience.
		for _, res := range r.Form["resource"] {
			if fosite.DefaultAudienceMatchingStrategy(ar.GetClient().GetAudience(), []string{res}) != nil {
				s.provider.WriteAuthorizeError(ctx, w, ar, fosite.ErrInvalidRequest.WithHint("unknown resource"))
				return
			}
			ar.GrantAudience(res)
		}
		s.mu.Lock()
		user := s.user
		s.mu.Unlock()
		resp, err := s.provider.NewAuthorizeResponse(ctx, ar, newSession(user, ar.GetClient().GetID()))
		if err != nil {
			s.provider.WriteAuthorizeError(ctx, w, ar, err)
			return
		}
		s.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
	case "/token":
		ar, err := s.provider.NewAccessRequest(ctx, r, newSession("", ""))
		if err != nil {
			s.provider.WriteAccessError(ctx, w, ar, err)
			return
		}
		if ar.GetGrantTypes().ExactOne("client_credentials") {
			for _, sc := range ar.GetRequestedScopes() {
				ar.GrantScope(sc)
			}
			for _, res := range r.PostForm["resource"] {
				if fosite.DefaultAudienceMatchingStrategy(ar.GetClient().GetAudience(), []string{res}) != nil {
					s.provider.WriteAccessError(ctx, w, ar, fosite.ErrInvalidRequest.WithHint("unknown resource"))
					return
				}
				ar.GrantAudience(res)
			}
			sess := ar.GetSession().(*oauth2.JWTSession)
			sess.JWTClaims.Subject = ar.GetClient().GetID()
			sess.Subject = ar.GetClient().GetID()
			sess.JWTClaims.Extra["client_id"] = ar.GetClient().GetID()
		}
		resp, err := s.provider.NewAccessResponse(ctx, ar)
		if err != nil {
			s.provider.WriteAccessError(ctx, w, ar, err)
			return
		}
		s.provider.WriteAccessResponse(ctx, w, ar, resp)
	case "/introspect":
		s.Introspections.Add(1)
		ir, err := s.provider.NewIntrospectionRequest(ctx, r, newSession("", ""))
		if err != nil {
			s.provider.WriteIntrospectionError(ctx, w, err)
			return
		}
		s.provider.WriteIntrospectionResponse(ctx, w, ir)
	default:
		http.NotFound(w, r)
	}
}

func newSession(user, clientID string) *oauth2.JWTSession {
	return &oauth2.JWTSession{
		JWTClaims: &fjwt.JWTClaims{Subject: user, Extra: map[string]any{"client_id": clientID}},
		JWTHeader: &fjwt.Headers{Extra: map[string]any{"typ": AccessTokenType}},
		Subject:   user,
	}
}

// config is PublicClient's configuration at this server.
func (s *Server) config(scopes []string) *oauth2c.Config {
	return &oauth2c.Config{
		ClientID:    PublicClient,
		RedirectURL: RedirectURL,
		Endpoint:    oauth2c.Endpoint{AuthURL: s.URL + "/authorize", TokenURL: s.URL + "/token", AuthStyle: oauth2c.AuthStyleInParams},
		Scopes:      scopes,
	}
}

// AuthorizationCode runs the authorization code flow with PKCE for
// PublicClient, as user, and returns the token (with a refresh token).
func (s *Server) AuthorizationCode(t testing.TB, user, resource string, scopes ...string) *oauth2c.Token {
	t.Helper()
	s.SetUser(user)
	cfg := s.config(scopes)
	verifier := oauth2c.GenerateVerifier()
	u := cfg.AuthCodeURL("state-0123456789", oauth2c.S256ChallengeOption(verifier), oauth2c.SetAuthURLParam("resource", resource))
	code, state, err := FetchCode(context.Background(), u)
	if err != nil || state != "state-0123456789" {
		t.Fatalf("authorization: %v (state %q)", err, state)
	}
	tok, err := cfg.Exchange(context.Background(), code, oauth2c.VerifierOption(verifier), oauth2c.SetAuthURLParam("resource", resource))
	if err != nil {
		t.Fatalf("exchanging the code: %v", err)
	}
	return tok
}

// Refresh uses tok's refresh token for a new access token.
func (s *Server) Refresh(t testing.TB, tok *oauth2c.Token) *oauth2c.Token {
	t.Helper()
	old := &oauth2c.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Hour)}
	fresh, err := s.config(nil).TokenSource(context.Background(), old).Token()
	if err != nil {
		t.Fatalf("refreshing the token: %v", err)
	}
	return fresh
}

// Close stops the server before the end of the test, as an outage would.
func (s *Server) Close() { s.srv.Close() }

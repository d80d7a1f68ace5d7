package auth

// The tests run a real authorization server (ory/fosite, internal/oauthtest)
// and check tokens it issues, and tokens signed with its key that no
// well-behaved server would issue.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const resource = "https://mcp.example.com/mcp"

// clock is a settable clock for the Authenticator.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newAuth(t *testing.T, opts Options) (*Authenticator, *clock) {
	t.Helper()
	if opts.ResourceURL == "" && opts.Issuer != "" {
		opts.ResourceURL = resource
	}
	a, err := New(context.Background(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.Now()}
	a.now = c.Now
	return a, c
}

func request(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, resource, nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

func TestJWTFromTheIssuer(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}, Scopes: []string{"mcp:tools"}})
	a, _ := newAuth(t, Options{Issuer: as.URL})
	tok := as.ClientCredentials(t, resource, "mcp:tools")
	p, err := a.Authenticate(request(tok))
	if err != nil {
		t.Fatalf("a token of the issuer for this resource: %v", err)
	}
	if p.Subject != oauthtest.ServiceClient || p.ClientID != oauthtest.ServiceClient || p.Issuer != as.URL ||
		!p.HasScopes("mcp:tools") || p.Static || !strings.HasPrefix(string(p.Tag), "oauth:") || p.Expiry.IsZero() {
		t.Errorf("principal %+v", p)
	}
	// A token for another resource of the same issuer is refused.
	other := "https://other.example.com/mcp"
	as2 := oauthtest.New(t, oauthtest.Options{Audience: []string{other}})
	b, _ := newAuth(t, Options{Issuer: as2.URL})
	if _, err := b.Authenticate(request(as2.ClientCredentials(t, other))); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("a token for %s: %v, want ErrInvalidToken", other, err)
	}
	if _, err := a.Authenticate(request("")); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token: %v", err)
	}
}

func TestOpenIDDiscovery(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}, OpenIDOnly: true})
	a, _ := newAuth(t, Options{Issuer: as.URL})
	if _, err := a.Authenticate(request(as.ClientCredentials(t, resource))); err != nil {
		t.Fatal(err)
	}
}

func TestDiscoveryErrors(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	for name, opts := range map[string]Options{
		"no resource":                  {Issuer: as.URL},
		"http issuer":                  {Issuer: "http://auth.example.com", ResourceURL: resource},
		"no metadata":                  {Issuer: as.URL + "/nothing-here", ResourceURL: resource},
		"resource alone":               {ResourceURL: resource},
		"skew too large":               {Issuer: as.URL, ResourceURL: resource, ClockSkew: time.Hour},
		"alg none":                     {Issuer: as.URL, ResourceURL: resource, Algorithms: []string{"none"}},
		"HS256":                        {Issuer: as.URL, ResourceURL: resource, Algorithms: []string{"HS256"}},
		"no introspection credentials": {Issuer: as.URL, ResourceURL: resource, IntrospectionURL: as.URL + "/introspect"},
	} {
		_, err := New(context.Background(), &opts)
		var oe *OptionError
		if !errors.As(err, &oe) || !strings.HasPrefix(oe.Option(), "auth.Options.") {
			t.Errorf("%s: New: %v, want an OptionError", name, err)
			continue
		}
		t.Logf("%s: %s: %v", name, oe.Option(), err)
	}
}

// TestRefusedTokens: every check of a JWT, each against a token that
// differs from an accepted one only in what that check looks at.
func TestRefusedTokens(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	a, _ := newAuth(t, Options{Issuer: as.URL})
	claims := func(change func(map[string]any)) map[string]any {
		c := as.Claims("alice", resource, "mcp:tools")
		if change != nil {
			change(c)
		}
		return c
	}
	good := as.Sign(t, claims(nil))
	if _, err := a.Authenticate(request(good)); err != nil {
		t.Fatalf("the reference token is refused: %v", err)
	}
	now := time.Now()
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := strings.Replace(string(payload), `"alice"`, `"mallory"`, 1)
	b64 := base64.RawURLEncoding.EncodeToString
	for name, tok := range map[string]string{
		"wrong audience":        as.Sign(t, claims(func(c map[string]any) { c["aud"] = []string{"https://other.example.com/mcp"} })),
		"no audience":           as.Sign(t, claims(func(c map[string]any) { delete(c, "aud") })),
		"wrong issuer":          as.Sign(t, claims(func(c map[string]any) { c["iss"] = "https://evil.example.com" })),
		"expired":               as.Sign(t, claims(func(c map[string]any) { c["exp"] = now.Add(-DefaultClockSkew - time.Minute).Unix() })),
		"no exp":                as.Sign(t, claims(func(c map[string]any) { delete(c, "exp") })),
		"not yet valid":         as.Sign(t, claims(func(c map[string]any) { c["nbf"] = now.Add(DefaultClockSkew + time.Minute).Unix() })),
		"no subject or client":  as.Sign(t, claims(func(c map[string]any) { delete(c, "sub"); delete(c, "client_id") })),
		"another key, same kid": oauthtest.SignWith(t, otherKey, as.KeyID(), claims(nil)),
		"another key, no kid":   oauthtest.SignWith(t, otherKey, "", claims(nil)),
		"tampered":              parts[0] + "." + b64([]byte(tampered)) + "." + parts[2],
		"alg none":              b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + ".",
		"alg none, kid":         b64([]byte(`{"alg":"none","kid":"`+as.KeyID()+`"}`)) + "." + parts[1] + ".",
		// The key confusion attack: HMAC keyed with the public key.
		"HS256": b64([]byte(`{"alg":"HS256","kid":"`+as.KeyID()+`"}`)) + "." + parts[1] + "." + parts[2],
		// RFC 9068, section 4: "Resource servers MUST verify that the typ
		// header value is at+jwt or application/at+jwt and reject tokens
		// carrying any other value": an ID token or
		// any other JWT of the issuer is no access token.
		"typ JWT":     as.SignTyped(t, "JWT", claims(nil)),
		"no typ":      as.SignTyped(t, "", claims(nil)),
		"typ id+jwt":  as.SignTyped(t, "id+jwt", claims(nil)),
		"not a JWT":   "opaque-token",
		"garbage JWT": "a.b.c",
	} {
		_, err := a.Authenticate(request(tok))
		if !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalidToken", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
		if strings.Contains(err.Error(), tok) {
			t.Errorf("%s: the error holds the token", name)
		}
	}
	// The algorithms are pinned: an issuer's ES256 token is refused by a
	// bridge that accepts RS256 only.
	rsOnly, _ := newAuth(t, Options{Issuer: as.URL, Algorithms: []string{"RS256"}})
	if _, err := rsOnly.Authenticate(request(good)); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("ES256 with Algorithms RS256: %v, want ErrInvalidToken", err)
	}
	for _, typ := range []string{"at+jwt", "application/at+jwt", "AT+JWT", "Application/At+Jwt"} {
		if _, err := a.Authenticate(request(as.SignTyped(t, typ, claims(nil)))); err != nil {
			t.Errorf("typ %s: %v", typ, err)
		}
	}
	// TokenTypes loosens the check, explicitly.
	jwtToo, _ := newAuth(t, Options{Issuer: as.URL, TokenTypes: []string{"at+jwt", "JWT"}})
	anyType, _ := newAuth(t, Options{Issuer: as.URL, TokenTypes: []string{"*"}})
	for _, c := range []struct {
		a    *Authenticator
		typ  string
		pass bool
	}{{jwtToo, "JWT", true}, {jwtToo, "jwt", true}, {jwtToo, "at+jwt", true}, {jwtToo, "", false}, {jwtToo, "application/at+jwt", false},
		{anyType, "JWT", true}, {anyType, "", true}, {anyType, "id+jwt", true}} {
		if _, err := c.a.Authenticate(request(as.SignTyped(t, c.typ, claims(nil)))); (err == nil) != c.pass {
			t.Errorf("TokenTypes %v, typ %q: %v", c.a.typs, c.typ, err)
		}
	}
	// Within the skew, exp and nbf still pass.
	if _, err := a.Authenticate(request(as.Sign(t, claims(func(c map[string]any) {
		c["exp"] = now.Add(-DefaultClockSkew / 2).Unix()
		c["nbf"] = now.Add(DefaultClockSkew / 2).Unix()
	})))); err != nil {
		t.Errorf("exp and nbf within the skew: %v", err)
	}
}

// TestKeyRotation: a key the issuer starts signing with is fetched on its
// first token, without restart, and at most once per
// KeyRefreshMinInterval whatever key IDs tokens name.
func TestKeyRotation(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	a, clk := newAuth(t, Options{Issuer: as.URL})
	old := as.ClientCredentials(t, resource)
	if _, err := a.Authenticate(request(old)); err != nil {
		t.Fatal(err)
	}
	fetches := as.JWKSFetches.Load()
	// Unknown key IDs do not reach the issuer more than once per interval.
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	clk.Advance(DefaultKeyRefreshMinInterval)
	for i := range 5 {
		forged := oauthtest.SignWith(t, otherKey, "forged-"+string(rune('a'+i)), as.Claims("alice", resource))
		if _, err := a.Authenticate(request(forged)); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("forged kid: %v", err)
		}
	}
	if n := as.JWKSFetches.Load() - fetches; n != 1 {
		t.Fatalf("5 unknown key IDs in one interval made %d JWKS fetches, want 1", n)
	}

	as.Rotate()
	fresh := as.ClientCredentials(t, resource)
	// Within the interval the new key is not fetched yet...
	if _, err := a.Authenticate(request(fresh)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a new key within the rate limit: %v", err)
	}
	// ...after it, it is.
	clk.Advance(DefaultKeyRefreshMinInterval)
	if _, err := a.Authenticate(request(fresh)); err != nil {
		t.Fatalf("a token signed with the rotated key: %v", err)
	}
	// The withdrawn key is no longer accepted.
	if _, err := a.Authenticate(request(old)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token signed with the withdrawn key: %v", err)
	}
}

// TestKeySetExpiry: the JWKS is fetched again once it expired, so a
// withdrawn key stops being accepted even though no token named a new one.
func TestKeySetExpiry(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	a, clk := newAuth(t, Options{Issuer: as.URL})
	tok := as.ClientCredentials(t, resource)
	if _, err := a.Authenticate(request(tok)); err != nil {
		t.Fatal(err)
	}
	fetches := as.JWKSFetches.Load()
	as.Rotate()
	clk.Advance(DefaultKeySetMaxAge - time.Second)
	if _, err := a.Authenticate(request(tok)); err != nil {
		t.Fatalf("before the key set expires: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := a.Authenticate(request(tok)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("after the key set expired, a token of the withdrawn key: %v", err)
	}
	if n := as.JWKSFetches.Load() - fetches; n != 1 {
		t.Errorf("%d JWKS fetches, want 1", n)
	}
}

func TestIntrospection(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource, "https://other.example.com/mcp"}, Opaque: true, Scopes: []string{"mcp:tools"}})
	a, _ := newAuth(t, Options{Issuer: as.URL, IntrospectionURL: as.URL + "/introspect",
		ClientID: oauthtest.ResourceClient, ClientSecret: oauthtest.ResourceSecret})
	tok := as.ClientCredentials(t, resource, "mcp:tools")
	if strings.Count(tok, ".") == 2 {
		t.Fatalf("the issuer issued a JWT, want an opaque token: %s", tok)
	}
	p, err := a.Authenticate(request(tok))
	if err != nil {
		t.Fatalf("an opaque token for this resource: %v", err)
	}
	if p.ClientID != oauthtest.ServiceClient || !p.HasScopes("mcp:tools") || !strings.HasPrefix(string(p.Tag), "oauth:") {
		t.Errorf("principal %+v", p)
	}
	if _, err := a.Authenticate(request(as.ClientCredentials(t, "https://other.example.com/mcp"))); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("an opaque token for another resource: %v", err)
	}
	if _, err := a.Authenticate(request("no-such-token")); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("an unknown opaque token: %v", err)
	}
	// Wrong credentials of the bridge: the token may be good, so not 401.
	b, _ := newAuth(t, Options{Issuer: as.URL, IntrospectionURL: as.URL + "/introspect",
		ClientID: oauthtest.ResourceClient, ClientSecret: "wrong"})
	if _, err := b.Authenticate(request(tok)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("introspection with wrong credentials: %v, want ErrUnavailable", err)
	}
}

func TestScopesAndChallenge(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}, Scopes: []string{"mcp:tools", "mcp:admin"}})
	a, _ := newAuth(t, Options{Issuer: as.URL, Scopes: []string{"mcp:tools"}})
	h := http.Header{}
	_, err := a.Authenticate(request(""))
	a.Challenge(h, err)
	want := `Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"`
	if got := h.Get("WWW-Authenticate"); got != want {
		t.Errorf("no token: WWW-Authenticate %q, want %q", got, want)
	}
	_, err = a.Authenticate(request(as.ClientCredentials(t, resource, "mcp:admin")))
	if !errors.Is(err, ErrInsufficientScope) {
		t.Fatalf("a token without the required scope: %v", err)
	}
	a.Challenge(h, err)
	if got := h.Get("WWW-Authenticate"); !strings.Contains(got, `error="insufficient_scope"`) || !strings.Contains(got, `scope="mcp:tools"`) {
		t.Errorf("insufficient scope: WWW-Authenticate %q", got)
	}
	_, err = a.Authenticate(request("a.b.c"))
	a.Challenge(h, err)
	if got := h.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
		t.Errorf("invalid token: WWW-Authenticate %q", got)
	}
	if _, err := a.Authenticate(request(as.ClientCredentials(t, resource, "mcp:tools", "mcp:admin"))); err != nil {
		t.Errorf("a token with the scope: %v", err)
	}

	a.AdvertiseScopes("mail:send", "mcp:tools")
	rec := httptest.NewRecorder()
	a.ServeMetadata(rec, httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource/mcp", nil))
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Resource != resource || len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != as.URL ||
		strings.Join(meta.ScopesSupported, " ") != "mcp:tools mail:send" {
		t.Errorf("metadata %s", rec.Body)
	}
	if got := strings.Join(a.MetadataPaths(), " "); got != "/.well-known/oauth-protected-resource/mcp /.well-known/oauth-protected-resource" {
		t.Errorf("metadata paths %s", got)
	}
}

func TestStaticTokens(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	for _, issuer := range []string{"", as.URL} {
		a, _ := newAuth(t, Options{Issuer: issuer, StaticTokens: []string{"alpha", " ", "beta"}})
		pa, err := a.Authenticate(request("alpha"))
		if err != nil || !pa.Static || !strings.HasPrefix(string(pa.Tag), "static:") {
			t.Fatalf("static token: %+v %v", pa, err)
		}
		pb, _ := a.Authenticate(request("beta"))
		if pb.Tag == pa.Tag {
			t.Errorf("two static tokens share the tag %s", pa.Tag)
		}
		if _, err := a.Authenticate(request("gamma")); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("issuer %q: an unknown token: %v", issuer, err)
		}
	}
}

// Options.Enabled says what the Authenticator built from them says.
func TestOptionsEnabled(t *testing.T) {
	for _, tokens := range [][]string{nil, {}, {" ", ""}, {"a-token"}, {" ", "b"}} {
		opts := Options{StaticTokens: tokens}
		a, err := New(context.Background(), &opts)
		if err != nil {
			t.Fatal(err)
		}
		if opts.Enabled() != a.Enabled() {
			t.Errorf("tokens %q: Options.Enabled %v, Authenticator.Enabled %v", tokens, opts.Enabled(), a.Enabled())
		}
	}
	if !(&Options{Issuer: "https://issuer.example"}).Enabled() {
		t.Error("options with an issuer are not Enabled")
	}
}

// TestSlowJWKSFetchBlocksNoValidToken: while a token
// naming an unknown key makes the bridge fetch the JWKS again, and the
// issuer is slow to answer, a token signed with a key held is checked at
// once; the unknown key's check waits for the fetch.
func TestSlowJWKSFetchBlocksNoValidToken(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	a, clk := newAuth(t, Options{Issuer: as.URL})
	valid := as.ClientCredentials(t, resource)
	if _, err := a.Authenticate(request(valid)); err != nil {
		t.Fatal(err)
	}
	hold := as.HoldJWKS(t)
	clk.Advance(DefaultKeyRefreshMinInterval)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged := oauthtest.SignWith(t, otherKey, "unknown-kid", as.Claims("alice", resource))
	forgedErr := make(chan error, 1)
	go func() {
		_, err := a.Authenticate(request(forged))
		forgedErr <- err
	}()
	<-hold.Entered // the refetch is under way, and the issuer does not answer

	validErr := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := a.Authenticate(request(valid))
		validErr <- err
	}()
	select {
	case err := <-validErr:
		if err != nil {
			t.Fatalf("a valid token during the refetch: %v", err)
		}
		t.Logf("a valid token was checked in %v while the JWKS fetch was held", time.Since(start))
	case <-hold.Abandoned:
		t.Fatalf("a valid token's check waited for the JWKS fetch (%v, until the HTTP client gave up)", time.Since(start))
	}
	select {
	case err := <-forgedErr:
		t.Fatalf("the unknown key's check returned before the fetch ended: %v", err)
	default:
	}
	hold.Release()
	if err := <-forgedErr; !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("unknown key after the fetch: %v", err)
	}
}

// TestKeySetRefreshedAhead: near its expiry the JWKS is fetched again in
// the background, and checks of held keys go on meanwhile.
func TestKeySetRefreshedAhead(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	a, clk := newAuth(t, Options{Issuer: as.URL})
	valid := as.ClientCredentials(t, resource)
	hold := as.HoldJWKS(t)
	clk.Advance(DefaultKeySetMaxAge - DefaultKeySetMaxAge/20)
	for range 3 {
		if _, err := a.Authenticate(request(valid)); err != nil {
			t.Fatalf("a valid token while the key set is refreshed: %v", err)
		}
	}
	<-hold.Entered
	hold.Release()
}

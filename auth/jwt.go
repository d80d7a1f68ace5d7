package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// maxJWKSBytes bounds a JWKS response.
const maxJWKSBytes = 1 << 20

// keyCache holds the issuer's JWKS. Fetches happen on demand, one at a
// time, outside mu: a check whose key is held never waits for a fetch
// (a refetch for an unknown key ID, up to the HTTP timeout, held
// every token check). Checks that need the fetch (no key set yet, the set
// expired, an unknown key ID) wait for the one in flight, bounded by their
// context; a fetch is bounded by the HTTP client's timeout and
// DefaultHTTPTimeout.
type keyCache struct {
	a *Authenticator

	mu        sync.Mutex
	jwksURI   string
	set       jwk.Set
	fetched   time.Time // of the last attempt, successful or not
	expires   time.Time
	refreshAt time.Time // when a fetch starts ahead of expiry, in the background
	refreshes int       // successful fetches, for tests and logs
	inflight  *keyFetch // the fetch under way, nil if none
}

// A keyFetch is one JWKS fetch; done is closed by the goroutine that makes
// it, once the cache holds its outcome.
type keyFetch struct {
	done chan struct{}
	err  error // set before done is closed
}

// discover reads the issuer's metadata and fetches its JWKS.
func (c *keyCache) discover(ctx context.Context) error {
	o := &c.a.opts
	// RFC 8414 first, then OpenID discovery, with and without path
	// insertion, as the MCP authorization spec orders them; the SDK checks
	// that the metadata names the same issuer (RFC 8414 §3.3).
	meta, err := sdkauth.GetAuthServerMetadata(ctx, o.Issuer, c.a.client)
	if err != nil || meta == nil {
		// An issuer is compared byte for byte (RFC 8414 §3.3, and with
		// each token's iss): one typed with a trailing slash that its
		// server does not use (or without one it does) finds no metadata,
		// or one naming another issuer, or a redirect. Say which to give
		// (a trailing slash got a confusing redirect message).
		alt := strings.TrimSuffix(o.Issuer, "/")
		if alt == o.Issuer {
			alt += "/"
		}
		if m, aerr := sdkauth.GetAuthServerMetadata(ctx, alt, c.a.client); aerr == nil && m != nil && m.Issuer == alt {
			how := "without the trailing slash"
			if strings.HasSuffix(alt, "/") {
				how = "with a trailing slash"
			}
			return optionErr("Issuer", "%s: the authorization server's issuer is %s (%s); give it exactly, as its tokens carry it in iss", o.Issuer, alt, how)
		}
	}
	if err != nil {
		return optionErr("Issuer", "reading the metadata of issuer %s: %w", o.Issuer, err)
	}
	if meta == nil {
		return optionErr("Issuer", "issuer %s: no metadata at its /.well-known/oauth-authorization-server nor /.well-known/openid-configuration; check the URL", o.Issuer)
	}
	if meta.JWKSURI == "" && o.IntrospectionURL == "" {
		return optionErr("IntrospectionURL", "issuer %s names no jwks_uri in its metadata, so its tokens can only be introspected: an introspection URL is needed", o.Issuer)
	}
	c.jwksURI = meta.JWKSURI
	if c.jwksURI == "" {
		return nil
	}
	c.mu.Lock()
	c.fetched = c.a.now()
	c.mu.Unlock()
	set, age, err := c.fetch(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.storeLocked(set, age)
	c.mu.Unlock()
	return nil
}

// startFetchLocked starts a fetch, or returns the one under way. The fetch
// does not depend on the context of the request that caused it: others may
// be waiting for it. Its goroutine ends within DefaultHTTPTimeout (or the
// HTTP client's shorter timeout).
func (c *keyCache) startFetchLocked() *keyFetch {
	if f := c.inflight; f != nil {
		return f
	}
	f := &keyFetch{done: make(chan struct{})}
	c.inflight = f
	c.fetched = c.a.now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultHTTPTimeout)
		defer cancel()
		set, age, err := c.fetch(ctx)
		c.mu.Lock()
		if err == nil {
			c.storeLocked(set, age)
		}
		f.err = err
		c.inflight = nil
		c.mu.Unlock()
		close(f.done)
	}()
	return f
}

// wait waits for f, or for ctx to end.
func (f *keyFetch) wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the issuer's JWKS: %w", context.Cause(ctx))
	}
}

// storeLocked makes set the key set, used for age.
func (c *keyCache) storeLocked(set jwk.Set, age time.Duration) {
	now := c.a.now()
	c.set = set
	c.expires = now.Add(age)
	// Fetch again ahead of expiry, in the background, so that checks of
	// held keys never wait for the scheduled refresh either.
	c.refreshAt = now.Add(age - age/10)
	c.refreshes++
	c.a.logger.Debug("fetched the issuer's JWKS", "url", c.jwksURI, "keys", set.Len(), "until", c.expires)
}

// fetch fetches the JWKS and says how long it may be used.
func (c *keyCache) fetch(ctx context.Context) (jwk.Set, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.jwksURI, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("JWKS %s: %w", c.jwksURI, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.a.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetching the issuer's JWKS %s: %w", c.jwksURI, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("fetching the issuer's JWKS %s: %w", c.jwksURI, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("fetching the issuer's JWKS %s: %s", c.jwksURI, resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, 0, fmt.Errorf("the issuer's JWKS %s is over %d bytes", c.jwksURI, maxJWKSBytes)
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return nil, 0, fmt.Errorf("the issuer's JWKS %s: %w", c.jwksURI, err)
	}
	return set, c.maxAge(resp.Header.Get("Cache-Control")), nil
}

// maxAge is how long a JWKS response may be used.
func (c *keyCache) maxAge(cacheControl string) time.Duration {
	o := &c.a.opts
	d := o.KeySetMaxAge
	for part := range strings.SplitSeq(cacheControl, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		if strings.EqualFold(k, "max-age") {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				d = time.Duration(n) * time.Second
			}
		}
	}
	return min(max(d, o.KeyRefreshMinInterval), MaxKeySetMaxAge)
}

// key returns the key named kid (any key of the set when kid is empty and
// the set holds one), fetching the JWKS again when it expired, or when kid
// is unknown and the last fetch is older than KeyRefreshMinInterval. Only
// the checks that need the fetch wait for it.
func (c *keyCache) key(ctx context.Context, kid string) (jwk.Key, error) {
	c.mu.Lock()
	if c.jwksURI == "" {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: the issuer publishes no JWKS; its tokens are introspected, not JWTs", ErrInvalidToken)
	}
	now := c.a.now()
	canFetch := c.inflight != nil || now.Sub(c.fetched) >= c.a.opts.KeyRefreshMinInterval
	if c.set == nil || (!now.Before(c.expires) && canFetch) {
		// No keys, or keys past their age that must not be used while the
		// issuer may have withdrawn them: wait for the fetch.
		f := c.startFetchLocked()
		c.mu.Unlock()
		err := f.wait(ctx)
		c.mu.Lock()
		if err != nil {
			if c.set == nil {
				c.mu.Unlock()
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			// The keys held stay in use until the issuer answers again.
			c.a.logger.Warn("could not refresh the issuer's JWKS; using the keys fetched before", "err", err)
		}
	} else if !now.Before(c.refreshAt) && canFetch {
		c.startFetchLocked()
	}
	if k, ok := c.lookup(kid); ok {
		c.mu.Unlock()
		return k, nil
	}
	// An unknown key: the issuer may have rotated its keys. Rate-limited,
	// since anyone can send a token naming any kid; a fetch under way
	// (whatever started it) is waited for.
	if c.inflight == nil && now.Sub(c.fetched) < c.a.opts.KeyRefreshMinInterval {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: signed with unknown key %q", ErrInvalidToken, kid)
	}
	f := c.startFetchLocked()
	c.mu.Unlock()
	if err := f.wait(ctx); err != nil {
		c.a.logger.Warn("could not refresh the issuer's JWKS for an unknown key", "kid", kid, "err", err)
		return nil, fmt.Errorf("%w: signed with unknown key %q", ErrInvalidToken, kid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.lookup(kid); ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w: signed with unknown key %q", ErrInvalidToken, kid)
}

func (c *keyCache) lookup(kid string) (jwk.Key, bool) {
	if kid != "" {
		return c.set.LookupKeyID(kid)
	}
	if c.set.Len() == 1 {
		return c.set.Key(0)
	}
	return nil, false
}

// verifyJWT checks a JWT access token and returns its principal.
func (a *Authenticator) verifyJWT(ctx context.Context, tok string) (*Principal, error) {
	msg, err := jws.ParseString(tok)
	if err != nil {
		// The library's words (base64 offsets, "jws.Parse: failed to
		// parse compact format") help no one.
		return nil, fmt.Errorf("%w: the token looks like a JWT but is not one (want three base64url parts: header.claims.signature)", ErrInvalidToken)
	}
	sigs := msg.Signatures()
	if len(sigs) != 1 {
		return nil, fmt.Errorf("%w: want one signature", ErrInvalidToken)
	}
	hdr := sigs[0].ProtectedHeaders()
	alg, _ := hdr.Algorithm()
	// The algorithm is pinned: never "none", never HMAC (with a public key
	// as its secret), only those configured.
	if !slices.Contains(a.algs, alg.String()) {
		return nil, fmt.Errorf("%w: JWS algorithm %q is not accepted", ErrInvalidToken, alg.String())
	}
	// "Resource servers MUST verify that the typ header value is at+jwt
	// or application/at+jwt and reject tokens carrying any other value"
	// (RFC 9068, section 4): an ID token, or another JWT the issuer
	// signs, is no access token. Media types compare
	// without case.
	if typ, _ := hdr.Type(); a.typs != nil && !slices.ContainsFunc(a.typs, func(t string) bool { return strings.EqualFold(t, typ) }) {
		return nil, fmt.Errorf("%w: the JWT's typ is %q, not %s: not an access token (RFC 9068; --oauth-token-types accepts others)",
			ErrInvalidToken, typ, strings.Join(a.typs, " or "))
	}
	kid, _ := hdr.KeyID()
	key, err := a.keys.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	if ka, ok := key.Algorithm(); ok && ka.String() != alg.String() {
		return nil, fmt.Errorf("%w: key %q is for %s, the token says %s", ErrInvalidToken, kid, ka, alg)
	}
	if use, ok := key.KeyUsage(); ok && use != string(jwk.ForSignature) {
		return nil, fmt.Errorf("%w: key %q is not a signing key", ErrInvalidToken, kid)
	}
	sigAlg, ok := jwa.LookupSignatureAlgorithm(alg.String())
	if !ok {
		return nil, fmt.Errorf("%w: JWS algorithm %q is not accepted", ErrInvalidToken, alg.String())
	}
	t, err := jwt.ParseString(tok,
		jwt.WithKey(sigAlg, key),
		jwt.WithValidate(true),
		jwt.WithIssuer(a.opts.Issuer),
		// RFC 8707 and the MCP spec: "MCP servers MUST validate that
		// access tokens were issued specifically for them as the intended
		// audience".
		jwt.WithAudience(a.opts.ResourceURL),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithAcceptableSkew(a.opts.ClockSkew),
		jwt.WithClock(jwt.ClockFunc(a.now)),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidToken, a.explainJWT(tok, kid, err))
	}
	p := &Principal{}
	p.Issuer, _ = t.Issuer()
	p.Subject, _ = t.Subject()
	p.Expiry, _ = t.Expiration()
	p.ClientID = stringClaim(t, "client_id")
	if p.ClientID == "" {
		p.ClientID = stringClaim(t, "azp")
	}
	p.Scopes = scopeClaim(t)
	if p.Subject == "" && p.ClientID == "" {
		return nil, fmt.Errorf("%w: the token names neither a subject nor a client", ErrInvalidToken)
	}
	return oauthPrincipal(p), nil
}

func stringClaim(t jwt.Token, name string) string {
	var s string
	if err := t.Get(name, &s); err != nil {
		return ""
	}
	return s
}

// scopeClaim reads scope (RFC 9068: a space-separated string), else scp (a
// list, or a string, as some issuers send it).
func scopeClaim(t jwt.Token) []string {
	if s := stringClaim(t, "scope"); s != "" {
		return strings.Fields(s)
	}
	var list []any
	if err := t.Get("scp", &list); err == nil {
		var out []string
		for _, v := range list {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return strings.Fields(stringClaim(t, "scp"))
}

// explainJWT says in plain words why jwt.ParseString refused tok: what was
// expected (the issuer, the resource URL, the time) and what the token
// holds. The library's own text ("jwt.ParseString: failed to parse
// string: jwt.Validate: validation failed: "aud" not satisfied") tells a
// client nothing it can act on. The claims quoted are read
// again without verification, only to be quoted, and only once the
// signature has verified (the claims are checked after it), except for a
// signature error, which quotes none.
func (a *Authenticator) explainJWT(tok, kid string, err error) string {
	if errors.Is(err, jws.VerifyError()) || errors.Is(err, jws.VerificationError()) {
		if kid == "" {
			return "its signature does not verify with the issuer's key (the token names none: kid)"
		}
		return fmt.Sprintf("its signature does not verify with the issuer's key %q", kid)
	}
	t, perr := jwt.ParseInsecure([]byte(tok))
	claim := func(name string) string {
		if perr != nil {
			return "(unreadable)"
		}
		var v any
		if t.Get(name, &v) != nil {
			return "none"
		}
		b, _ := json.Marshal(v)
		return quoteBounded(string(b))
	}
	at := func(name string) string {
		if perr != nil {
			return "(unreadable)"
		}
		var v any
		if t.Get(name, &v) != nil {
			return "none"
		}
		if ts, ok := v.(time.Time); ok {
			return ts.UTC().Format(time.RFC3339)
		}
		b, _ := json.Marshal(v)
		return quoteBounded(string(b))
	}
	now := a.now().UTC().Format(time.RFC3339)
	switch {
	case errors.Is(err, jwt.InvalidAudienceError()):
		came := "is for the audience " + claim("aud") + ", not for this server"
		if claim("aud") == "none" {
			came = "names no audience"
		}
		return fmt.Sprintf("the token %s: this server's resource URL (--resource-url) is %s, which its audience (aud) must hold; a client asks the authorization server for a token with resource=%s (RFC 8707)",
			came, a.opts.ResourceURL, a.opts.ResourceURL)
	case errors.Is(err, jwt.InvalidIssuerError()):
		return fmt.Sprintf("the token was issued by %s, not by the issuer this server trusts (--oauth-issuer) %s", claim("iss"), a.opts.Issuer)
	case errors.Is(err, jwt.TokenExpiredError()):
		return fmt.Sprintf("the token expired at %s (now %s, with %s of clock skew allowed)", at("exp"), now, a.opts.ClockSkew)
	case errors.Is(err, jwt.TokenNotYetValidError()):
		return fmt.Sprintf("the token is not valid before %s (now %s, with %s of clock skew allowed)", at("nbf"), now, a.opts.ClockSkew)
	case errors.Is(err, jwt.InvalidIssuedAtError()):
		return fmt.Sprintf("the token says it was issued at %s, in the future (now %s)", at("iat"), now)
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		return "the token has no expiry (exp), which this server requires"
	}
	return "its claims are not valid"
}

// quoteBounded bounds a claim quoted in an error: a token's claims are the
// client's, any length.
func quoteBounded(s string) string {
	const max = 200
	if len(s) > max {
		return strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}

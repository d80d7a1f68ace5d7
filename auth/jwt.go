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

// keyCache holds the issuer's JWKS. Fetches happen on demand, under mu,
// so that concurrent requests wait for one fetch instead of each making
// their own; a fetch is bounded by the HTTP client's timeout.
type keyCache struct {
	a *Authenticator

	mu        sync.Mutex
	jwksURI   string
	set       jwk.Set
	fetched   time.Time // of the last attempt, successful or not
	expires   time.Time
	refreshes int // successful fetches, for tests and logs
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
		// (issue 26: a trailing slash got a confusing redirect message).
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
	defer c.mu.Unlock()
	return c.fetchLocked(ctx)
}

// fetchLocked fetches the JWKS. On failure the keys held so far stay.
func (c *keyCache) fetchLocked(ctx context.Context) error {
	now := c.a.now()
	c.fetched = now
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.jwksURI, nil)
	if err != nil {
		return fmt.Errorf("JWKS %s: %w", c.jwksURI, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.a.client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the issuer's JWKS %s: %w", c.jwksURI, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("fetching the issuer's JWKS %s: %w", c.jwksURI, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the issuer's JWKS %s: %s", c.jwksURI, resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return fmt.Errorf("the issuer's JWKS %s is over %d bytes", c.jwksURI, maxJWKSBytes)
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return fmt.Errorf("the issuer's JWKS %s: %w", c.jwksURI, err)
	}
	c.set = set
	c.expires = now.Add(c.maxAge(resp.Header.Get("Cache-Control")))
	c.refreshes++
	c.a.logger.Debug("fetched the issuer's JWKS", "url", c.jwksURI, "keys", set.Len(), "until", c.expires)
	return nil
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
// is unknown and the last fetch is older than KeyRefreshMinInterval.
func (c *keyCache) key(ctx context.Context, kid string) (jwk.Key, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jwksURI == "" {
		return nil, fmt.Errorf("%w: the issuer publishes no JWKS; its tokens are introspected, not JWTs", ErrInvalidToken)
	}
	now := c.a.now()
	if c.set == nil || !now.Before(c.expires) {
		if now.Sub(c.fetched) >= c.a.opts.KeyRefreshMinInterval || c.set == nil {
			if err := c.fetchLocked(ctx); err != nil {
				if c.set == nil {
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				// The keys held stay in use until the issuer answers again.
				c.a.logger.Warn("could not refresh the issuer's JWKS; using the keys fetched before", "err", err)
			}
		}
	}
	if k, ok := c.lookup(kid); ok {
		return k, nil
	}
	// An unknown key: the issuer may have rotated its keys. Rate-limited,
	// since anyone can send a token naming any kid.
	if now.Sub(c.fetched) < c.a.opts.KeyRefreshMinInterval {
		return nil, fmt.Errorf("%w: signed with unknown key %q", ErrInvalidToken, kid)
	}
	if err := c.fetchLocked(ctx); err != nil {
		c.a.logger.Warn("could not refresh the issuer's JWKS for an unknown key", "kid", kid, "err", err)
		return nil, fmt.Errorf("%w: signed with unknown key %q", ErrInvalidToken, kid)
	}
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
	// signs, is no access token (issue 25, item 10). Media types compare
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
// client nothing it can act on (issue 26). The claims quoted are read
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

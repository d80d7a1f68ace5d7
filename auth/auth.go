// Package auth establishes who sends a request to the bridge: static bearer
// tokens, and an OAuth 2.1 resource server as the MCP authorization spec
// (revisions 2025-06-18 and 2025-11-25) describes it.
//
// It knows HTTP headers (Authorization, WWW-Authenticate) but nothing of
// MCP: package bridge calls Authenticate on each request, answers the errors
// with the status they name, and attaches the resulting Principal to the
// request's context, where whatever decides what a principal may do (tool
// policy, audit) finds it with FromContext.
//
// Access tokens are checked locally when they are JWTs (RFC 9068): the
// signature against the issuer's JWKS, with the algorithms pinned, then iss,
// aud (the resource's canonical URI, RFC 8707), exp and nbf within a bounded
// clock skew. Other tokens are sent to the issuer's introspection endpoint
// (RFC 7662) when one is configured. The issuer's metadata (RFC 8414, or
// OpenID discovery) names the JWKS; the key set is cached, fetched again when
// it expires, and when a token names a key it does not hold (the issuer
// rotated its keys), at most once per KeyRefreshMinInterval so that forged
// key IDs cannot make the bridge hammer the issuer.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Defaults of Options.
const (
	// DefaultClockSkew is how far a token's exp and nbf may be off the
	// bridge's clock.
	DefaultClockSkew = 30 * time.Second
	// MaxClockSkew is the largest ClockSkew accepted: a larger one would
	// keep expired tokens alive.
	MaxClockSkew = 5 * time.Minute
	// DefaultKeyRefreshMinInterval is the least time between two fetches of
	// the JWKS caused by tokens naming unknown keys.
	DefaultKeyRefreshMinInterval = 30 * time.Second
	// DefaultKeySetMaxAge is how long a fetched JWKS is used when its
	// response does not say (Cache-Control max-age). A max-age is bounded
	// by KeyRefreshMinInterval below and MaxKeySetMaxAge above.
	DefaultKeySetMaxAge = time.Hour
	// MaxKeySetMaxAge bounds how long a JWKS is used before it is fetched
	// again, whatever its response says: a key the issuer withdrew must stop
	// being accepted.
	MaxKeySetMaxAge = 24 * time.Hour
	// DefaultHTTPTimeout bounds each request to the authorization server
	// (metadata, JWKS, introspection).
	DefaultHTTPTimeout = 10 * time.Second
)

// DefaultAlgorithms are the JWS algorithms accepted for access tokens when
// Options.Algorithms is empty: asymmetric ones only (a symmetric key would
// have to be shared with the bridge), never "none".
var DefaultAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// DefaultTokenTypes are the JWS typ values of the JWT access tokens
// accepted: "Resource servers MUST verify that the typ header value is
// at+jwt or application/at+jwt and reject tokens carrying any other
// value" (RFC 9068, section 4).
var DefaultTokenTypes = []string{"at+jwt", "application/at+jwt"}

// Options configure an Authenticator. Every zero value means the documented
// default; with neither StaticTokens nor Issuer, nothing is authenticated.
type Options struct {
	// StaticTokens are bearer tokens accepted as they are (operator-issued,
	// from --auth-token-file or BRIDGE_AUTH_TOKENS). Empty ones are ignored.
	StaticTokens []string

	// Issuer, when set, makes the bridge an OAuth 2.1 resource server for
	// this authorization server: its metadata is discovered (RFC 8414, then
	// OpenID discovery) when the Authenticator is created, and only tokens
	// it issued for ResourceURL are accepted.
	Issuer string
	// ResourceURL is the canonical URI of the MCP endpoint (RFC 8707), as
	// clients reach it, e.g. https://mcp.example.com/mcp: the audience every
	// token must carry, and the resource of the protected resource metadata
	// (RFC 9728). Required with Issuer.
	ResourceURL string
	// Scopes are required of every OAuth token, and advertised in the
	// protected resource metadata and in 401 challenges. Empty requires none.
	Scopes []string
	// Algorithms are the JWS algorithms accepted. Empty means
	// DefaultAlgorithms; "none" and HMAC algorithms are refused.
	Algorithms []string
	// TokenTypes are the JWS typ values of JWT access tokens accepted,
	// compared without case. Empty means DefaultTokenTypes. "*" accepts
	// any, none included: for an issuer that writes typ JWT into its
	// access tokens; it also lets any other JWT of the issuer (an ID
	// token) pass as an access token if its claims do.
	TokenTypes []string
	// ClockSkew is the tolerance on exp and nbf. Zero means
	// DefaultClockSkew; above MaxClockSkew is an error.
	ClockSkew time.Duration
	// KeyRefreshMinInterval is the least time between two JWKS fetches
	// caused by unknown key IDs. Zero means DefaultKeyRefreshMinInterval.
	KeyRefreshMinInterval time.Duration
	// KeySetMaxAge is how long a JWKS is used when its response does not
	// say. Zero means DefaultKeySetMaxAge.
	KeySetMaxAge time.Duration

	// IntrospectionURL, when set, is the issuer's RFC 7662 endpoint: tokens
	// that are not JWTs are introspected there, authenticated with
	// ClientID and ClientSecret (HTTP Basic). Empty: such tokens are refused.
	IntrospectionURL string
	// ClientID and ClientSecret are the bridge's credentials at the
	// introspection endpoint.
	ClientID     string
	ClientSecret string

	// HTTPClient makes the requests to the authorization server. Nil means
	// a client with DefaultHTTPTimeout.
	HTTPClient *http.Client
	// Logger receives the authenticator's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Errors of Authenticate; package bridge maps them to HTTP statuses.
var (
	// ErrNoToken: the request carries no bearer token (401, no error code).
	ErrNoToken = errors.New("no bearer token")
	// ErrInvalidToken: the token is not accepted (401, invalid_token).
	ErrInvalidToken = errors.New("invalid token")
	// ErrInsufficientScope: the token lacks a required scope (403,
	// insufficient_scope). Errors of this kind are a *ScopeError.
	ErrInsufficientScope = errors.New("insufficient scope")
	// ErrUnavailable: the authorization server could not be reached to
	// check the token (503): the token may well be valid.
	ErrUnavailable = errors.New("authorization server unavailable")
)

// An OptionError says which field of Options is wrong. Its message names
// no flag: Option names the field, so that the command can name its flag.
type OptionError struct {
	Field string // the field of Options, e.g. "Issuer"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct, e.g.
// "auth.Options.Issuer".
func (e *OptionError) Option() string { return "auth.Options." + e.Field }

func optionErr(field, format string, args ...any) error {
	return &OptionError{Field: field, Err: fmt.Errorf(format, args...)}
}

// A ScopeError says which scopes a request needs. It matches
// ErrInsufficientScope with errors.Is.
type ScopeError struct {
	// Required are the scopes the request needs (all of them, not only the
	// missing ones, so that a client asking for them again keeps the rest).
	Required []string
	// Missing are those the token lacks.
	Missing []string
}

func (e *ScopeError) Error() string {
	return "insufficient scope: the token lacks " + strings.Join(e.Missing, " ")
}

func (e *ScopeError) Is(target error) bool { return target == ErrInsufficientScope }

// An Authenticator checks bearer tokens. Its methods are safe for
// concurrent use.
type Authenticator struct {
	opts    Options
	logger  *slog.Logger
	client  *http.Client
	static  [][]byte
	algs    []string
	typs    []string // TokenTypes; nil accepts any
	metaURL string   // resource metadata URL, path form

	// now is the clock; tests replace it.
	now func() time.Time

	keys keyCache

	mu          sync.Mutex
	extraScopes []string // advertised besides opts.Scopes (AdvertiseScopes)
}

// New returns an Authenticator. With an Issuer it discovers the issuer's
// metadata and fetches its JWKS, so a misconfiguration shows at start-up.
func New(ctx context.Context, opts *Options) (*Authenticator, error) {
	a := &Authenticator{now: time.Now}
	if opts != nil {
		a.opts = *opts
	}
	o := &a.opts
	a.logger = o.Logger
	if a.logger == nil {
		a.logger = slog.Default()
	}
	for _, t := range o.StaticTokens {
		if t = strings.TrimSpace(t); t != "" {
			a.static = append(a.static, []byte(t))
		}
	}
	if o.Issuer == "" {
		// The options of OAuth alone mean nothing without an issuer: one
		// given alone is a mistake, not something to ignore.
		switch {
		case o.ResourceURL != "" || o.IntrospectionURL != "":
			return nil, optionErr("Issuer", "a resource URL or an introspection URL needs the issuer of the tokens")
		case len(o.Scopes) > 0:
			return nil, optionErr("Scopes", "the scopes OAuth tokens must carry need the issuer of the tokens")
		case len(o.TokenTypes) > 0:
			return nil, optionErr("TokenTypes", "the types of OAuth tokens accepted need the issuer of the tokens")
		}
	}
	if o.IntrospectionURL == "" && (o.ClientID != "" || o.ClientSecret != "") {
		return nil, optionErr("ClientID", "the client ID and secret are the bridge's at the introspection endpoint: they need an introspection URL (and its issuer)")
	}
	if o.Issuer == "" {
		return a, nil
	}
	if err := a.checkOAuthOptions(); err != nil {
		return nil, err
	}
	a.client = o.HTTPClient
	if a.client == nil {
		a.client = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	a.keys.a = a
	if err := a.keys.discover(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Authenticator) checkOAuthOptions() error {
	o := &a.opts
	iss, err := url.Parse(o.Issuer)
	if err != nil || iss.Host == "" || (iss.Scheme != "https" && !isLoopbackURL(iss)) {
		return optionErr("Issuer", "%q: want an https URL (http only on loopback)", o.Issuer)
	}
	if o.ResourceURL == "" {
		return optionErr("ResourceURL", "an issuer needs the resource URL: the canonical URL clients reach this endpoint at (the audience of their tokens)")
	}
	res, err := url.Parse(o.ResourceURL)
	// RFC 8707 §2: an absolute URI without fragment, and it SHOULD NOT
	// have a query. Braces would be wildcards in the metadata's route.
	if err != nil || res.Host == "" || res.Fragment != "" || res.RawQuery != "" || strings.ContainsAny(res.Path, "{}") ||
		(res.Scheme != "https" && !isLoopbackURL(res)) {
		return optionErr("ResourceURL", "%q: want an absolute https URL without query or fragment (http only on loopback)", o.ResourceURL)
	}
	for _, s := range o.Scopes {
		if s == "" || strings.ContainsAny(s, "\"\\ \t") {
			return optionErr("Scopes", "invalid scope %q", s)
		}
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.ClockSkew < 0 || o.ClockSkew > MaxClockSkew {
		return optionErr("ClockSkew", "%v: want 0 to %v", o.ClockSkew, MaxClockSkew)
	}
	if o.KeyRefreshMinInterval <= 0 {
		o.KeyRefreshMinInterval = DefaultKeyRefreshMinInterval
	}
	if o.KeySetMaxAge <= 0 {
		o.KeySetMaxAge = DefaultKeySetMaxAge
	}
	a.typs = o.TokenTypes
	if len(a.typs) == 0 {
		a.typs = DefaultTokenTypes
	}
	if slices.Contains(a.typs, "*") {
		a.typs = nil
	}
	a.algs = o.Algorithms
	if len(a.algs) == 0 {
		a.algs = DefaultAlgorithms
	}
	for _, alg := range a.algs {
		if !slices.Contains(DefaultAlgorithms, alg) {
			return optionErr("Algorithms", "JWS algorithm %q is not accepted: want some of %s", alg, strings.Join(DefaultAlgorithms, ", "))
		}
	}
	if o.IntrospectionURL != "" {
		u, err := url.Parse(o.IntrospectionURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && !isLoopbackURL(u)) {
			return optionErr("IntrospectionURL", "%q: want an https URL (http only on loopback)", o.IntrospectionURL)
		}
		if o.ClientID == "" || o.ClientSecret == "" {
			return optionErr("IntrospectionURL", "introspection needs the bridge's client ID and secret at the issuer")
		}
	}
	// RFC 9728 §3.1: the metadata URL inserts the well-known segment
	// between the host and the resource's path.
	a.metaURL = res.Scheme + "://" + res.Host + WellKnownPath + strings.TrimSuffix(res.EscapedPath(), "/")
	return nil
}

func isLoopbackURL(u *url.URL) bool {
	switch strings.ToLower(u.Hostname()) {
	case "localhost", "127.0.0.1", "::1":
		return u.Scheme == "http"
	}
	return false
}

// Enabled reports whether requests must be authenticated at all.
func (a *Authenticator) Enabled() bool { return a != nil && (len(a.static) > 0 || a.OAuth()) }

// Enabled reports whether an Authenticator of these options would be
// Enabled: it has a static token (not blank) or an issuer.
func (o *Options) Enabled() bool {
	return o.Issuer != "" || slices.ContainsFunc(o.StaticTokens, func(t string) bool { return strings.TrimSpace(t) != "" })
}

// OAuth reports whether the bridge is an OAuth resource server.
func (a *Authenticator) OAuth() bool { return a != nil && a.opts.Issuer != "" }

// Authenticate returns the principal of a request's bearer token. Its
// errors match ErrNoToken, ErrInvalidToken, ErrInsufficientScope or
// ErrUnavailable, and their text names no token.
func (a *Authenticator) Authenticate(r *http.Request) (*Principal, error) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, ErrNoToken
	}
	if len(a.static) > 0 {
		good := 0
		for _, t := range a.static {
			good |= subtle.ConstantTimeCompare([]byte(tok), t)
		}
		if good == 1 {
			sum := sha256.Sum256([]byte(tok))
			return &Principal{Static: true, Tag: Tag("static:" + hex.EncodeToString(sum[:8]))}, nil
		}
	}
	if !a.OAuth() {
		return nil, fmt.Errorf("%w: not one of the configured tokens", ErrInvalidToken)
	}
	var p *Principal
	var err error
	if strings.Count(tok, ".") == 2 {
		p, err = a.verifyJWT(r.Context(), tok)
	} else if a.opts.IntrospectionURL != "" {
		p, err = a.introspect(r.Context(), tok)
	} else {
		err = fmt.Errorf("%w: not a JWT, and this server introspects no opaque tokens", ErrInvalidToken)
	}
	if err != nil {
		return nil, err
	}
	if missing := p.Missing(a.opts.Scopes); len(missing) > 0 {
		return p, &ScopeError{Required: a.opts.Scopes, Missing: missing}
	}
	return p, nil
}

// oauthPrincipal completes a principal with its tag.
func oauthPrincipal(p *Principal) *Principal {
	// NUL cannot occur in the URLs and identifiers digested, so the
	// fields cannot shift into each other.
	sum := sha256.Sum256([]byte(p.Issuer + "\x00" + p.Subject + "\x00" + p.ClientID))
	p.Tag = Tag("oauth:" + hex.EncodeToString(sum[:12]))
	return p
}

// Challenge sets the WWW-Authenticate header answering err, an error of
// Authenticate or a *ScopeError of a later check (RFC 6750 §3; MCP
// authorization: "MCP servers MUST use the HTTP header WWW-Authenticate when
// returning a 401 Unauthorized to indicate the location of the resource
// server metadata URL").
func (a *Authenticator) Challenge(h http.Header, err error) {
	if !a.OAuth() {
		v := `Bearer realm="mcp-bridge"`
		if errors.Is(err, ErrInvalidToken) {
			v += `, error="invalid_token"`
		}
		h.Set("WWW-Authenticate", v)
		return
	}
	params := []string{`resource_metadata="` + a.metaURL + `"`}
	scopes := a.opts.Scopes
	var se *ScopeError
	switch {
	case errors.As(err, &se):
		// "scope: The scopes required for this request" (step-up
		// authorization, 2025-11-25).
		params = append(params, `error="insufficient_scope"`)
		scopes = se.Required
	case errors.Is(err, ErrInvalidToken):
		params = append(params, `error="invalid_token"`)
	}
	if len(scopes) > 0 {
		params = append(params, `scope="`+strings.Join(scopes, " ")+`"`)
	}
	h.Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
}

// AdvertiseScopes adds scopes to those the protected resource metadata
// lists (scopes_supported), e.g. the scopes a tool policy asks for. They are
// not required of every request.
func (a *Authenticator) AdvertiseScopes(scopes ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range scopes {
		if !slices.Contains(a.extraScopes, s) {
			a.extraScopes = append(a.extraScopes, s)
		}
	}
}

// WellKnownPath is where protected resource metadata lives (RFC 9728 §3).
const WellKnownPath = "/.well-known/oauth-protected-resource"

// MetadataPaths are the paths the protected resource metadata is served
// at: the path form for the resource (…/oauth-protected-resource/mcp), which
// clients try first, and the root form. Empty without OAuth.
func (a *Authenticator) MetadataPaths() []string {
	if !a.OAuth() {
		return nil
	}
	u, _ := url.Parse(a.opts.ResourceURL)
	paths := []string{WellKnownPath}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		paths = append([]string{WellKnownPath + p}, paths...)
	}
	return paths
}

// Metadata returns the protected resource metadata (RFC 9728).
func (a *Authenticator) Metadata() *oauthex.ProtectedResourceMetadata {
	a.mu.Lock()
	scopes := slices.Clone(a.opts.Scopes)
	for _, s := range a.extraScopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	a.mu.Unlock()
	return &oauthex.ProtectedResourceMetadata{
		Resource:               a.opts.ResourceURL,
		AuthorizationServers:   []string{a.opts.Issuer},
		ScopesSupported:        scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "mcp-bridge",
	}
}

// ServeMetadata serves the protected resource metadata. It is public, so
// any origin may read it (RFC 9728 §3.1 puts no restriction on it).
func (a *Authenticator) ServeMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", "GET")
		w.Header().Set("Access-Control-Allow-Headers", "MCP-Protocol-Version")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	b, err := json.Marshal(a.Metadata())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

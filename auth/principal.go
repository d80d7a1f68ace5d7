package auth

import (
	"context"
	"slices"
	"time"
)

// A Principal is who a request acts for, as the HTTP edge established it.
// It is attached to every authenticated request's context (NewContext,
// FromContext) and is never modified after that: share it, do not change it.
type Principal struct {
	// Subject is the token's sub claim (the user, or for a client
	// credentials grant usually the client). Empty for a static token.
	Subject string
	// ClientID is the OAuth client the token was issued to (client_id,
	// else azp). Empty for a static token.
	ClientID string
	// Issuer is the authorization server that issued the token. Empty for
	// a static token.
	Issuer string
	// Scopes are the scopes the token grants. A static token has none.
	Scopes []string
	// Expiry is when the token expires; zero when unknown (static tokens).
	Expiry time.Time
	// Static is true for a token from --auth-token-file or
	// BRIDGE_AUTH_TOKENS: an operator-issued credential, not an OAuth one.
	Static bool
	// Tag is stable across token refreshes and identifies the principal
	// without revealing it: for OAuth "oauth:" and a digest of issuer,
	// subject and client ID; for a static token "static:" and a digest of
	// the token. A session is bound to the Tag of the principal that created
	// it. It contains no secret and may be logged. Never empty: the empty
	// Tag is that of no principal.
	Tag Tag
}

// HasScopes reports whether p was granted every scope in want.
func (p *Principal) HasScopes(want ...string) bool {
	return len(p.Missing(want)) == 0
}

// Missing returns the scopes in want that p was not granted, nil if none.
func (p *Principal) Missing(want []string) []string {
	var missing []string
	for _, s := range want {
		if p == nil || !slices.Contains(p.Scopes, s) {
			missing = append(missing, s)
		}
	}
	return missing
}

// A Tag is the owner tag of a principal (Principal.Tag): what a 2025
// session is bound to, what the stateless pool keys its legacy children,
// its fair shares and its requestStates by. It identifies the principal
// without revealing it, contains no secret and may be logged. The empty
// Tag is the owner of every unauthenticated request: without
// authentication there is one owner, nobody in particular.
type Tag string

type principalKey struct{}

// NewContext returns a copy of ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal the HTTP edge attached to a request's
// context (http.Request.Context()), or nil if the request was not
// authenticated (no authentication configured).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

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
	// it. It contains no secret and may be logged.
	Tag string
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

// An Origin is a message's origin at the interception point
// (peer.Message.Origin) that knows who its caller is: a 2025 session
// (its latest POST's principal), a call of the stateless pool (the
// request it serves now) or a subscription of that pool. The caller
// travels typed from the HTTP edge to whatever asks (the policy, the
// audit log); only the Origin itself is opaque on the way.
type Origin interface {
	// Principal is the caller, or nil without authentication.
	Principal() *Principal
}

// CallerOf returns the caller of a message's Origin: nil when the origin
// is no Origin (the child's own messages) or has no principal. It
// allocates nothing: the principal is the one the edge established.
func CallerOf(origin any) *Principal {
	if o, ok := origin.(Origin); ok {
		return o.Principal()
	}
	return nil
}

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

package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
)

// libraryWords are what the JWT library's errors say, which a client or
// an operator cannot act on (`jwt.ParseString: failed to parse
// string: jwt.Validate: validation failed: "aud" not satisfied`).
var libraryWords = []string{"jwt.", "jws.", "jwk.", "ParseString", "failed to parse", "validation failed", "not satisfied"}

// A refused token's error says, in plain words, what was expected and
// what the token holds.
func TestRefusedTokensSayWhy(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	a, _ := newAuth(t, Options{Issuer: as.URL})
	now := time.Now()
	claims := func(change func(map[string]any)) map[string]any {
		c := as.Claims("alice", resource, "mcp:tools")
		change(c)
		return c
	}
	for name, c := range map[string]struct {
		tok  string
		want []string
	}{
		"wrong audience": {as.Sign(t, claims(func(c map[string]any) { c["aud"] = []string{"https://other.example.com/mcp"} })),
			[]string{"audience", "https://other.example.com/mcp", resource, "--resource-url"}},
		"no audience": {as.Sign(t, claims(func(c map[string]any) { delete(c, "aud") })),
			[]string{"audience", resource}},
		"wrong issuer": {as.Sign(t, claims(func(c map[string]any) { c["iss"] = "https://evil.example.com" })),
			[]string{"issuer", "https://evil.example.com", as.URL, "--oauth-issuer"}},
		"expired": {as.Sign(t, claims(func(c map[string]any) { c["exp"] = now.Add(-DefaultClockSkew - time.Minute).Unix() })),
			[]string{"expired"}},
		"no exp": {as.Sign(t, claims(func(c map[string]any) { delete(c, "exp") })),
			[]string{"expiry", "exp"}},
		"garbage JWT": {"a.b.c", []string{"JWT"}},
		"another key": {oauthtest.SignWith(t, otherKey(t), as.KeyID(), as.Claims("alice", resource)), []string{"signature", as.KeyID()}},
		"not yet valid": {as.Sign(t, claims(func(c map[string]any) { c["nbf"] = now.Add(DefaultClockSkew + time.Minute).Unix() })),
			[]string{"not valid before"}},
	} {
		_, err := a.Authenticate(request(c.tok))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
		for _, w := range libraryWords {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q holds the library's words %q", name, err, w)
			}
		}
	}
}

// An issuer given with a trailing slash that the authorization server's
// metadata names without one (or the reverse) is refused with the exact
// issuer to give, not with what the discovery met on its way.
func TestIssuerTrailingSlash(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}})
	_, err := New(context.Background(), &Options{Issuer: as.URL + "/", ResourceURL: resource})
	if err == nil {
		t.Fatal("an issuer that is not the authorization server's own is accepted")
	}
	if !strings.Contains(err.Error(), "trailing slash") || !strings.Contains(err.Error(), strings.TrimSuffix(as.URL, "/")+" ") && !strings.HasSuffix(err.Error(), as.URL) {
		t.Errorf("%v: want it to name the issuer %s and the trailing slash", err, as.URL)
	}
	t.Log(err)
}

func otherKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

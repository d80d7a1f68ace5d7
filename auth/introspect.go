package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// maxIntrospectionBytes bounds an introspection response.
const maxIntrospectionBytes = 1 << 20

// introspection is an RFC 7662 §2.2 response.
type introspection struct {
	Active   bool            `json:"active"`
	Scope    string          `json:"scope"`
	ClientID string          `json:"client_id"`
	Sub      string          `json:"sub"`
	Iss      string          `json:"iss"`
	Aud      json.RawMessage `json:"aud"`
	Exp      int64           `json:"exp"`
	Nbf      int64           `json:"nbf"`
}

// introspect asks the issuer about an opaque token (RFC 7662). Nothing is
// cached: a revoked token stops working at once.
func (a *Authenticator) introspect(ctx context.Context, tok string) (*Principal, error) {
	o := &a.opts
	form := url.Values{"token": {tok}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.IntrospectionURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: client credentials are form-encoded before Basic.
	req.SetBasicAuth(url.QueryEscape(o.ClientID), url.QueryEscape(o.ClientSecret))
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: introspecting a token at %s: %w", ErrUnavailable, o.IntrospectionURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxIntrospectionBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: introspecting a token at %s: %w", ErrUnavailable, o.IntrospectionURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			a.logger.Error("the introspection endpoint refused the bridge's client credentials; check the client ID and secret",
				"url", o.IntrospectionURL, "status", resp.StatusCode)
		}
		return nil, fmt.Errorf("%w: introspecting a token at %s: %s", ErrUnavailable, o.IntrospectionURL, resp.Status)
	}
	var in introspection
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("%w: introspection response from %s: %w", ErrUnavailable, o.IntrospectionURL, err)
	}
	if !in.Active {
		return nil, fmt.Errorf("%w: inactive (introspection)", ErrInvalidToken)
	}
	if in.Iss != "" && in.Iss != o.Issuer {
		return nil, fmt.Errorf("%w: issued by %q (introspection)", ErrInvalidToken, in.Iss)
	}
	// The audience is required here as in JWTs: a token the issuer made
	// for another resource must not be accepted by this one (RFC 8707).
	var aud []string
	if len(in.Aud) > 0 {
		var one string
		if json.Unmarshal(in.Aud, &one) == nil {
			aud = []string{one}
		} else if err := json.Unmarshal(in.Aud, &aud); err != nil {
			return nil, fmt.Errorf("%w: introspection response from %s: aud: %w", ErrUnavailable, o.IntrospectionURL, err)
		}
	}
	if !slices.Contains(aud, o.ResourceURL) {
		return nil, fmt.Errorf("%w: audience %q does not include %s (introspection)", ErrInvalidToken, aud, o.ResourceURL)
	}
	now := a.now()
	if in.Exp != 0 && !now.Before(time.Unix(in.Exp, 0).Add(o.ClockSkew)) {
		return nil, fmt.Errorf("%w: expired (introspection)", ErrInvalidToken)
	}
	if in.Nbf != 0 && now.Add(o.ClockSkew).Before(time.Unix(in.Nbf, 0)) {
		return nil, fmt.Errorf("%w: not valid yet (introspection)", ErrInvalidToken)
	}
	if in.Sub == "" && in.ClientID == "" {
		return nil, fmt.Errorf("%w: the token names neither a subject nor a client (introspection)", ErrInvalidToken)
	}
	p := &Principal{Subject: in.Sub, ClientID: in.ClientID, Issuer: o.Issuer, Scopes: strings.Fields(in.Scope)}
	if in.Exp != 0 {
		p.Expiry = time.Unix(in.Exp, 0)
	}
	return oauthPrincipal(p), nil
}

package connect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// storedToken is one file of the token store: the token of a client for a
// resource at an issuer, and what refreshing it needs.
type storedToken struct {
	Issuer   string `json:"issuer"`
	Resource string `json:"resource"` // the RFC 8707 resource
	Remote   string `json:"remote"`   // the URL bridge connect was given
	// ClientKey is the client as configured (--oauth-client-id or
	// --oauth-client-metadata-url; empty when registered dynamically).
	ClientKey     string    `json:"client_key"`
	ClientID      string    `json:"client_id"`
	ClientSecret  string    `json:"client_secret,omitempty"` // of a dynamically registered client only
	Registered    bool      `json:"registered,omitempty"`
	TokenEndpoint string    `json:"token_endpoint"`
	Scopes        []string  `json:"scopes,omitempty"`
	AccessToken   string    `json:"access_token"`
	RefreshToken  string    `json:"refresh_token,omitempty"`
	Expiry        time.Time `json:"expiry,omitzero"`
}

// tokenStore keeps one file of mode 0600 per (issuer, resource, client) in
// a directory of mode 0700. Writes are atomic (a temporary file renamed);
// a refresh holds the file's lock, so concurrent bridge connect processes
// refresh once and share the result.
type tokenStore struct {
	dir string
}

func (s *tokenStore) path(st *storedToken) string {
	h := sha256.Sum256([]byte(st.Issuer + "\x00" + st.Resource + "\x00" + st.ClientID))
	return filepath.Join(s.dir, hex.EncodeToString(h[:16])+".json")
}

func (s *tokenStore) save(st *storedToken) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.path(st))
}

func (s *tokenStore) load(path string) *storedToken {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var st storedToken
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	return &st
}

// all reads every token file.
func (s *tokenStore) all() []*storedToken {
	paths, _ := filepath.Glob(filepath.Join(s.dir, "*.json"))
	var out []*storedToken
	for _, p := range paths {
		if st := s.load(p); st != nil {
			out = append(out, st)
		}
	}
	return out
}

// find returns the newest token for remote with this client key.
func (s *tokenStore) find(remote, clientKey string) *storedToken {
	var best *storedToken
	for _, st := range s.all() {
		if st.Remote == remote && st.ClientKey == clientKey && (best == nil || st.Expiry.After(best.Expiry)) {
			best = st
		}
	}
	return best
}

// registered returns a dynamically registered client at issuer.
func (s *tokenStore) registered(issuer string) *storedToken {
	for _, st := range s.all() {
		if st.Registered && st.Issuer == issuer {
			return st
		}
	}
	return nil
}

// refresh gets a new access token with the refresh token, under the lock
// of the token's file: if another process refreshed meanwhile (the file
// holds a token other than sent), that one is used. c.mu is held.
func (c *oauthClient) refresh(ctx context.Context, sent string) error {
	st := c.cur
	if st == nil || st.RefreshToken == "" {
		return errors.New("no refresh token")
	}
	path := c.store.path(st)
	if err := os.MkdirAll(c.store.dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("locking the token store: %w", err)
	}
	defer unlock()
	if onDisk := c.store.load(path); onDisk != nil && onDisk.AccessToken != sent && onDisk.AccessToken != "" &&
		(onDisk.Expiry.IsZero() || time.Until(onDisk.Expiry) > refreshMargin) {
		c.cur = onDisk
		c.log.Debug("another bridge connect refreshed the token", "issuer", st.Issuer)
		return nil
	}
	if err := checkEndpoint("token_endpoint", st.TokenEndpoint, false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, oauthTimeout)
	defer cancel()
	form := url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {st.RefreshToken},
		"resource":      {st.Resource},
	}
	secret := st.ClientSecret
	if secret == "" && st.ClientID == c.opts.ClientID {
		secret = c.opts.ClientSecret
	}
	if secret == "" {
		form.Set("client_id", st.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if secret != "" {
		req.SetBasicAuth(url.QueryEscape(st.ClientID), url.QueryEscape(secret))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := readBody(resp.Body, maxMetadataBytes)
	if err != nil {
		return err
	}
	var tr struct {
		AccessToken      string `json:"access_token"`
		RefreshToken     string `json:"refresh_token"`
		ExpiresIn        int64  `json:"expires_in"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	if json.Unmarshal(body, &tr) != nil {
		return fmt.Errorf("the token endpoint answered %s with no JSON", resp.Status)
	}
	if resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
		return fmt.Errorf("the token endpoint answered %s: %s %s", resp.Status, tr.Error, tr.ErrorDescription)
	}
	next := *st
	next.AccessToken = tr.AccessToken
	if tr.RefreshToken != "" {
		next.RefreshToken = tr.RefreshToken // rotated: "For public clients, authorization servers MUST rotate refresh tokens"
	}
	next.Expiry = time.Time{}
	if tr.ExpiresIn > 0 {
		next.Expiry = time.Now().Add(time.Duration(tr.ExpiresIn) * time.Second)
	}
	if err := c.store.save(&next); err != nil {
		c.log.Warn("the refreshed token could not be stored", "err", err)
	}
	c.cur = &next
	c.log.Debug("refreshed the token", "issuer", st.Issuer)
	return nil
}

package oauthtest

// What the tests of `bridge connect` need besides: dynamic client
// registration (RFC 7591), a device authorization grant (RFC 8628, which
// fosite v0.49 lacks: approved devices get their token from fosite's own
// authorization code flow for PublicClient, so refresh and audience are
// fosite's), and counts of the grants served.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"

	"github.com/ory/fosite"
	"github.com/ory/fosite/storage"
)

// extra holds the state of the extensions.
type extra struct {
	mu      sync.Mutex
	grants  map[string]int
	devices map[string]*device // by device code
	byUser  map[string]string  // user code → device code
	dynamic map[string]fosite.Client
}

type device struct {
	clientID, scope, resource string
	approved                  bool
	issued                    bool
}

// dynStore adds dynamically registered clients to the memory store.
type dynStore struct {
	*storage.MemoryStore
	s *Server
}

func (d dynStore) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	d.s.x.mu.Lock()
	c, ok := d.s.x.dynamic[id]
	d.s.x.mu.Unlock()
	if ok {
		return c, nil
	}
	return d.MemoryStore.GetClient(ctx, id)
}

// Grants returns how many tokens the token endpoint issued for grant_type.
func (s *Server) Grants(grantType string) int {
	s.x.mu.Lock()
	defer s.x.mu.Unlock()
	return s.x.grants[grantType]
}

// Registered returns how many clients registered dynamically.
func (s *Server) Registered() int {
	s.x.mu.Lock()
	defer s.x.mu.Unlock()
	return len(s.x.dynamic)
}

const deviceGrant = "urn:ietf:params:oauth:grant-type:device_code"

// extendMeta adds the endpoints of the extensions to the metadata.
func (s *Server) extendMeta(meta map[string]any) {
	meta["registration_endpoint"] = s.URL + "/register"
	meta["device_authorization_endpoint"] = s.URL + "/device_authorization"
	meta["grant_types_supported"] = append(meta["grant_types_supported"].([]string), deviceGrant)
}

// serveExtra serves the extensions' paths; it reports whether it did.
func (s *Server) serveExtra(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/register":
		s.register(w, r)
	case "/device_authorization":
		s.deviceAuthorization(w, r)
	case "/device":
		s.approveDevice(w, r)
	case "/token":
		r.ParseForm()
		gt := r.PostForm.Get("grant_type")
		if gt == deviceGrant {
			s.deviceToken(w, r)
			return true
		}
		rec := httptest.NewRecorder()
		s.serve(rec, withoutExtra(r))
		if rec.Code == http.StatusOK {
			s.x.mu.Lock()
			s.x.grants[gt]++
			s.x.mu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	default:
		return false
	}
	return true
}

type noExtraKey struct{}

func withoutExtra(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), noExtraKey{}, true))
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var meta struct {
		RedirectURIs  []string `json:"redirect_uris"`
		GrantTypes    []string `json:"grant_types"`
		ResponseTypes []string `json:"response_types"`
		ClientName    string   `json:"client_name"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&meta) != nil {
		http.Error(w, `{"error":"invalid_client_metadata"}`, http.StatusBadRequest)
		return
	}
	if len(meta.GrantTypes) == 0 {
		meta.GrantTypes = []string{"authorization_code"}
	}
	if len(meta.ResponseTypes) == 0 {
		meta.ResponseTypes = []string{"code"}
	}
	id := "dyn-" + rand.Text()
	c := &fosite.DefaultClient{ID: id, Public: true, RedirectURIs: meta.RedirectURIs, GrantTypes: meta.GrantTypes,
		ResponseTypes: meta.ResponseTypes, Scopes: s.opts.Scopes, Audience: s.opts.Audience}
	s.x.mu.Lock()
	s.x.dynamic[id] = c
	s.x.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"client_id": id, "redirect_uris": meta.RedirectURIs, "grant_types": meta.GrantTypes,
		"response_types": meta.ResponseTypes, "token_endpoint_auth_method": "none", "client_name": meta.ClientName})
}

func (s *Server) deviceAuthorization(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	d := &device{clientID: r.PostForm.Get("client_id"), scope: r.PostForm.Get("scope"), resource: r.PostForm.Get("resource")}
	if d.clientID != PublicClient {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io := `{"error":"invalid_client","error_description":"the device flow of this test server serves ` + PublicClient + ` only"}`
		w.Write([]byte(io))
		return
	}
	dc, uc := rand.Text(), rand.Text()[:8]
	s.x.mu.Lock()
	s.x.devices[dc] = d
	s.x.byUser[uc] = dc
	s.x.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"device_code": dc, "user_code": uc, "verification_uri": s.URL + "/device",
		"verification_uri_complete": s.URL + "/device?user_code=" + uc, "expires_in": 300, "interval": 1,
	})
}

// approveDevice is the user entering the code and consenting.
func (s *Server) approveDevice(w http.ResponseWriter, r *http.Request) {
	s.x.mu.Lock()
	d := s.x.devices[s.x.byUser[r.URL.Query().Get("user_code")]]
	if d != nil {
		d.approved = true
	}
	s.x.mu.Unlock()
	if d == nil {
		http.Error(w, "unknown code", http.StatusNotFound)
		return
	}
	w.Write([]byte("approved"))
}

func (s *Server) deviceToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	s.x.mu.Lock()
	d := s.x.devices[r.PostForm.Get("device_code")]
	var state string
	switch {
	case d == nil || d.clientID != r.PostForm.Get("client_id") || d.issued:
		state = "invalid_grant"
	case !d.approved:
		state = "authorization_pending"
	default:
		d.issued = true
	}
	s.x.mu.Unlock()
	if state != "" {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": state})
		return
	}
	// The token of an authorization code flow for the same client,
	// scopes and resource.
	cfg := s.config(strings.Fields(d.scope))
	verifier := "device-verifier-" + rand.Text() + rand.Text()
	q := url.Values{"response_type": {"code"}, "client_id": {PublicClient}, "redirect_uri": {RedirectURL},
		"scope": {d.scope}, "state": {rand.Text()}, "resource": {d.resource},
		"code_challenge": {s256(verifier)}, "code_challenge_method": {"S256"}}
	rec := httptest.NewRecorder()
	s.serve(rec, httptest.NewRequestWithContext(r.Context(), http.MethodGet, s.URL+"/authorize?"+q.Encode(), nil))
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "server_error", "error_description": loc.Query().Get("error_description")})
		return
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {RedirectURL},
		"client_id": {PublicClient}, "code_verifier": {verifier}, "resource": {d.resource}}
	req := httptest.NewRequestWithContext(r.Context(), http.MethodPost, cfg.Endpoint.TokenURL, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	s.serve(rec, withoutExtra(req))
	if rec.Code == http.StatusOK {
		s.x.mu.Lock()
		s.x.grants[deviceGrant]++
		s.x.mu.Unlock()
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func s256(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

package affinity

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A session ID minted with the secret can name any address. The instance
// that forwards to it must not hand that address the client's token
// (issue 13, item 2), and what the address receives must be of no use at a
// real instance.
func TestForgedOwnerNeverGetsTheToken(t *testing.T) {
	const token = "client-token-0123456789"
	a := newInstance(t, testSecret, token) // the instance the client reaches
	b := newInstance(t, testSecret, token) // a real owner elsewhere
	c := newClient(t)

	// The forged owner: whoever holds the secret, listening anywhere.
	var mu sync.Mutex
	var got []http.Header
	forged := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.Write([]byte("forged"))
	}))
	defer forged.Close()
	minter, err := New(&Options{Self: strings.TrimPrefix(forged.URL, "http://"), Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	id, err := minter.NewID()
	if err != nil {
		t.Fatal(err)
	}

	hdr := http.Header{"Authorization": {"Bearer " + token}, "Cookie": {"c=1"}}
	resp, body := do(t, c, http.MethodPost, a.srv.URL+"/mcp", id, "{}", hdr)
	if resp.StatusCode != 200 || body != "forged" {
		t.Fatalf("via A: %d %q; want the forged owner's answer (the ID verifies)", resp.StatusCode, body)
	}
	mu.Lock()
	seen := got[0]
	mu.Unlock()
	for name, vs := range seen {
		for _, v := range vs {
			if strings.Contains(v, token) {
				t.Errorf("the forged owner received the client's token in %s: %q", name, v)
			}
		}
	}
	fwd := seen.Get(ForwardAuthHeader)
	if fwd == "" {
		t.Fatalf("the forwarded request has no %s", ForwardAuthHeader)
	}

	// What the forged owner got, replayed to a real owner, for one of its
	// sessions or for the same ID: no credentials reach the bridge there.
	bid, err := b.router.NewID()
	if err != nil {
		t.Fatal(err)
	}
	for _, replayID := range []string{bid, id} {
		replay := http.Header{ForwardAuthHeader: {fwd}, HopHeader: {a.router.Self()}, "Authorization": {"Bearer stolen"}}
		do(t, c, http.MethodPost, b.srv.URL+"/mcp", replayID, "{}", replay)
	}
	for i, r := range b.served() {
		if auth := r.Header.Get("Authorization"); auth != "" {
			t.Errorf("replay %d reached B's bridge with Authorization %q; want none", i, auth)
		}
	}
}

// The forwarding instance forwards only a client it authenticated; the
// owner accepts the principal only with a fresh MAC for itself and the
// session, and then gives its bridge the client's own token.
func TestForwardAuth(t *testing.T) {
	const token = "client-token-0123456789"
	a := newInstance(t, testSecret, token)
	b := newInstance(t, testSecret, token)
	c := newClient(t)
	id, err := a.router.NewID()
	if err != nil {
		t.Fatal(err)
	}

	// A wrong token is not forwarded: B's bridge answers (401 there).
	_, body := do(t, c, http.MethodPost, b.srv.URL+"/mcp", id, "{}", http.Header{"Authorization": {"Bearer wrong"}})
	if body != "served by "+b.router.Self() || len(a.served()) != 0 {
		t.Fatalf("a wrong token was forwarded: %q", body)
	}
	// The right one is, and A's bridge sees it.
	_, body = do(t, c, http.MethodPost, b.srv.URL+"/mcp", id, "{}", http.Header{"Authorization": {"Bearer " + token}})
	if body != "served by "+a.router.Self() {
		t.Fatalf("via B: %q; want A", body)
	}
	if auth := a.served()[0].Header.Get("Authorization"); auth != "Bearer "+token {
		t.Errorf("A's bridge saw Authorization %q; want the client's", auth)
	}

	// Headers B would make, for A, at various times and for other sessions.
	ts := time.Now()
	header := func(owner, session string, at time.Time) string {
		s := strconv.FormatInt(at.Unix(), 10)
		return s + "." + principal(token) + "." + b.router.forwardMAC(owner, session, s, principal(token))
	}
	other, _ := a.router.NewID()
	tests := []struct {
		name, value string
		ok          bool
	}{
		{"fresh", header(a.router.Self(), id, ts), true},
		{"for another owner", header(b.router.Self(), id, ts), false},
		{"for another session", header(a.router.Self(), other, ts), false},
		{"too old", header(a.router.Self(), id, ts.Add(-ForwardAuthMaxAge-time.Minute)), false},
		{"from the future", header(a.router.Self(), id, ts.Add(ForwardAuthMaxAge+time.Minute)), false},
		{"another principal", strings.Replace(header(a.router.Self(), id, ts), principal(token), principal("x"), 1), false},
		{"malformed", "garbage", false},
	}
	for _, tt := range tests {
		n := len(a.served())
		do(t, c, http.MethodPost, a.srv.URL+"/mcp", id, "{}", http.Header{ForwardAuthHeader: {tt.value}, "Authorization": {"Bearer " + token}})
		auth := a.served()[n].Header.Get("Authorization")
		if tt.ok != (auth == "Bearer "+token) || !tt.ok && auth != "" {
			t.Errorf("%s: A's bridge saw Authorization %q; want the token: %v", tt.name, auth, tt.ok)
		}
	}
}

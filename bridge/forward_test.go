package bridge

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
)

var fwdSecret = []byte("0123456789abcdef0123456789abcdef-test")

// fwdInstance is one bridge instance in a test: a real HTTP server whose
// handler is fwd.Wrap(local). local records what reached it.
type fwdInstance struct {
	srv    *httptest.Server
	inst   *affinity.Instance
	fwd    *Forwarder
	mu     sync.Mutex
	seen   []*http.Request // requests served by local, with their bodies read into bodies
	bodies []string
	local  http.HandlerFunc // what local does after recording; nil answers "served by <addr>"
	errs   testlog.Buffer   // the HTTP server's own log (panics it recovered)
}

func newFwdInstance(t *testing.T, secret []byte, tokens ...string) *fwdInstance {
	t.Helper()
	in := &fwdInstance{}
	in.srv = httptest.NewUnstartedServer(nil)
	in.inst = mustInstance(t, in.srv.Listener.Addr().String(), secret)
	in.fwd = NewForwarder(in.inst, &ForwarderOptions{Tokens: tokens, Logger: fwdLogger(t)})
	in.srv.Config.Handler = in.fwd.Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		in.mu.Lock()
		in.seen = append(in.seen, req)
		in.bodies = append(in.bodies, string(body))
		h := in.local
		in.mu.Unlock()
		if h != nil {
			h(w, req)
			return
		}
		w.Header().Set(hdrSessionID, req.Header.Get(hdrSessionID))
		io.WriteString(w, "served by "+in.inst.Self())
	}))
	in.srv.Config.ErrorLog = log.New(&in.errs, "", 0)
	in.srv.Start()
	t.Cleanup(func() {
		in.srv.Close()
		in.fwd.Close()
		if s := in.errs.String(); s != "" {
			t.Errorf("the HTTP server of %s logged: %s", in.inst.Self(), s)
		}
	})
	return in
}

func mustInstance(t *testing.T, self string, secret []byte) *affinity.Instance {
	t.Helper()
	inst, err := affinity.New(&affinity.Options{Self: self, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

func mustID(t *testing.T, inst *affinity.Instance) string {
	t.Helper()
	id, err := inst.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// fwdLogger sends logs to t.Log, and drops them once the test is over.
func fwdLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(fwdLogWriter{t}, nil))
}

type fwdLogWriter struct{ t *testing.T }

func (w fwdLogWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (in *fwdInstance) served() []*http.Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]*http.Request(nil), in.seen...)
}

func fwdClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func fwdDo(t *testing.T, c *http.Client, method, url, id, body string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if id != "" {
		req.Header.Set(hdrSessionID, id)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// swapOwner replaces the owner part of a session ID, keeping its MAC: what
// someone without the secret could make of an ID they saw.
func swapOwner(id, owner string) string {
	parts := strings.Split(id, ".")
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(owner)) + "." + parts[2]
}

func TestWrapForwardsToOwner(t *testing.T) {
	a := newFwdInstance(t, fwdSecret, "other", "tok")
	b := newFwdInstance(t, fwdSecret, "tok", "other")
	c := fwdClient(t)

	id := mustID(t, a.inst)
	hdr := http.Header{
		"Authorization":     {"Bearer tok"},
		"Content-Type":      {"application/json"},
		"X-Forwarded-For":   {"203.0.113.9"},
		"X-Forwarded-Proto": {"https"},
		"Connection":        {"X-Hop-Only"},
		"X-Hop-Only":        {"must not pass"},
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	resp, got := fwdDo(t, c, http.MethodPost, b.srv.URL+"/mcp?x=1", id, body, hdr)
	if resp.StatusCode != 200 || got != "served by "+a.inst.Self() {
		t.Fatalf("via B: %d %q; want 200 from A", resp.StatusCode, got)
	}
	if resp.Header.Get(hdrSessionID) != id {
		t.Errorf("response header %s = %q; want %q", hdrSessionID, resp.Header.Get(hdrSessionID), id)
	}
	if n := len(b.served()); n != 0 {
		t.Fatalf("B served %d requests itself; want 0", n)
	}
	seen := a.served()
	if len(seen) != 1 {
		t.Fatalf("A served %d requests; want 1", len(seen))
	}
	req := seen[0]
	checks := map[string][2]string{
		"method":            {req.Method, http.MethodPost},
		"path":              {req.URL.RequestURI(), "/mcp?x=1"},
		"host":              {req.Host, strings.TrimPrefix(b.srv.URL, "http://")},
		"body":              {a.bodies[0], body},
		"authorization":     {req.Header.Get("Authorization"), "Bearer tok"},
		"hop header":        {req.Header.Get(HopHeader), b.inst.Self()},
		"x-forwarded-for":   {req.Header.Get("X-Forwarded-For"), "203.0.113.9, 127.0.0.1"},
		"x-forwarded-proto": {req.Header.Get("X-Forwarded-Proto"), "https"},
		"hop-by-hop":        {req.Header.Get("X-Hop-Only"), ""},
	}
	for what, v := range checks {
		if v[0] != v[1] {
			t.Errorf("%s at owner = %q; want %q", what, v[0], v[1])
		}
	}

	// A's own session reaching A is served there, unforwarded.
	resp, got = fwdDo(t, c, http.MethodDelete, a.srv.URL+"/mcp", id, "", nil)
	if resp.StatusCode != 200 || got != "served by "+a.inst.Self() {
		t.Fatalf("direct to A: %d %q", resp.StatusCode, got)
	}
	if h := a.served()[1].Header.Get(HopHeader); h != "" {
		t.Errorf("direct request carries %s=%q", HopHeader, h)
	}
	// No session ID (initialize, /healthz): served where it lands.
	resp, got = fwdDo(t, c, http.MethodPost, b.srv.URL+"/mcp", "", body, nil)
	if got != "served by "+b.inst.Self() {
		t.Fatalf("no session ID via B: %d %q; want B", resp.StatusCode, got)
	}
}

// A POST to a legacy message endpoint names its session in the query: it
// is forwarded like Mcp-Session-Id, with the principal signed for that ID;
// only POSTs to a message endpoint are read that way.
func TestWrapForwardsLegacyMessages(t *testing.T) {
	a := newFwdInstance(t, fwdSecret, "tok")
	b := newFwdInstance(t, fwdSecret, "tok")
	c := fwdClient(t)
	id := mustID(t, a.inst)
	q := "?" + legacySessionParam + "=" + url.QueryEscape(id)
	auth := http.Header{"Authorization": {"Bearer tok"}, "Content-Type": {"application/json"}}
	for _, path := range []string{"/message", "/servers/one/message"} {
		n := len(a.served())
		_, got := fwdDo(t, c, http.MethodPost, b.srv.URL+path+q, "", "{}", auth)
		if got != "served by "+a.inst.Self() {
			t.Fatalf("POST %s via B: %q; want A", path, got)
		}
		req := a.served()[n]
		if req.URL.RequestURI() != path+q || req.Header.Get("Authorization") != "Bearer tok" || req.Header.Get(HopHeader) != b.inst.Self() {
			t.Errorf("POST %s at A: %s, Authorization %q, %s %q", path, req.URL.RequestURI(), req.Header.Get("Authorization"), HopHeader, req.Header.Get(HopHeader))
		}
	}
	// Not a POST to a message endpoint, a forged owner, another
	// deployment's ID: served where they land.
	victim := mustInstance(t, "169.254.169.254:80", []byte("another deployment's secret, 32+ bytes"))
	for name, u := range map[string]string{
		"GET":           b.srv.URL + "/message" + q,
		"other path":    b.srv.URL + "/mcp" + q,
		"owner swapped": b.srv.URL + "/message?sessionId=" + url.QueryEscape(swapOwner(id, "169.254.169.254:80")),
		"other secret":  b.srv.URL + "/message?sessionId=" + url.QueryEscape(mustID(t, victim)),
	} {
		method := http.MethodPost
		if name == "GET" {
			method = http.MethodGet
		}
		if _, got := fwdDo(t, c, method, u, "", "{}", auth); got != "served by "+b.inst.Self() {
			t.Errorf("%s: %q; want B to serve it", name, got)
		}
	}
}

func TestWrapStreamsEvents(t *testing.T) {
	a := newFwdInstance(t, fwdSecret)
	b := newFwdInstance(t, fwdSecret)
	release := make(chan struct{})
	a.local = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 1\ndata: first\n\n")
		http.NewResponseController(w).Flush()
		// The second event is written only once the client has read the
		// first through the forwarding instance: a proxy that buffered
		// would deadlock here (and the watchdog below fails the test).
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "id: 2\ndata: second\n\n")
	}
	id := mustID(t, a.inst)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watchdog := time.AfterFunc(time.Minute, cancel)
	defer watchdog.Stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+"/mcp", nil)
	req.Header.Set(hdrSessionID, id)
	resp, err := fwdClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v (after %q)", err, lines)
			}
			if line == "\n" {
				return strings.Join(lines, "")
			}
			lines = append(lines, line)
		}
	}
	if ev := readEvent(); ev != "id: 1\ndata: first\n" {
		t.Fatalf("first event %q", ev)
	}
	close(release)
	if ev := readEvent(); ev != "id: 2\ndata: second\n" {
		t.Fatalf("second event %q", ev)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Fatalf("trailing bytes %q", rest)
	}
}

func TestWrapNeverForwardsTwice(t *testing.T) {
	a := newFwdInstance(t, fwdSecret)
	b := newFwdInstance(t, fwdSecret)
	// An ID naming B arrives at A already forwarded by some instance that
	// took A for the owner: A must serve it (its registry answers 404), not
	// pass it on to B.
	id := mustID(t, b.inst)
	_, got := fwdDo(t, fwdClient(t), http.MethodPost, a.srv.URL+"/mcp", id, "{}",
		http.Header{HopHeader: {"10.0.0.99:8080"}})
	if got != "served by "+a.inst.Self() {
		t.Fatalf("got %q; want A to serve it", got)
	}
	if n := len(b.served()); n != 0 {
		t.Fatalf("B saw %d requests; want 0", n)
	}
}

func TestWrapRefusesUnverifiedOwners(t *testing.T) {
	a := newFwdInstance(t, fwdSecret)
	// victim stands for any address an attacker would like A to reach.
	var victimHits int
	var mu sync.Mutex
	victim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		victimHits++
		mu.Unlock()
	}))
	defer victim.Close()
	victimAddr := victim.Listener.Addr().String()

	attacker := mustInstance(t, victimAddr, []byte("the attacker does not know the secret!!"))
	wrongSecret := mustID(t, attacker)
	swapped := swapOwner(mustID(t, a.inst), victimAddr)

	c := fwdClient(t)
	for name, id := range map[string]string{"wrong secret": wrongSecret, "owner swapped": swapped} {
		_, got := fwdDo(t, c, http.MethodPost, a.srv.URL+"/mcp", id, "{}", nil)
		if got != "served by "+a.inst.Self() {
			t.Errorf("%s: got %q; want A to serve it locally", name, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if victimHits != 0 {
		t.Fatalf("the victim received %d requests", victimHits)
	}
}

func TestWrapOwnerGoneIs404(t *testing.T) {
	b := newFwdInstance(t, fwdSecret)
	// Take an address nobody listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	id := mustID(t, mustInstance(t, gone, fwdSecret))

	for _, legacy := range []bool{false, true} {
		u, hid, want := b.srv.URL+"/mcp", id, "initialize"
		if legacy {
			u, hid, want = b.srv.URL+"/message?sessionId="+url.QueryEscape(id), "", "SSE stream"
		}
		resp, got := fwdDo(t, fwdClient(t), http.MethodPost, u, hid, "{}", nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("legacy %v: status %d, body %q; want 404", legacy, resp.StatusCode, got)
		}
		var msg struct {
			JSONRPC string
			Error   struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal([]byte(got), &msg); err != nil || msg.JSONRPC != "2.0" || !strings.Contains(msg.Error.Message, want) {
			t.Fatalf("legacy %v: body %q (err %v); want a JSON-RPC error telling the client to %s", legacy, got, err, want)
		}
	}
	if n := len(b.served()); n != 0 {
		t.Fatalf("B served %d requests itself", n)
	}
}

func TestWrapOwnerBreaksIs502(t *testing.T) {
	// The owner accepts the connection and drops it without answering.
	a := newFwdInstance(t, fwdSecret)
	a.local = func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	b := newFwdInstance(t, fwdSecret)
	id := mustID(t, a.inst)
	resp, got := fwdDo(t, fwdClient(t), http.MethodGet, b.srv.URL+"/mcp", id, "", nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, body %q; want 502", resp.StatusCode, got)
	}
}

// A session ID minted with the secret can name any address. The instance
// that forwards to it must not hand that address the client's token,
// and what the address receives must be of no use at a
// real instance.
func TestForgedOwnerNeverGetsTheToken(t *testing.T) {
	const token = "client-token-0123456789"
	a := newFwdInstance(t, fwdSecret, token) // the instance the client reaches
	b := newFwdInstance(t, fwdSecret, token) // a real owner elsewhere
	c := fwdClient(t)

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
	id := mustID(t, mustInstance(t, strings.TrimPrefix(forged.URL, "http://"), fwdSecret))

	hdr := http.Header{"Authorization": {"Bearer " + token}, "Cookie": {"c=1"}}
	resp, body := fwdDo(t, c, http.MethodPost, a.srv.URL+"/mcp", id, "{}", hdr)
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
	bid := mustID(t, b.inst)
	for _, replayID := range []string{bid, id} {
		replay := http.Header{ForwardAuthHeader: {fwd}, HopHeader: {a.inst.Self()}, "Authorization": {"Bearer stolen"}}
		fwdDo(t, c, http.MethodPost, b.srv.URL+"/mcp", replayID, "{}", replay)
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
	a := newFwdInstance(t, fwdSecret, token)
	b := newFwdInstance(t, fwdSecret, token)
	c := fwdClient(t)
	id := mustID(t, a.inst)

	// A wrong token is not forwarded: B's bridge answers (401 there).
	_, body := fwdDo(t, c, http.MethodPost, b.srv.URL+"/mcp", id, "{}", http.Header{"Authorization": {"Bearer wrong"}})
	if body != "served by "+b.inst.Self() || len(a.served()) != 0 {
		t.Fatalf("a wrong token was forwarded: %q", body)
	}
	// The right one is, and A's bridge sees it.
	_, body = fwdDo(t, c, http.MethodPost, b.srv.URL+"/mcp", id, "{}", http.Header{"Authorization": {"Bearer " + token}})
	if body != "served by "+a.inst.Self() {
		t.Fatalf("via B: %q; want A", body)
	}
	if auth := a.served()[0].Header.Get("Authorization"); auth != "Bearer "+token {
		t.Errorf("A's bridge saw Authorization %q; want the client's", auth)
	}

	// Headers B would make, for A, at various times and for other sessions.
	ts := time.Now()
	header := func(owner, session string, at time.Time) string {
		return b.inst.SignPrincipal(owner, session, principal(token), at)
	}
	other := mustID(t, a.inst)
	tests := []struct {
		name, value string
		ok          bool
	}{
		{"fresh", header(a.inst.Self(), id, ts), true},
		{"for another owner", header(b.inst.Self(), id, ts), false},
		{"for another session", header(a.inst.Self(), other, ts), false},
		{"too old", header(a.inst.Self(), id, ts.Add(-affinity.MaxPrincipalAge-time.Minute)), false},
		{"from the future", header(a.inst.Self(), id, ts.Add(affinity.MaxPrincipalAge+time.Minute)), false},
		{"another principal", strings.Replace(header(a.inst.Self(), id, ts), principal(token), principal("x"), 1), false},
		{"unknown principal", b.inst.SignPrincipal(a.inst.Self(), id, principal("x"), ts), false},
		{"malformed", "garbage", false},
	}
	for _, tt := range tests {
		n := len(a.served())
		fwdDo(t, c, http.MethodPost, a.srv.URL+"/mcp", id, "{}", http.Header{ForwardAuthHeader: {tt.value}, "Authorization": {"Bearer " + token}})
		auth := a.served()[n].Header.Get("Authorization")
		if tt.ok != (auth == "Bearer "+token) || !tt.ok && auth != "" {
			t.Errorf("%s: A's bridge saw Authorization %q; want the token: %v", tt.name, auth, tt.ok)
		}
	}
}

// Forward (a retry whose requestState names another instance) passes the
// client's principal on as Wrap does: with tokens, the owner's bridge sees
// the client's own token, not a request without credentials.
func TestForwardCarriesThePrincipal(t *testing.T) {
	const token = "client-token-0123456789"
	a := newFwdInstance(t, fwdSecret, token)
	b := newFwdInstance(t, fwdSecret, token)
	b.mu.Lock()
	b.local = func(w http.ResponseWriter, req *http.Request) {
		b.mu.Lock()
		body := b.bodies[len(b.bodies)-1]
		b.mu.Unlock()
		req.Body = io.NopCloser(strings.NewReader(body)) // the whole body again
		b.fwd.Forward(w, req, a.inst.Self())
	}
	b.mu.Unlock()
	_, body := fwdDo(t, fwdClient(t), http.MethodPost, b.srv.URL+"/mcp", "", "{}", http.Header{"Authorization": {"Bearer " + token}})
	if body != "served by "+a.inst.Self() {
		t.Fatalf("via B: %q; want A", body)
	}
	if auth := a.served()[0].Header.Get("Authorization"); auth != "Bearer "+token {
		t.Errorf("A's bridge saw Authorization %q; want the client's", auth)
	}
}

// An owner may answer before it has read the body (an error: 401, 404 for
// a session it no longer holds), or read it all and answer at once (202 on
// the legacy transport). Either way the forwarding instance keeps the
// client's connection: many such requests in a row over one connection all
// get their answer, and its server recovers from no panic (net/http's
// "invalid concurrent Body.Read call" when a body is read after its
// handler returned).
func TestWrapOwnerAnswersAtOnce(t *testing.T) {
	b := newFwdInstance(t, fwdSecret)
	for _, readsBody := range []bool{false, true} {
		owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if readsBody {
				io.ReadAll(r.Body)
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.WriteHeader(http.StatusNotFound)
		}))
		id := mustID(t, mustInstance(t, owner.Listener.Addr().String(), fwdSecret))
		c := fwdClient(t)
		want := map[bool]int{false: http.StatusNotFound, true: http.StatusAccepted}[readsBody]
		for i := range 50 {
			for _, u := range []string{b.srv.URL + "/message?sessionId=" + url.QueryEscape(id), b.srv.URL + "/mcp"} {
				hid := id
				if strings.Contains(u, "sessionId") {
					hid = ""
				}
				resp, body := fwdDo(t, c, http.MethodPost, u, hid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
				if resp.StatusCode != want {
					t.Fatalf("owner reads the body %v, request %d to %s: %d %q; want %d", readsBody, i, u, resp.StatusCode, body, want)
				}
			}
		}
		owner.Close()
	}
	if s := b.errs.String(); s != "" {
		t.Fatalf("the forwarding instance's HTTP server logged: %s", s)
	}
}

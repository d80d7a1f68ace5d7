package affinity

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

// instance is one bridge instance in a test: a real HTTP server whose
// handler is router.Wrap(local). local records what reached it.
type instance struct {
	srv    *httptest.Server
	router *Router
	mu     sync.Mutex
	seen   []*http.Request // requests served by local, with their bodies read into bodies
	bodies []string
	local  http.HandlerFunc // what local does after recording; nil answers "served by <addr>"
}

func newInstance(t *testing.T, secret []byte, tokens ...string) *instance {
	t.Helper()
	in := &instance{}
	in.srv = httptest.NewUnstartedServer(nil)
	r, err := New(&Options{Self: in.srv.Listener.Addr().String(), Secret: secret, Tokens: tokens, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	in.router = r
	in.srv.Config.Handler = r.Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
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
		w.Header().Set(SessionHeader, req.Header.Get(SessionHeader))
		io.WriteString(w, "served by "+in.router.Self())
	}))
	in.srv.Start()
	t.Cleanup(func() {
		in.srv.Close()
		r.Close()
	})
	return in
}

// testLogger sends logs to t.Log, and drops them once the test is over.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, nil))
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (in *instance) served() []*http.Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]*http.Request(nil), in.seen...)
}

func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func do(t *testing.T, c *http.Client, method, url, id, body string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if id != "" {
		req.Header.Set(SessionHeader, id)
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

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string]*Options{
		"nil":           nil,
		"no self":       {Secret: testSecret},
		"unspecified":   {Self: "0.0.0.0:8080", Secret: testSecret},
		"no port":       {Self: "10.0.0.1", Secret: testSecret},
		"empty host":    {Self: ":8080", Secret: testSecret},
		"bad port":      {Self: "10.0.0.1:http", Secret: testSecret},
		"space in host": {Self: "a b:80", Secret: testSecret},
		"short secret":  {Self: "10.0.0.1:8080", Secret: []byte("too short")},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
}

func TestNewIDNamesOwner(t *testing.T) {
	r, err := New(&Options{Self: "10.0.3.7:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 1000 {
		id, err := r.NewID()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []byte(id) {
			if c < 0x21 || c > 0x7e {
				t.Fatalf("id %q has byte %#x outside visible ASCII", id, c)
			}
		}
		if seen[id] {
			t.Fatalf("id %q minted twice", id)
		}
		seen[id] = true
		owner, ok := r.Owner(id)
		if !ok || owner != "10.0.3.7:8080" {
			t.Fatalf("Owner(%q) = %q, %v; want 10.0.3.7:8080, true", id, owner, ok)
		}
		random, err := b64.DecodeString(strings.Split(id, ".")[0])
		if err != nil || len(random)*8 < 128 {
			t.Fatalf("id %q: random part has %d bits, want >= 128 (err %v)", id, len(random)*8, err)
		}
	}
	// Another instance of the same deployment (same secret) reads the owner.
	other, err := New(&Options{Self: "10.0.9.9:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := r.NewID()
	if owner, ok := other.Owner(id); !ok || owner != "10.0.3.7:8080" {
		t.Fatalf("other instance: Owner = %q, %v", owner, ok)
	}
}

func TestOwnerRejectsUnverifiedIDs(t *testing.T) {
	r, err := New(&Options{Self: "10.0.3.7:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := New(&Options{Self: "169.254.169.254:80", Secret: []byte("another deployment's secret, 32+ bytes")})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := r.NewID()
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + b64.EncodeToString([]byte("169.254.169.254:80")) + "." + parts[2]
	foreignID, _ := foreign.NewID()
	flip := []byte(good)
	if flip[len(flip)-1] == 'A' {
		flip[len(flip)-1] = 'B'
	} else {
		flip[len(flip)-1] = 'A'
	}
	for name, id := range map[string]string{
		"empty":            "",
		"random hex":       "3f2a9c1b7d0e4f5a3f2a9c1b7d0e4f5a",
		"owner swapped":    forged,
		"mac changed":      string(flip),
		"other secret":     foreignID,
		"extra part":       "x." + good,
		"two parts":        parts[0] + "." + parts[2],
		"padding appended": good + "=",
		"bad base64":       parts[0] + ".!!!." + parts[2],
	} {
		if owner, ok := r.Owner(id); ok {
			t.Errorf("%s: Owner(%q) = %q, true; want false", name, id, owner)
		}
	}
	// An ID whose MAC is valid but whose owner is not host:port (only an
	// instance with the secret could make one) is refused all the same.
	head := parts[0] + "." + b64.EncodeToString([]byte("not an address"))
	id := head + "." + b64.EncodeToString(r.mac(head))
	if _, ok := r.Owner(id); ok {
		t.Errorf("Owner accepted an owner that is not host:port")
	}
}

func TestWrapForwardsToOwner(t *testing.T) {
	a := newInstance(t, testSecret, "other", "tok")
	b := newInstance(t, testSecret, "tok", "other")
	c := newClient(t)

	id, err := a.router.NewID()
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{
		"Authorization":     {"Bearer tok"},
		"Content-Type":      {"application/json"},
		"X-Forwarded-For":   {"203.0.113.9"},
		"X-Forwarded-Proto": {"https"},
		"Connection":        {"X-Hop-Only"},
		"X-Hop-Only":        {"must not pass"},
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	resp, got := do(t, c, http.MethodPost, b.srv.URL+"/mcp?x=1", id, body, hdr)
	if resp.StatusCode != 200 || got != "served by "+a.router.Self() {
		t.Fatalf("via B: %d %q; want 200 from A", resp.StatusCode, got)
	}
	if resp.Header.Get(SessionHeader) != id {
		t.Errorf("response header %s = %q; want %q", SessionHeader, resp.Header.Get(SessionHeader), id)
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
		"hop header":        {req.Header.Get(HopHeader), b.router.Self()},
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
	resp, got = do(t, c, http.MethodDelete, a.srv.URL+"/mcp", id, "", nil)
	if resp.StatusCode != 200 || got != "served by "+a.router.Self() {
		t.Fatalf("direct to A: %d %q", resp.StatusCode, got)
	}
	if h := a.served()[1].Header.Get(HopHeader); h != "" {
		t.Errorf("direct request carries %s=%q", HopHeader, h)
	}
	// No session ID (initialize, /healthz): served where it lands.
	resp, got = do(t, c, http.MethodPost, b.srv.URL+"/mcp", "", body, nil)
	if got != "served by "+b.router.Self() {
		t.Fatalf("no session ID via B: %d %q; want B", resp.StatusCode, got)
	}
}

func TestWrapStreamsEvents(t *testing.T) {
	a := newInstance(t, testSecret)
	b := newInstance(t, testSecret)
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
	id, _ := a.router.NewID()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watchdog := time.AfterFunc(time.Minute, cancel)
	defer watchdog.Stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+"/mcp", nil)
	req.Header.Set(SessionHeader, id)
	resp, err := newClient(t).Do(req)
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
	a := newInstance(t, testSecret)
	b := newInstance(t, testSecret)
	// An ID naming B arrives at A already forwarded by some instance that
	// took A for the owner: A must serve it (its registry answers 404), not
	// pass it on to B.
	id, _ := b.router.NewID()
	_, got := do(t, newClient(t), http.MethodPost, a.srv.URL+"/mcp", id, "{}",
		http.Header{HopHeader: {"10.0.0.99:8080"}})
	if got != "served by "+a.router.Self() {
		t.Fatalf("got %q; want A to serve it", got)
	}
	if n := len(b.served()); n != 0 {
		t.Fatalf("B saw %d requests; want 0", n)
	}
}

func TestWrapRefusesUnverifiedOwners(t *testing.T) {
	a := newInstance(t, testSecret)
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

	attacker, err := New(&Options{Self: victimAddr, Secret: []byte("the attacker does not know the secret!!")})
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	wrongSecret, _ := attacker.NewID()
	good, _ := a.router.NewID()
	parts := strings.Split(good, ".")
	swapped := parts[0] + "." + b64.EncodeToString([]byte(victimAddr)) + "." + parts[2]

	c := newClient(t)
	for name, id := range map[string]string{"wrong secret": wrongSecret, "owner swapped": swapped} {
		_, got := do(t, c, http.MethodPost, a.srv.URL+"/mcp", id, "{}", nil)
		if got != "served by "+a.router.Self() {
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
	b := newInstance(t, testSecret)
	// Take an address nobody listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	dead, err := New(&Options{Self: gone, Secret: testSecret, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	id, _ := dead.NewID()

	resp, got := do(t, newClient(t), http.MethodPost, b.srv.URL+"/mcp", id, "{}", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, body %q; want 404", resp.StatusCode, got)
	}
	var msg struct {
		JSONRPC string
		Error   struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal([]byte(got), &msg); err != nil || msg.JSONRPC != "2.0" || !strings.Contains(msg.Error.Message, "initialize") {
		t.Fatalf("body %q (err %v); want a JSON-RPC error telling the client to initialize", got, err)
	}
	if n := len(b.served()); n != 0 {
		t.Fatalf("B served %d requests itself", n)
	}
}

func TestWrapOwnerBreaksIs502(t *testing.T) {
	// The owner accepts the connection and drops it without answering.
	a := newInstance(t, testSecret)
	a.local = func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	b := newInstance(t, testSecret)
	id, _ := a.router.NewID()
	resp, got := do(t, newClient(t), http.MethodGet, b.srv.URL+"/mcp", id, "", nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, body %q; want 502", resp.StatusCode, got)
	}
}

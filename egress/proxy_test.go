package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// The proxy in process, without Docker: a literal loopback entry allows
// its address and port; a listed name resolving to loopback is refused
// after resolution; an unlisted port and a request without a known tag
// are refused; every decision is an event.
func TestProxy(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Proxy-Authorization"); v != "" {
			t.Errorf("the container's tag reached the host: Proxy-Authorization %q", v)
		}
		fmt.Fprint(w, "hello")
	}))
	defer upstream.Close()
	_, port, _ := net.SplitHostPort(upstream.Listener.Addr().String())
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other") }))
	defer other.Close()
	_, port2, _ := net.SplitHostPort(other.Listener.Addr().String())
	var mu sync.Mutex
	var events []string
	// An allowed connection is reported when it closes, which may come
	// after its response reached the client: the test waits for it before
	// the next request, so that the events come in the order of the requests.
	allowed := make(chan struct{}, 1)
	rules, err := ParseRules([]string{"127.0.0.1:" + port, "localhost:" + port2})
	if err != nil {
		t.Fatal(err)
	}
	p := New(rules, nil, func(e Event) {
		if e.IP == "::1" { // localhost may resolve to either loopback
			e.IP = "127.0.0.1"
		}
		mu.Lock()
		events = append(events, fmt.Sprintf("%s %s:%d %s allowed=%v %s", e.Tag, e.Host, e.Port, e.IP, e.Allowed, e.Reason))
		mu.Unlock()
		if e.Allowed {
			allowed <- struct{}{}
		}
	})
	p.AddTag("t1")
	srv := httptest.NewServer(p)
	defer srv.Close()
	get := func(tag, target string) (int, string) {
		pu, _ := url.Parse(srv.URL)
		if tag != "" {
			pu.User = url.UserPassword(ProxyUser, tag)
		}
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(target)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, body := get("t1", "http://127.0.0.1:"+port+"/"); code != 200 || body != "hello" {
		t.Errorf("allowed literal: %d %q", code, body)
	}
	select {
	case <-allowed:
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the allowed connection 10 s after its response")
	}
	if code, body := get("t1", "http://127.0.0.1:1/"); code != 403 || !strings.Contains(body, "not in this server's allow-list") {
		t.Errorf("other port: %d %q", code, body)
	}
	if code, _ := get("", "http://127.0.0.1:"+port+"/"); code != 407 {
		t.Errorf("no tag: %d", code)
	}
	if code, _ := get("t2", "http://127.0.0.1:"+port+"/"); code != 407 {
		t.Errorf("unknown tag: %d", code)
	}
	// localhost:PORT2 is listed by name: it resolves to loopback, refused.
	if code, body := get("t1", "http://localhost:"+port2+"/"); code < 500 || !strings.Contains(body, "is a loopback address") {
		t.Errorf("a listed name resolving to loopback: %d %q", code, body)
	}
	p.DelTag("t1")
	if code, _ := get("t1", "http://127.0.0.1:"+port+"/"); code != 407 {
		t.Errorf("a deleted tag: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"t1 127.0.0.1:" + port + " 127.0.0.1 allowed=true ",
		"t1 127.0.0.1:1  allowed=false not in the allow-list",
		" 127.0.0.1:" + port + "  allowed=false no known container tag in Proxy-Authorization",
		" 127.0.0.1:" + port + "  allowed=false no known container tag in Proxy-Authorization",
		"t1 localhost:" + port2 + " 127.0.0.1 allowed=false a loopback address",
		" 127.0.0.1:" + port + "  allowed=false no known container tag in Proxy-Authorization",
	}
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}
}

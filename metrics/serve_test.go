package metrics_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/metrics"
)

// Serve checks Host: a DNS-rebinding page (evil.example resolving to
// 127.0.0.1) must not read /metrics. Without allowed hosts the loopback
// names pass; with them, their names; an IP address, which no rebinding
// can produce, always.
func TestServeChecksHost(t *testing.T) {
	m := metrics.New()
	m.Server(metrics.DefaultServer)
	for _, tc := range []struct {
		hosts   []string
		allowed []string
		refused []string
	}{
		{nil, []string{"localhost", "127.0.0.1", "[::1]", "10.1.2.3"}, []string{"evil.example", "metrics.example"}},
		{[]string{"metrics.example"}, []string{"metrics.example", "10.1.2.3"}, []string{"evil.example", "localhost"}},
	} {
		l, err := metrics.Serve("127.0.0.1:0", tc.hosts, m.Handler(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_, port, _ := strings.Cut(addr, ":")
		get := func(host string) (int, string) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			req.Host = host + ":" + port
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(body)
		}
		for _, h := range tc.allowed {
			if code, body := get(h); code != http.StatusOK || !strings.Contains(body, "mcp_bridge_sessions_active") {
				t.Errorf("%v: Host %s: %d, want 200 and the metrics", tc.hosts, h, code)
			}
		}
		for _, h := range tc.refused {
			if code, _ := get(h); code != http.StatusForbidden {
				t.Errorf("%v: Host %s: %d, want 403", tc.hosts, h, code)
			}
		}
		l.Close()
	}
}

// Serve says why it cannot listen.
func TestServeListenError(t *testing.T) {
	l, err := metrics.Serve("127.0.0.1:0", nil, http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := metrics.Serve(l.Addr().String(), nil, http.NotFoundHandler(), nil); err == nil {
		t.Fatal("a second Serve on the same address succeeded")
	}
}

package endpoint

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/mcp-bridge/mcp-bridge/metrics"
)

// Each decision of the proxy makes one audit line, counts in
// mcp_bridge_egress_connections_total (and _bytes_total), and a refusal is
// logged once per host and port per session, naming what allows it.
func TestEgressReporter(t *testing.T) {
	var auditBuf, logBuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	m := metrics.New()
	tel := newTelemetry(&Shared{Metrics: m}, "", logger)
	who := newLaunchPrincipals()
	report := egressReporter("", audit.New(&auditBuf, &audit.Options{Logger: logger}), tel, who, logger)
	who.set("s2", &auth.Principal{Subject: "carol", ClientID: "app"})
	report("s1", egress.Event{Host: "10.0.0.5", Port: 8080, IP: "10.0.0.5", Allowed: true, Up: 100, Down: 2000, Millis: 7})
	report("s1", egress.Event{Host: "evil.example", Port: 443, Reason: "not in the allow-list"})
	report("s1", egress.Event{Host: "evil.example", Port: 443, Reason: "not in the allow-list"})
	report("s2", egress.Event{Host: "localhost", Port: 8080, IP: "127.0.0.1", Reason: "a loopback address"})

	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(auditBuf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		delete(m, "time")
		b, _ := json.Marshal(m)
		lines = append(lines, string(b))
	}
	want := []string{
		`{"bytes_down":2000,"bytes_up":100,"duration_ms":7,"event":"egress","host":"10.0.0.5","ip":"10.0.0.5","outcome":"allowed","port":8080,"session":"s1"}`,
		`{"bytes_down":0,"bytes_up":0,"duration_ms":0,"event":"egress","host":"evil.example","outcome":"refused","port":443,"reason":"not in the allow-list","session":"s1"}`,
		`{"bytes_down":0,"bytes_up":0,"duration_ms":0,"event":"egress","host":"evil.example","outcome":"refused","port":443,"reason":"not in the allow-list","session":"s1"}`,
		`{"bytes_down":0,"bytes_up":0,"client_id":"app","duration_ms":0,"event":"egress","host":"localhost","ip":"127.0.0.1","outcome":"refused","port":8080,"reason":"a loopback address","session":"s2","sub":"carol"}`,
	}
	if !slices.Equal(lines, want) {
		t.Errorf("audit lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	wantLog := `level=WARN msg="egress refused" session=s1 host=evil.example port=443 ip="" reason="not in the allow-list" allow_with="--sandbox-egress evil.example:443"
level=WARN msg="egress refused" session=s2 host=localhost port=8080 ip=127.0.0.1 reason="a loopback address" allow_with="--sandbox-egress 127.0.0.1:8080"
`
	if logBuf.String() != wantLog {
		t.Errorf("log:\n%s\nwant:\n%s", logBuf.String(), wantLog)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var got []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "mcp_bridge_egress_") {
			got = append(got, l)
		}
	}
	wantMetrics := []string{
		`mcp_bridge_egress_bytes_total{direction="down",server="default"} 2000`,
		`mcp_bridge_egress_bytes_total{direction="up",server="default"} 100`,
		`mcp_bridge_egress_connections_total{outcome="allowed",server="default"} 1`,
		`mcp_bridge_egress_connections_total{outcome="refused",server="default"} 3`,
	}
	if !slices.Equal(got, wantMetrics) {
		t.Errorf("metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantMetrics, "\n"))
	}
}

// A secret file is read only if it is a regular file of mode 0600 owned
// by the bridge's user; a missing one is errNoSecret.
func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	os.WriteFile(path("ok"), []byte("s3cret\n"), 0o600)
	os.WriteFile(path("open"), []byte("s3cret\n"), 0o600)
	os.Chmod(path("open"), 0o640)
	os.Symlink(path("ok"), path("link"))
	if v, err := readSecret(path("ok")); v != "s3cret" || err != nil {
		t.Errorf("ok: %q, %v", v, err)
	}
	if _, err := readSecret(path("missing")); err != errNoSecret {
		t.Errorf("missing: %v", err)
	}
	for n, want := range map[string]string{"open": "mode 0640: refused", "link": "too many levels of symbolic links"} {
		if v, err := readSecret(path(n)); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") || v != "" {
			t.Errorf("%s: %q, %v; want an error saying %q", n, v, err, want)
		}
	}
	if os.Getuid() == 0 {
		os.WriteFile(path("theirs"), []byte("s3cret\n"), 0o600)
		os.Chown(path("theirs"), 12345, 12345)
		if _, err := readSecret(path("theirs")); err == nil || !strings.Contains(err.Error(), "not owned by the bridge's user") {
			t.Errorf("a file of another user: %v", err)
		}
	}
}

package endpoint_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
)

// freePort is a loopback address nothing listens on.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A process that cannot be built says which option is at fault, and
// releases what it had built before: its /metrics listener is closed.
func TestNewProcessFailureReleases(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	secret := []byte(strings.Repeat("s", 32))
	for _, tc := range []struct {
		name   string
		o      endpoint.ProcessOptions
		option string // the failing option's Option(), or "" for none
		msg    string
	}{
		{"issuer", endpoint.ProcessOptions{Auth: auth.Options{Issuer: "notaurl", ResourceURL: "https://r/mcp"}},
			"auth.Options.Issuer", `"notaurl": want an https URL`},
		{"affinity self", endpoint.ProcessOptions{AffinitySecret: secret, AffinitySelf: "ecs", Listen: "127.0.0.1:8080"},
			"affinity.Options.Self", "ECS_CONTAINER_METADATA_URI_V4 is not set"},
		{"affinity secret", endpoint.ProcessOptions{AffinitySecret: []byte("short"), AffinitySelf: "10.0.0.1:8080", Listen: "127.0.0.1:8080"},
			"", "session affinity: affinity: the secret is 5 bytes"},
		{"audit log", endpoint.ProcessOptions{AuditLog: "/nonexistent/dir/audit.log"},
			"endpoint.ServerOptions.AuditLog", "opening the audit log"},
	} {
		t.Setenv("ECS_CONTAINER_METADATA_URI_V4", "")
		addr := freePort(t)
		tc.o.Telemetry = endpoint.TelemetryOptions{MetricsListen: addr, Logger: quiet}
		tc.o.Logger = quiet
		p, err := endpoint.NewProcess(context.Background(), &tc.o)
		if err == nil {
			p.Close()
			t.Fatalf("%s: built", tc.name)
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.msg)
		}
		var oe interface{ Option() string }
		got := ""
		if errors.As(err, &oe) {
			got = oe.Option()
		}
		if got != tc.option {
			t.Errorf("%s: %v names option %q, want %q", tc.name, err, got, tc.option)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s: the metrics listener of a process that failed is still open: %v", tc.name, err)
		}
		l.Close()
	}
}

// A process shares its telemetry, authentication and governor with its
// servers; without session affinity its handler is the front end itself,
// with it a forwarder in front; Close releases /metrics.
func TestNewProcessShares(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	addr := freePort(t)
	p, err := endpoint.NewProcess(context.Background(), &endpoint.ProcessOptions{
		Telemetry: endpoint.TelemetryOptions{MetricsListen: addr, Logger: quiet},
		Auth:      auth.Options{StaticTokens: []string{"tok-0123456789abcdef"}},
		Scopes:    []string{"tools:read"},
		Logger:    quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	sh := p.Shared
	if !sh.Authenticates || sh.Auth == nil || sh.Metrics == nil || sh.MetricsHandler != nil || sh.LogBudget == nil || sh.Inflight == nil || sh.Affinity != nil {
		t.Errorf("shared: %+v", sh)
	}
	front := http.NewServeMux()
	if h := p.Handler(front); h != http.Handler(front) {
		t.Errorf("without affinity the handler is %T, want the front end", h)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	p.Close()
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after Close")
	}

	secret := []byte(strings.Repeat("s", 32))
	p, err = endpoint.NewProcess(context.Background(), &endpoint.ProcessOptions{
		Telemetry:      endpoint.TelemetryOptions{NoMetrics: true},
		AffinitySecret: secret, AffinitySelf: "10.0.0.1:8080", Listen: "127.0.0.1:8080",
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Shared.Affinity == nil || p.Shared.Forward == nil || p.Shared.Inflight != nil {
		t.Errorf("with affinity: %+v", p.Shared)
	}
}

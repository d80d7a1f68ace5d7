package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "api.github.com", want: "api.github.com:443"},
		{in: "API.GitHub.com.:8443", want: "api.github.com:8443"},
		{in: "*.example.com", want: "*.example.com:443"},
		{in: "172.17.0.1:8080", want: "172.17.0.1:8080"},
		{in: "[fd00:ec2::254]:80", want: "[fd00:ec2::254]:80"},
		{in: "fd00::1", want: "[fd00::1]:443"},
		{in: "::ffff:10.0.0.1", want: "10.0.0.1:443"},
		{in: "", err: "empty"},
		{in: "*.com", err: "two labels"},
		{in: "a.com:0", err: "port"},
		{in: "a.com:70000", err: "port"},
		{in: "a b.com", err: "character"},
		{in: "*", err: "character"},
		{in: "fd00::1:80x", err: "brackets"},
		{in: "http://a.com", err: "port"},
		{in: "a..com", err: "label"},
	} {
		r, err := ParseRule(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRule(%q) = %v, %v; want error with %q", tc.in, r, err, tc.err)
			}
		case err != nil || r.String() != tc.want:
			t.Errorf("ParseRule(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	rs, err := ParseRules([]string{"api.github.com,*.example.com:443", "172.17.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port uint16
		ok   bool
	}{
		{"api.github.com", 443, true},
		{"API.GITHUB.COM.", 443, true},
		{"api.github.com", 80, false},
		{"github.com", 443, false},
		{"x.api.github.com", 443, false},
		{"a.example.com", 443, true},
		{"a.b.example.com", 443, true},
		{"example.com", 443, false}, // the wildcard does not include the domain itself
		{"badexample.com", 443, false},
		{"172.17.0.1", 8080, true},
		{"[172.17.0.1]", 8080, true},
		{"::ffff:172.17.0.1", 8080, true},
		{"172.17.0.1", 8081, false},
		{"169.254.169.254", 80, false},
	} {
		if _, ok := rs.Match(tc.host, tc.port); ok != tc.ok {
			t.Errorf("Match(%s, %d) = %v, want %v", tc.host, tc.port, ok, tc.ok)
		}
	}
}

func TestRefusedAddr(t *testing.T) {
	gw := []netip.Prefix{netip.MustParsePrefix("203.0.113.1/32")}
	for _, tc := range []struct{ ip, why string }{
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.17.0.1", "private"},
		{"192.168.1.1", "private"},
		{"169.254.169.254", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unicast"},
		{"100.64.0.1", "special"},
		{"64:ff9b::a00:1", "special"},
		{"203.0.113.1", "gateway"},
		{"140.82.112.3", ""},
		{"2606:4700::1111", ""},
	} {
		if got := refusedAddr(netip.MustParseAddr(tc.ip), gw); (tc.why == "") != (got == "") || !strings.Contains(got, tc.why) {
			t.Errorf("refusedAddr(%s) = %q, want %q", tc.ip, got, tc.why)
		}
	}
}

// Whatever the input, ParseRule either refuses it or returns a rule whose
// canonical form parses back to itself.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"api.github.com", "*.example.com:8443", "10.0.0.1:80", "[::1]:443", "fd00::1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		r2, err := ParseRule(r.String())
		if err != nil || r2 != r {
			t.Fatalf("%q -> %v -> %v, %v", s, r, r2, err)
		}
		if r.Port == 0 {
			t.Fatalf("%q: port 0", s)
		}
	})
}

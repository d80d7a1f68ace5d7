package bridge

import (
	"net/http"
	"net/textproto"
	"slices"
	"testing"
)

// headerValue reads a header by the name given, without canonicalizing
// it: every name the bridge reads it with must be in canonical form, or
// the header would never be found.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, k := range []string{hdrSessionID, hdrProtocolVersion, hdrLastEventID, hdrOrigin, hdrAccept, hdrContentType} {
		if c := textproto.CanonicalMIMEHeaderKey(k); c != k {
			t.Errorf("header name %q is not canonical (%q)", k, c)
		}
	}
	h := http.Header{}
	h.Set("mcp-protocol-version", "2025-11-25")
	h.Add("Accept", "a")
	h.Add("Accept", "b")
	for _, tc := range []struct{ key, want string }{
		{hdrProtocolVersion, "2025-11-25"},
		{hdrAccept, "a"},
		{hdrOrigin, ""},
	} {
		if got := headerValue(h, tc.key); got != tc.want || got != h.Get(tc.key) {
			t.Errorf("headerValue(%q) = %q, want %q as Header.Get", tc.key, got, tc.want)
		}
	}
}

// Host is compared with and without its port, IPv6 brackets aside, on
// either side (the allowed names are trimmed once, in NewHandler). The
// handler remembers the last Host it allowed: each Host is asked several
// times, in a random order, so that each is also asked right after
// others were allowed.
func TestHostAllowed(t *testing.T) {
	h := NewHandler(nil, &Options{AllowedHosts: append(slices.Clone(LoopbackHosts), "[fe80::1]", "Example.org:8443")})
	hosts := map[string]bool{
		"127.0.0.1:8080":    true,
		"localhost":         true,
		"LOCALHOST:1":       true,
		"[::1]:80":          true,
		"[::1]":             true,
		"[fe80::1]:80":      true,
		"example.org:8443":  true,
		"example.org":       false,
		"evil.example":      false,
		"evil.example:80":   false,
		"127.0.0.2:8080":    false,
		"[fe80::2]:80":      false,
		"localhost.evil:80": false,
	}
	for range 3 {
		for host, want := range hosts {
			if got := h.hostAllowed(host); got != want {
				t.Errorf("hostAllowed(%q) = %v, want %v", host, got, want)
			}
		}
	}
	if !NewHandler(nil, nil).hostAllowed("anything") {
		t.Error("no AllowedHosts: every Host must be accepted")
	}
}

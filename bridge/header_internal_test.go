package bridge

import (
	"net/http"
	"net/textproto"
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

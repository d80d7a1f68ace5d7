package bridge

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// A second Mcp-Method header that does not match is refused, as a second
// Mcp-Name is: whatever routed on the other value saw
// another method than the server will.
func TestSecondMcpMethodRefused(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	env, err := jsonrpc.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values []string
		want   string // "" when valid
	}{
		{[]string{"tools/list"}, ""},
		{[]string{"tools/list", "tools/call"}, "exactly one Mcp-Method header"},
		{[]string{"tools/list", "tools/list"}, "exactly one Mcp-Method header"},
		{[]string{"tools/call", "tools/list"}, "exactly one Mcp-Method header"},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header[hdrMethod] = tc.values
		got := checkHeaders(r, body, &env, "")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%q: refused: %s", tc.values, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%q: got %q, want %q in it", tc.values, got, tc.want)
		}
	}
}

package sandbox

import (
	"slices"
	"testing"
)

// InheritedEnv keeps what is not the bridge's: its own variables (any
// case of the prefix), the owner tag, and any variable holding a secret
// stay out.
func TestInheritedEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "BRIDGE_AUTH_TOKENS=tok-1", "bridge_x=1", OwnerEnv + "=me",
		"COPY=xx tok-1 yy", "API_KEY=k", "=weird", "EMPTY="}
	got := InheritedEnv(environ, []string{"", "tok-1"})
	want := []string{"PATH=/bin", "API_KEY=k", "EMPTY="}
	if !slices.Equal(got, want) {
		t.Fatalf("InheritedEnv = %q, want %q", got, want)
	}
}

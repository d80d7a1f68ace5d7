package auth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/auth"
)

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toks, err := auth.ReadTokenFile(write("tokens", "# the team's\n  alpha  \n\nbeta\n#gamma\n"))
	if err != nil || !slices.Equal(toks, []string{"alpha", "beta"}) {
		t.Errorf("tokens %q, %v; want [alpha beta]", toks, err)
	}
	// An empty file must never mean "no authentication".
	empty := write("empty", "# none yet\n\n")
	if _, err := auth.ReadTokenFile(empty); err == nil || err.Error() != empty+" holds no token (one per line)" {
		t.Errorf("a file without a token: %v", err)
	}
	if _, err := auth.ReadTokenFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
}

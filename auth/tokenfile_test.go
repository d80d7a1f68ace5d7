package auth_test

import (
	"context"
	"errors"
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

// An option of OAuth alone, given without what it belongs to, is refused,
// naming it, rather than ignored.
func TestOAuthOptionsAlone(t *testing.T) {
	for _, tc := range []struct {
		o     auth.Options
		field string
	}{
		{auth.Options{ResourceURL: "https://r/mcp"}, "auth.Options.Issuer"},
		{auth.Options{Scopes: []string{"mcp"}}, "auth.Options.Scopes"},
		{auth.Options{TokenTypes: []string{"at+jwt"}}, "auth.Options.TokenTypes"},
		{auth.Options{ClientID: "bridge"}, "auth.Options.ClientID"},
		{auth.Options{StaticTokens: []string{"tok"}, ClientSecret: "s"}, "auth.Options.ClientID"},
		{auth.Options{Issuer: "https://as.example", ResourceURL: "https://r/mcp", ClientID: "bridge", ClientSecret: "s"}, "auth.Options.ClientID"},
	} {
		_, err := auth.New(context.Background(), &tc.o)
		var oe *auth.OptionError
		if !errors.As(err, &oe) || oe.Option() != tc.field {
			t.Errorf("%+v: %v, want an OptionError of %s", tc.o, err, tc.field)
		}
	}
	if _, err := auth.New(context.Background(), &auth.Options{StaticTokens: []string{"tok"}}); err != nil {
		t.Errorf("static tokens alone: %v", err)
	}
}

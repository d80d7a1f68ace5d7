package deploy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in      string
		kind    Kind
		pkg     string
		version string
		cmd     []string
		name    string
	}{
		{"npx:@modelcontextprotocol/server-everything@2025.1.14", KindNPX, "@modelcontextprotocol/server-everything", "2025.1.14",
			[]string{"--", "npx", "--no", "@modelcontextprotocol/server-everything@2025.1.14"}, "modelcontextprotocol-server-everything"},
		{"npx:left-pad@1.3.0-beta.1", KindNPX, "left-pad", "1.3.0-beta.1", []string{"--", "npx", "--no", "left-pad@1.3.0-beta.1"}, "left-pad"},
		{"uvx:mcp-server-fetch==2025.4.7", KindUVX, "mcp-server-fetch", "2025.4.7", []string{"--", "mcp-server-fetch"}, "mcp-server-fetch"},
		{"uvx:Some_Pkg==1.0rc2.post1", KindUVX, "Some_Pkg", "1.0rc2.post1", []string{"--", "Some_Pkg"}, "some-pkg"},
		{"go:github.com/acme/tools/cmd/mcp-server@v1.4.2", KindGo, "github.com/acme/tools/cmd/mcp-server", "v1.4.2", []string{"--", "/usr/local/bin/mcp-server"}, "mcp-server"},
		{"go:example.com/srv/v2@v2.0.0-20240101120000-abcdef123456", KindGo, "example.com/srv/v2", "v2.0.0-20240101120000-abcdef123456", []string{"--", "/usr/local/bin/srv"}, "srv"},
	} {
		s, err := ParseSpec(c.in)
		if err != nil {
			t.Errorf("ParseSpec(%q): %v", c.in, err)
			continue
		}
		if s.Kind != c.kind || s.Package != c.pkg || s.Version != c.version {
			t.Errorf("ParseSpec(%q) = %+v", c.in, s)
		}
		if !slices.Equal(s.Command(), c.cmd) {
			t.Errorf("%q: command %q; want %q", c.in, s.Command(), c.cmd)
		}
		if s.Name() != c.name {
			t.Errorf("%q: name %q; want %q", c.in, s.Name(), c.name)
		}
		if s.String() != c.in {
			t.Errorf("%q: String() = %q", c.in, s.String())
		}
	}
}

func TestParseSpecRefusesUnpinnedAndUnsafe(t *testing.T) {
	for in, want := range map[string]string{
		"@scope/pkg@1.0.0":                 "want npx:",
		"pip:requests==2.0":                `unknown kind "pip"`,
		"npx:pkg":                          "no version",
		"npx:@scope/pkg":                   "no version",
		"npx:pkg@latest":                   "must be exact",
		"npx:pkg@^1.2.0":                   "must be exact",
		"npx:pkg@1.2":                      "must be exact",
		"npx:Pkg@1.2.3":                    "not an npm package name",
		"npx:pkg;rm -rf /@1.2.3":           "not an npm package name",
		"npx:pkg@1.2.3 && curl evil":       "must be exact",
		"uvx:pkg":                          "no version",
		"uvx:pkg>=1.0":                     "no version",
		"uvx:pkg==1.*":                     "one exact release",
		"uvx:pkg[cli]==1.0":                "not a Python package name",
		"uvx:pkg==1.0;os_name=='nt'":       "one exact release",
		"go:github.com/a/b":                "no version",
		"go:github.com/a/b@latest":         "semantic version",
		"go:github.com/a/b@main":           "semantic version",
		"go:github.com/a/b@1.2.3":          "semantic version",
		"go:/etc/passwd@v1.0.0":            "not a Go package path",
		"go:github.com/a/../b@v1.0.0":      "not a Go package path",
		"go:localmodule/cmd@v1.0.0":        "not a Go package path",
		"go:github.com/a/b c@v1.0.0":       "not a Go package path",
		"go:github.com/a/b@v1.0.0\nRUN id": "semantic version",
	} {
		_, err := ParseSpec(in)
		if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSpec(%q) = %v; want ErrSpec containing %q", in, err, want)
		}
	}
}

func TestImageTag(t *testing.T) {
	s := &Spec{Kind: KindNPX, Package: "x", Version: "1.2.3-rc.1+build.5"}
	if got := s.ImageTag(); got != "1.2.3-rc.1_build.5" {
		t.Fatalf("ImageTag = %q", got)
	}
}

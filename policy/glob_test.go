package policy

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"delete_*", "delete_file", true},
		{"delete_*", "delete_", true},
		{"delete_*", "undelete_file", false},
		{"*_admin", "user_admin", true},
		{"*_admin", "user_admin2", false},
		{"get_?", "get_a", true},
		{"get_?", "get_ab", false},
		{"get_?", "get_é", true}, // ? is one character, not one byte
		{"send_email", "send_email", true},
		{"send_email", "send_emails", false},
		{"file:///docs/*", "file:///docs/a/b/c.txt", true}, // * crosses '/'
		{"file:///docs/*", "file:///etc/passwd", false},
		{"*a*b*", "xxaxxbxx", true},
		{"*a*b*", "xxbxxaxx", false},
		{`literal\*`, "literal*", true},
		{`literal\*`, "literalx", false},
		{`\?`, "?", true},
		{"*", "", true},
		{"**", "anything", true},
		{"Delete_*", "delete_x", false}, // case-sensitive
	} {
		g, err := parseGlob(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := g.match(c.s); got != c.want {
			t.Errorf("%q matching %q = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
	for _, bad := range []string{"", `ends\`, "\xff"} {
		if _, err := parseGlob(bad); err == nil {
			t.Errorf("parseGlob(%q) accepted", bad)
		}
	}
}

// globRegexp is the meaning of a glob, stated as a regular expression.
func globRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			i++
			_, n := utf8.DecodeRuneInString(p[i:])
			b.WriteString(regexp.QuoteMeta(p[i : i+n]))
			i += n - 1
		default:
			_, n := utf8.DecodeRuneInString(p[i:])
			b.WriteString(regexp.QuoteMeta(p[i : i+n]))
			i += n - 1
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// FuzzGlob checks the matcher against the regular expression that states
// what a glob means.
func FuzzGlob(f *testing.F) {
	f.Add("delete_*", "delete_file")
	f.Add("*a*b?", "xaxbxbc")
	f.Add(`a\*?`, "a*é")
	f.Add("file:///*/x", "file:///a/b/x")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		g, err := parseGlob(pattern)
		if err != nil || !utf8.ValidString(s) {
			return
		}
		if got, want := g.match(s), globRegexp(pattern).MatchString(s); got != want {
			t.Fatalf("%q matching %q = %v, the regexp says %v", pattern, s, got, want)
		}
	})
}

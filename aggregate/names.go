package aggregate

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// Names advertised by an aggregate: PREFIX + Separator + NAME.
//
// The spec's rules for a tool's name (server/tools, "Tool Names",
// 2025-11-25): "Tool names SHOULD be between 1 and 128 characters in
// length" and "The following SHOULD be the only allowed characters:
// uppercase and lowercase ASCII letters (A-Z, a-z), digits (0-9),
// underscore (_), dash (-), and dot (.)". Common clients cut at 64, so
// an advertised name keeps within 64 (MaxNameLength).
const (
	// MaxNameLength bounds an advertised name.
	MaxNameLength = 64
	// DefaultSeparator joins a member's prefix and an item's name.
	DefaultSeparator = "__"
	// MaxPrefixLength bounds a prefix, so that a shortened name keeps
	// room for the item's own name and its hash.
	MaxPrefixLength = 32
	// hashLength is the length of the hash a shortened name ends with:
	// 10 base32 characters, 50 bits.
	hashLength = 10
)

// validNameChar reports whether c may appear in an advertised name.
func validNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}

func validName(s string) bool {
	if s == "" || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !validNameChar(s[i]) {
			return false
		}
	}
	return true
}

var hashEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Advertise is the name an aggregate advertises a tool or prompt named
// name of a member under, given the member's prefix (empty: its name is
// the prefix, as Member.Prefix) and the separator (empty:
// DefaultSeparator): what a client of the aggregate knows it by, and what
// the member's audit lines write beside its own name.
func Advertise(member, prefix, sep, name string) string {
	return advertise(cmp.Or(prefix, member), cmp.Or(sep, DefaultSeparator), name)
}

// advertise returns the name an item named name of the member whose
// prefix is prefix is advertised under: prefix+sep+name when that is a
// valid name, else a shortened form, prefix+sep+ the valid characters of
// name cut to fit + "-" + a hash of name. It depends only on its
// arguments, never on the other members (agentgateway#495: names that
// changed when a server was added broke clients' saved tool lists).
func advertise(prefix, sep, name string) string {
	full := prefix + sep + name
	if validName(full) {
		return full
	}
	sum := sha256.Sum256([]byte(name))
	h := strings.ToLower(hashEncoding.EncodeToString(sum[:]))[:hashLength]
	room := MaxNameLength - len(prefix) - len(sep) - 1 - hashLength
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(sep)
	for i := 0; i < len(name) && b.Len() < len(prefix)+len(sep)+room; i++ {
		if validNameChar(name[i]) {
			b.WriteByte(name[i])
		}
	}
	b.WriteByte('-')
	b.WriteString(h)
	return b.String()
}

// checkPrefixes refuses prefixes that could make two members advertise
// one name. Names are prefix+sep+name; those of members i and j can be
// equal exactly when one of prefix_i+sep and prefix_j+sep begins the
// other (the same prefix twice; or "a" and "a__b" with "__"; or "a_"
// and "a" with "__", since "a_"+"__"+"x" is "a"+"__"+"__x"). Refusing
// that here decides every collision at configuration time, whatever
// the members' lists hold now or later, with one line naming both.
func checkPrefixes(members []Member, prefixes []string, sep string) error {
	for i := range members {
		p := prefixes[i]
		if p == "" || len(p) > MaxPrefixLength || !validName(p) {
			return fmt.Errorf("aggregate member %q: prefix %q must be 1 to %d characters of A-Z a-z 0-9 _ - . (give the member a Prefix)", members[i].Name, p, MaxPrefixLength)
		}
		for j := range i {
			a, b := prefixes[j]+sep, p+sep
			if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return fmt.Errorf("aggregate members %q and %q would advertise the same names (prefixes %q and %q with separator %q): give one of them another Prefix", members[j].Name, members[i].Name, prefixes[j], p, sep)
			}
		}
	}
	return nil
}

package aggregate

import (
	"strings"
	"testing"
)

// An advertised name is PREFIX__NAME when that is valid, else a
// shortened form within 64 valid characters that depends only on the
// prefix, separator and name: the hashes are pinned, since a client keeps
// the names it saw (a change of the scheme renames tools).
func TestAdvertise(t *testing.T) {
	long := strings.Repeat("x", 70)
	for _, tc := range []struct{ prefix, sep, name, want string }{
		{"fs", "__", "read_file", "fs__read_file"},
		{"fs", ".", "read-file.v2", "fs.read-file.v2"},
		{"fs", "__", "read file", "fs__readfile-cikbjdv7my"},
		{"fs", "__", long, "fs__" + strings.Repeat("x", 49) + "-y4n5ccjcpy"},
		{"fs", "__", "ünïcode", "fs__ncode-"},
	} {
		got := advertise(tc.prefix, tc.sep, tc.name)
		if !validName(got) {
			t.Errorf("advertise(%q, %q, %q) = %q: not a valid name", tc.prefix, tc.sep, tc.name, got)
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("advertise(%q, %q, %q) = %q, want %q", tc.prefix, tc.sep, tc.name, got, tc.want)
		}
		if again := advertise(tc.prefix, tc.sep, tc.name); again != got {
			t.Errorf("advertise is not deterministic: %q then %q", got, again)
		}
	}
	if advertise("fs", "__", long+"a") == advertise("fs", "__", long+"b") {
		t.Error("two long names that differ after the cut share their advertised name")
	}
}

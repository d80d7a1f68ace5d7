package policy

import (
	"fmt"
	"strings"
	"testing"
)

// openNames holds at most maxOpenNames names of at most maxOpenName bytes.
func TestOpenNamesBounded(t *testing.T) {
	p, err := Parse("test.yaml", []byte("tools:\n  deny: [\"*_admin\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := &p.tools
	for i := range 3 * maxOpenNames {
		name := fmt.Sprintf(`"tool_%d"`, i)
		if i%2 == 1 {
			name = fmt.Sprintf(`"tool_%d_admin"`, i)
		}
		if got, want := r.open.openToAll(r, []byte(name)), i%2 == 0; got != want {
			t.Fatalf("%s: open %v", name, got)
		}
		if n := len(r.open.names); n > maxOpenNames {
			t.Fatalf("%d names kept", n)
		}
	}
	long := `"` + strings.Repeat("x", maxOpenName) + `"`
	if !r.open.openToAll(r, []byte(long)) {
		t.Fatal("a long name is not open")
	}
	if _, kept := r.open.names[long]; kept {
		t.Fatal("a name longer than maxOpenName kept")
	}
}

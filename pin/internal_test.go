package pin

import "testing"

// kindOfList and kindOfCall find each kind by its methods, and nothing
// else.
func TestKindOf(t *testing.T) {
	for _, k := range Kinds {
		if got := kindOfList(k.Method); got != k {
			t.Errorf("kindOfList(%q) = %v, want %s", k.Method, got, k.Name)
		}
		if k.call != "" {
			if got := kindOfCall(k.call); got != k {
				t.Errorf("kindOfCall(%q) = %v, want %s", k.call, got, k.Name)
			}
		}
	}
	for _, m := range []string{"", "tools/call", "resources/read", "ping", "tools/list "} {
		if kindOfList(m) != nil {
			t.Errorf("kindOfList(%q) is a kind", m)
		}
	}
	for _, m := range []string{"", "tools/list", "resources/read", "completion/complete"} {
		if kindOfCall(m) != nil {
			t.Errorf("kindOfCall(%q) is a kind", m)
		}
	}
}

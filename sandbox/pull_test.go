package sandbox

import (
	"errors"
	"testing"
)

// A PullPolicy reads as it is written, and nothing else.
func TestPullPolicyText(t *testing.T) {
	for _, p := range []PullPolicy{PullNever, PullMissing, PullAlways} {
		text, _ := p.MarshalText()
		var back PullPolicy
		if err := back.UnmarshalText(text); err != nil || back != p {
			t.Errorf("%q read back as %q, %v", text, back, err)
		}
	}
	var p PullPolicy
	if err := p.UnmarshalText([]byte("sometimes")); !errors.Is(err, ErrPullPolicy) {
		t.Errorf("sometimes: %v, want ErrPullPolicy", err)
	}
}

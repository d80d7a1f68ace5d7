package pool

import (
	"errors"
	"testing"
)

// An Era reads as it is written (and auto from nothing), and nothing else.
func TestEraText(t *testing.T) {
	for _, e := range []Era{EraAuto, EraLegacy, EraModern} {
		text, _ := e.MarshalText()
		var back Era
		if err := back.UnmarshalText(text); err != nil || back != e {
			t.Errorf("%q read back as %v, %v", text, back, err)
		}
	}
	var e Era = EraModern
	if err := e.UnmarshalText(nil); err != nil || e != EraAuto {
		t.Errorf("empty: %v, %v", e, err)
	}
	if err := e.UnmarshalText([]byte("old")); !errors.Is(err, ErrEra) {
		t.Errorf("old: %v, want ErrEra", err)
	}
	if _, err := ParseEra("old"); err == nil || err.Error() != `unknown child era "old": want auto, legacy or modern` {
		t.Errorf("ParseEra: %v", err)
	}
}

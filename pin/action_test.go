package pin_test

import (
	"errors"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/pin"
)

// An Action reads as it is written, and nothing else.
func TestActionText(t *testing.T) {
	for _, a := range []pin.Action{pin.Drop, pin.EndSession} {
		text, _ := a.MarshalText()
		var back pin.Action
		if err := back.UnmarshalText(text); err != nil || back != a {
			t.Errorf("%q read back as %q, %v", text, back, err)
		}
	}
	var a pin.Action
	if err := a.UnmarshalText([]byte("kill")); !errors.Is(err, pin.ErrAction) {
		t.Errorf("kill: %v, want ErrAction", err)
	}
}

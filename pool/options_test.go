package pool

import (
	"errors"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Validate refuses a negative Max or StateTTL, a Min above Max (DefaultMax
// when zero) and what peer.Limits refuses; zero and the negative values the
// fields document are valid.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{}, {Min: -1, MaxPerPrincipal: -1, EvictIdle: -1, KeepAlive: -1, Settle: -1},
		{Min: DefaultMax}, {Min: 3, Max: 3}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, tc := range []struct {
		o      Options
		option string
		msg    string
	}{
		{Options{Max: -1}, "pool.Options.Max", "-1: want 1 or more"},
		{Options{StateTTL: -1}, "pool.Options.StateTTL", "-1ns: want a positive duration"},
		{Options{Min: 5, Max: 2}, "pool.Options.Min", "Min 5 is above Max 2"},
		{Options{Min: DefaultMax + 1}, "pool.Options.Min", "Min 9 is above Max 8"},
		{Options{Limits: peer.Limits{MaxQueuedBytes: -1}}, "peer.Limits.MaxQueuedBytes", "-1: want 0 or more"},
	} {
		err := tc.o.Validate()
		var oe interface{ Option() string }
		if !errors.As(err, &oe) || oe.Option() != tc.option || err.Error() != tc.msg {
			t.Errorf("%+v: %v, want %s: %s", tc.o, err, tc.option, tc.msg)
		}
	}
	var b *BoundsError
	if !errors.As((&Options{Min: 5, Max: 2}).Validate(), &b) || *b != (BoundsError{5, 2}) {
		t.Errorf("Min above Max: no BoundsError{5, 2}")
	}
}

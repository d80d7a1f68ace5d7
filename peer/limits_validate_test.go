package peer_test

import (
	"errors"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Validate refuses a negative bound; zero (the default) and the negative
// timeouts and keep-alive (none) are valid.
func TestLimitsValidate(t *testing.T) {
	ok := peer.Limits{RequestTimeout: -1, InitializeTimeout: -1, KeepAlive: -1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	for _, tc := range []struct {
		l     peer.Limits
		field string
		msg   string
	}{
		{peer.Limits{MaxRequests: -1}, "MaxRequests", "-1: want 0 or more"},
		{peer.Limits{MaxQueuedBytes: -2}, "MaxQueuedBytes", "-2: want 0 or more"},
	} {
		var oe *peer.OptionError
		if err := tc.l.Validate(); !errors.As(err, &oe) || oe.Field != tc.field || err.Error() != tc.msg ||
			oe.Option() != "peer.Limits."+tc.field {
			t.Errorf("%+v: %v, want %s: %s", tc.l, err, tc.field, tc.msg)
		}
	}
}

package session

import (
	"errors"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Validate refuses a negative bound with an OptionError naming the field;
// zero (the default) and the timeouts' negative values (none) are valid;
// the limits shared with the pool are peer.Limits's to refuse.
func TestOptionsValidate(t *testing.T) {
	if err := (&Options{}).Validate(); err != nil {
		t.Fatalf("zero Options: %v", err)
	}
	if err := (&Options{IdleTimeout: -1, RequestTimeout: -1, InitializeTimeout: -1, MaxSessions: 1}).Validate(); err != nil {
		t.Fatalf("timeouts off: %v", err)
	}
	for _, tc := range []struct {
		o      Options
		option string
		msg    string
	}{
		{Options{MaxSessions: -5}, "session.Options.MaxSessions", "-5: want 1 or more"},
		{Options{MaxMessageBytes: -1}, "session.Options.MaxMessageBytes", "-1: want 1 or more"},
		{Options{LogMaxEvents: -1}, "session.Options.LogMaxEvents", "-1: want 1 or more"},
		{Options{LogMaxBytes: -1}, "session.Options.LogMaxBytes", "-1: want 1 or more"},
		{Options{MaxRequests: -1}, "peer.Limits.MaxRequests", "-1: want 0 or more"},
		{Options{MaxQueuedBytes: -1}, "peer.Limits.MaxQueuedBytes", "-1: want 0 or more"},
	} {
		err := tc.o.Validate()
		var oe interface{ Option() string }
		if !errors.As(err, &oe) || oe.Option() != tc.option || err.Error() != tc.msg {
			t.Errorf("%+v: %v, want %s: %s", tc.o, err, tc.option, tc.msg)
		}
	}
	var pe *peer.OptionError
	if !errors.As((&Options{MaxRequests: -1}).Validate(), &pe) || pe.Field != "MaxRequests" {
		t.Errorf("MaxRequests -1: not peer's OptionError")
	}
}

package aggregate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

type nopRouter struct{}

func (nopRouter) Route(*peer.Message) {}
func (nopRouter) Ended(error)         {}

// everythingLock pins what the everything-server offers now, as `bridge
// pin` would.
func everythingLock(t *testing.T) *pin.Lock {
	t.Helper()
	l := sandbox.NewLocal(&sandbox.LocalOptions{Command: childtest.EverythingServer(t), StopGrace: 2 * time.Second, Logger: logger(t)})
	proc, err := l.Launch(ctxT(t), "pin")
	if err != nil {
		t.Fatal(err)
	}
	conn := peer.New(proc, nopRouter{}, &peer.Options{Logger: logger(t)})
	lock, _, err := pin.Capture(ctxT(t), conn, pin.Inspection{})
	if cerr := conn.Close(ctxT(t)); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lock
}

// endSession is the interceptor of a pin enforcer of lock with
// --on-pin-violation end-session, whose end is end.
func endSession(lock *pin.Lock, end func(error)) peer.Interceptor {
	return pin.New(&pin.Options{Lock: lock, LockFile: "every.lock", OnViolation: pin.EndSession}).Interceptor(&pin.Hooks{End: end})
}

// With --on-pin-violation end-session, a member whose catalog offers
// what its lock refuses is down, whole (not only the refused tool): out
// of the lists, its calls refused with the enforcer's reason naming the
// member, in both eras; the other members go on.
func TestPinEndSessionTakesMemberDown(t *testing.T) {
	lock := everythingLock(t)
	delete(lock.Tools, "test_simple_text") // offered, not pinned
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members[1].CatalogIntercept = func(end func(error)) peer.Interceptor { return endSession(lock, end) }
	})
	if err := f.agg.Ready(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	down := f.agg.Down()
	if err := down["every"]; err == nil || !strings.Contains(err.Error(), `tool "test_simple_text"`) || !strings.Contains(err.Error(), "end-session") {
		t.Fatalf("members down: %v; want every, for its tool test_simple_text and end-session", down)
	}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			cs := f.connect(t, version, nil)
			for _, name := range listed(t, cs) {
				if strings.HasPrefix(name, "every__") {
					t.Errorf("tools/list holds %s: member every is down for its pin violation", name)
				}
			}
			msg := callErr(t, cs, "every__test_image_content", nil)
			if !strings.Contains(msg, `aggregate member "every" is unavailable`) || !strings.Contains(msg, "test_simple_text") {
				t.Errorf("a call of the member down: %q; want it named, with the pin violation", msg)
			}
			if got := callText(t, cs, "test__echo", map[string]any{"text": "hi"}); got != "hi" {
				t.Errorf("test__echo: %q", got)
			}
		})
	}
}

// With --on-pin-violation end-session, a member child whose own lists
// come to hold what the lock refuses (it adds a tool mid-session) ends
// that member for its session, as the session would end on the member's
// own path: the member's tools leave that session's list, its calls get
// the enforcer's reason; the session's other members go on, and another
// session still uses the member.
func TestPinEndSessionEndsMemberForSession(t *testing.T) {
	lock := everythingLock(t)
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members[1].Intercept = func(_ string, end func(error)) (peer.Interceptor, func(error)) { return endSession(lock, end), nil }
	})
	changed := make(chan struct{}, 8)
	cs := f.connect(t, "2025-11-25", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	if got := callText(t, cs, "every__test_simple_text", nil); got == "" {
		t.Fatal("every__test_simple_text answered nothing")
	}
	callText(t, cs, "every__test_trigger_tool_change", nil)
	select {
	case <-changed:
	case <-ctxT(t).Done():
		t.Fatal("no tools/list_changed after test_trigger_tool_change")
	}
	for _, name := range listed(t, cs) {
		if strings.HasPrefix(name, "every__") {
			t.Errorf("tools/list holds %s after member every offered a tool its lock refuses", name)
		}
	}
	msg := callErr(t, cs, "every__test_simple_text", nil)
	if !strings.Contains(msg, `aggregate member "every" was ended for this session`) || !strings.Contains(msg, "end-session") {
		t.Errorf("a call of the ended member: %q", msg)
	}
	if got := callText(t, cs, "test__echo", map[string]any{"text": "hi"}); got != "hi" {
		t.Errorf("test__echo in the same session: %q", got)
	}
	other := f.connect(t, "2025-11-25", nil)
	if got := callText(t, other, "every__test_simple_text", nil); got == "" {
		t.Error("another session: every__test_simple_text answered nothing")
	}
}

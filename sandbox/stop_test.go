package sandbox

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeChild is the timer side of a child for the escalation: it records the
// steps taken and when, and exits at the step named by exitOn.
type fakeChild struct {
	exitOn string // "stdin", "TERM", "KILL" or "" (never exits by itself)
	exited chan struct{}
	start  time.Time

	mu    sync.Mutex
	steps []string
	at    []time.Duration
}

func newFakeChild(exitOn string) *fakeChild {
	return &fakeChild{exitOn: exitOn, exited: make(chan struct{}), start: time.Now()}
}

func (c *fakeChild) step(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steps = append(c.steps, name)
	c.at = append(c.at, time.Since(c.start))
	if name == c.exitOn {
		// Exits a little later, as a real child does, not within the call.
		go func() {
			time.Sleep(time.Millisecond)
			close(c.exited)
		}()
	}
}

func (c *fakeChild) escalation(grace time.Duration, hurry <-chan struct{}) *escalation {
	return &escalation{
		grace:      grace,
		exited:     c.exited,
		hurry:      hurry,
		logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		closeStdin: func() error { c.step("stdin"); return nil },
		terminate:  func() { c.step("TERM") },
		kill:       func() { c.step("KILL") },
	}
}

// TestEscalation runs the stop steps against children that give in at
// each step, on synctest's clock: the grace periods are exact, and nothing
// sleeps for real.
func TestEscalation(t *testing.T) {
	const grace = 5 * time.Second
	for _, tc := range []struct {
		name   string
		exitOn string
		hurry  time.Duration // when a caller gives up; 0: never
		want   stopStep
		steps  []string
		at     []time.Duration
	}{
		{"exits at stdin EOF", "stdin", 0, stoppedByStdin, []string{"stdin"}, []time.Duration{0}},
		{"exits at SIGTERM", "TERM", 0, stoppedByTerminate, []string{"stdin", "TERM"}, []time.Duration{0, grace}},
		{"ignores SIGTERM", "KILL", 0, stoppedByKill, []string{"stdin", "TERM", "KILL"}, []time.Duration{0, grace, 2 * grace}},
		{"never exits", "", 0, stoppedByKill, []string{"stdin", "TERM", "KILL"}, []time.Duration{0, grace, 2 * grace}},
		{"hurried before SIGTERM", "KILL", grace / 2, stoppedByKill, []string{"stdin", "KILL"}, []time.Duration{0, grace / 2}},
		{"hurried after SIGTERM", "KILL", grace + time.Second, stoppedByKill, []string{"stdin", "TERM", "KILL"}, []time.Duration{0, grace, grace + time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newFakeChild(tc.exitOn)
				hurry := make(chan struct{})
				if tc.hurry > 0 {
					time.AfterFunc(tc.hurry, func() { close(hurry) })
				}
				got := c.escalation(grace, hurry).run()
				if got != tc.want || !slices.Equal(c.steps, tc.steps) || !slices.Equal(c.at, tc.at) {
					t.Errorf("run = %d after steps %v at %v; want %d after %v at %v", got, c.steps, c.at, tc.want, tc.steps, tc.at)
				}
				if tc.exitOn != "" {
					<-c.exited // its goroutine ends in the bubble
				}
			})
		})
	}
}

// TestEscalationHurriedAtOnce: a caller that gave up before Stop began
// gets SIGKILL at once, without the gentle steps' waits.
func TestEscalationHurriedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeChild("")
		hurry := make(chan struct{})
		close(hurry)
		e := c.escalation(time.Hour, hurry)
		var stdinErr error = errors.New("half-close refused")
		e.closeStdin = func() error { c.step("stdin"); return stdinErr } // logged, not fatal
		if got := e.run(); got != stoppedByKill || !slices.Equal(c.steps, []string{"stdin", "KILL"}) || c.at[1] != 0 {
			t.Errorf("run = %d after %v at %v; want SIGKILL at once", got, c.steps, c.at)
		}
	})
}

// TestStopBudget: the budget covers the escalation's two grace periods and
// the engine's API calls, for any grace, and a zero grace means the default.
func TestStopBudget(t *testing.T) {
	for _, tc := range []struct{ grace, want time.Duration }{
		{0, 2*DefaultStopGrace + 30*time.Second},
		{-time.Second, 2*DefaultStopGrace + 30*time.Second},
		{100 * time.Millisecond, 30*time.Second + 200*time.Millisecond},
		{time.Minute, 150 * time.Second},
	} {
		if got := StopBudget(tc.grace); got != tc.want {
			t.Errorf("StopBudget(%v) = %v, want %v", tc.grace, got, tc.want)
		}
	}
	// The slowest escalation (a child that only SIGKILL ends) takes two
	// grace periods, within the budget.
	synctest.Test(t, func(t *testing.T) {
		const grace = 7 * time.Second
		c := newFakeChild("")
		c.escalation(grace, nil).run()
		if took := time.Since(c.start); took > StopBudget(grace)-stopSlack {
			t.Errorf("the escalation took %v, beyond its budget's grace periods %v", took, StopBudget(grace)-stopSlack)
		}
	})
}

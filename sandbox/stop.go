package sandbox

// Stopping a child, the same way for every implementation: the escalation
// and the budget a caller gives it.

import (
	"log/slog"
	"time"
)

// stopSlack is what StopBudget adds to the grace periods: room for the
// Docker Engine's API calls of a stop (kill, inspect, remove), each bounded
// by dockerAPITimeout, and for a local child's last stderr lines.
const stopSlack = dockerAPITimeout

// StopBudget is how long a caller should let Stop (or a launcher's or a
// pool's Close) run before giving up, for a grace period of grace (zero or
// negative: DefaultStopGrace): the escalation's two grace periods (after
// stdin is closed, after SIGTERM) and 30 s for the engine's API calls.
// A child that cooperates, or that SIGKILL ends, is gone well within it;
// when the caller's context ends first, Stop skips to SIGKILL and returns
// an error, so a budget that is too short costs the gentle steps, never a
// child left running.
func StopBudget(grace time.Duration) time.Duration {
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	return 2*grace + stopSlack
}

// escalation stops one child in bounded, escalating steps, as the MCP stdio
// transport asks (2025-11-25, Lifecycle, Shutdown, stdio): "the client
// SHOULD initiate shutdown by: 1. First, closing the input stream to the
// child process (the server) 2. Waiting for the server to exit, or sending
// SIGTERM if the server does not exit within a reasonable time 3. Sending
// SIGKILL if the server does not exit within a reasonable time after
// SIGTERM". Local processes and containers differ only in how each step is
// taken, which the functions say.
type escalation struct {
	grace  time.Duration
	exited <-chan struct{} // closed once the child has exited
	// hurry is closed when the stop must end now (a Stop caller gave up,
	// the launcher is aborting): the steps left skip to kill.
	hurry  <-chan struct{}
	logger *slog.Logger
	// after starts a grace period; nil means time.After. Tests of real
	// processes replace it to decide when a period ends.
	after func(time.Duration) <-chan time.Time

	closeStdin func() error // step 1
	terminate  func()       // step 2: SIGTERM
	kill       func()       // step 3: SIGKILL
}

// stopStep says how far an escalation went.
type stopStep int

const (
	stoppedByStdin     stopStep = iota // the child exited after its stdin closed
	stoppedByTerminate                 // ... after SIGTERM
	stoppedByKill                      // it was sent SIGKILL
)

// run takes the steps until the child has exited, and returns the last one
// taken. It returns once the child has exited or was sent SIGKILL; it does
// not wait for the kill to take effect.
func (e *escalation) run() stopStep {
	if err := e.closeStdin(); err != nil {
		e.logger.Warn("cannot close the MCP server's stdin", "error", err)
	}
	if e.wait() {
		return stoppedByStdin
	}
	if !e.hurried() {
		e.logger.Info("MCP server still running after stdin was closed; sending SIGTERM", "grace", e.grace)
		e.terminate()
		if e.wait() {
			return stoppedByTerminate
		}
	}
	if e.hurried() {
		e.logger.Warn("stopping the MCP server in a hurry; sending SIGKILL")
	} else {
		e.logger.Warn("MCP server still running after SIGTERM; sending SIGKILL", "grace", e.grace)
	}
	e.kill()
	return stoppedByKill
}

// wait reports whether the child exited within the grace period. It returns
// false at once when hurried.
func (e *escalation) wait() bool {
	after := e.after
	if after == nil {
		after = time.After // not a leak: an unreferenced timer is collected
	}
	select {
	case <-e.exited:
		return true
	case <-e.hurry:
	case <-after(e.grace):
	}
	select { // exited meanwhile counts too
	case <-e.exited:
		return true
	default:
		return false
	}
}

func (e *escalation) hurried() bool {
	select {
	case <-e.hurry:
		return true
	default:
		return false
	}
}

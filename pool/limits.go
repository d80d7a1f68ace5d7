package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// The limits a pool honours (Options.Limits), as sessions honour theirs:
// a request timeout answered with peer.CodeRequestTimeout and a
// notifications/cancelled to the child, a bound on the requests in flight
// (peer.ErrTooManyRequests), one on the bytes waiting for a child's stdin
// (peer.ErrBusy), the governor's hook, and a bound on the initialize of a
// legacy child. A pool has no sessions: its bound on requests in flight
// is Limits.MaxRequests for each child it may run (Options.Max), so that
// a pool of one child admits what one session does.

// limitsDefaults fills o's limits, and the peer's bound on queued bytes
// from them unless Options.Peer sets its own.
func limitsDefaults(o *Options) {
	o.Limits = o.Limits.WithDefaults()
	if o.Peer.MaxQueuedBytes <= 0 {
		o.Peer.MaxQueuedBytes = int(o.Limits.MaxQueuedBytes)
	}
}

// maxInflight is the pool's bound on requests in flight.
func (p *Pool) maxInflight() int64 {
	return int64(p.opts.Limits.MaxRequests) * int64(p.opts.Max)
}

// admit counts a request in flight (waiting for a child or sent to one;
// not a parked call, nor a subscription stream), or refuses it with
// peer.ErrTooManyRequests when the pool has its bound already. The
// governor hears of the new count. Each admit that succeeds is followed
// by one leave.
func (p *Pool) admit() error {
	n := p.inflight.Add(1)
	if n > p.maxInflight() {
		p.inflight.Add(-1)
		return fmt.Errorf("%w: the limit is %d for this server's revision %s clients (--max-requests-per-session for each of its --pool-max children); wait for answers, or send the request again later",
			peer.ErrTooManyRequests, p.maxInflight(), Version)
	}
	if f := p.opts.Limits.Inflight; f != nil {
		f(int(n))
	}
	return nil
}

// leave ends what admit counted. The last one wakes WaitIdle, which
// waits for the count too: a request has left the pool only once it is
// no longer counted against the bound.
func (p *Pool) leave() {
	n := p.inflight.Add(-1)
	if f := p.opts.Limits.Inflight; f != nil {
		f(int(n))
	}
	if n == 0 {
		p.mu.Lock()
		p.signalLocked()
		p.mu.Unlock()
	}
}

// sendFailed is the error of a request its child's connection did not
// take: its stdin full (peer.ErrBusy: the client may send it again), or
// the child gone.
func (p *Pool) sendFailed(err error) error {
	if errors.Is(err, peer.ErrBusy) {
		return fmt.Errorf("%w (the limit is %d, --max-queued-bytes); retry later", err, p.opts.Peer.MaxQueuedBytes)
	}
	return fmt.Errorf("%w: %w", ErrLaunch, err)
}

// newTimeouts returns the one timer of the request timeouts of a pool's
// calls (nil: Limits.RequestTimeout negative). A timer per call cost an
// allocation and two updates of the runtime's timer heap per request.
func newTimeouts(l peer.Limits) *peer.Timeouts {
	if l.RequestTimeout > 0 {
		return peer.NewTimeouts(l.RequestTimeout)
	}
	return nil
}

// Expire implements peer.Expirer: the request timeout of the round being
// served passed. The call's wait answers it (timedOut).
func (c *call) Expire() {
	c.late.Store(true)
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// timedOut ends a call its child did not answer in time: "the receiver
// SHOULD issue a cancellation notification for that request and stop
// waiting for a response" (basic/lifecycle, Timeouts). The client gets
// the error a session's client gets.
func (p *Pool) timedOut(c *call, rawID []byte) []byte {
	d := p.opts.Limits.RequestTimeout
	p.logger.Warn("a request timed out; answering it with an error and cancelling it at the MCP server",
		"method", c.req.Msg.Env.Method, "timeout", d, "hint", "raise --request-timeout if calls legitimately run longer")
	p.cancelCall(c, "the request timed out after "+d.String())
	return errorResponse(rawID, peer.CodeRequestTimeout,
		fmt.Sprintf("request timed out: the MCP server gave no answer within %s (--request-timeout)", d), nil)
}

// initContext bounds the initialize of a legacy child by
// Limits.InitializeTimeout, within ctx.
func (p *Pool) initContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := p.opts.Limits.InitializeTimeout; d > 0 {
		return context.WithTimeoutCause(ctx, d, errInitTimeout{d, p.opts.Limits.InitializeHint})
	}
	return context.WithCancel(ctx)
}

// errInitTimeout: a legacy child did not answer initialize in time.
type errInitTimeout struct {
	d    time.Duration
	hint string // Limits.InitializeHint
}

func (e errInitTimeout) Error() string {
	hint := ""
	if e.hint != "" {
		hint = "; " + e.hint
	}
	return fmt.Sprintf("the MCP server did not answer initialize within %s (--initialize-timeout); check that the command is an MCP server speaking stdio%s", e.d, hint)
}

// initFailed says why a legacy child's initialize failed: the timeout,
// when that was it.
func initFailed(ctx context.Context, err error) error {
	var t errInitTimeout
	if cause := context.Cause(ctx); errors.As(cause, &t) {
		return cause
	}
	return err
}

package pool

import (
	"errors"
	"fmt"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
)

// A principal's share of the pool. Options.Max is
// shared by every principal, and some requests hold a child for as long as
// their client likes: a parked call until its retry (up to StateTTL,
// renewed by each round), a subscription for as long as its stream is
// open, a call that set a log level for its duration; and a legacy child
// serves one principal only. So one principal could take every child, and
// every other principal's request waited. A principal now has at most its
// share of children: every child of its legacy groups (running or
// starting), and the modern children its log-level calls hold alone. A
// request that would need one more is refused with ErrPrincipalShare,
// unless it can run on a child the principal already has (then it waits
// there, as any request of a busy pool does); one of the principal's own
// idle children of another legacy key is stopped to make room first. The
// other principals keep Max minus the share, at least.
//
// Modern children are shared, but a principal's slow calls made the pool
// grow (each stalled child is a reason to start another) until Max, and
// then every other principal's request queued behind them. A principal
// whose in-flight calls alone occupy its share of stalled modern children
// queues its next request on them instead of growing the pool further
// (ownStalledLocked).

// ErrPrincipalShare: the request's principal already has its share of the
// pool's children (Options.MaxPerPrincipal), all of them busy.
var ErrPrincipalShare = errors.New("this client already holds its share of the MCP server's processes")

// share is the most children one principal may have.
func (p *Pool) share() int {
	n := p.opts.MaxPerPrincipal
	switch {
	case n > 0:
		return min(n, p.opts.Max)
	case n < 0 || !p.opts.PrivateCache:
		// Without authentication every client is the same principal: a
		// share would only take children from all of them.
		return p.opts.Max
	}
	return max(1, p.opts.Max/2)
}

// heldLocked counts the children principal has: every child of its legacy
// groups, running or starting (never shared across principals), and the
// modern children a call of its holds alone (a log level).
func (p *Pool) heldLocked(principal auth.Tag) int {
	n := 0
	for _, g := range p.groups {
		if g.key == modernKey {
			for _, ch := range g.children {
				if ch.alone != nil && ch.alone.req.Principal == principal {
					n++
				}
			}
			continue
		}
		if g.principal == principal {
			n += len(g.children) + g.starting
		}
	}
	return n
}

// atShareLocked reports whether c, on a child of g, may not take one more
// child for its principal: a legacy request whose principal has its share,
// or a modern log-level call (which takes a shared child for itself) whose
// principal has its share. Other modern requests share children and hold
// none.
func (p *Pool) atShareLocked(g *group, legacy bool, c *call) bool {
	share := p.share()
	if share >= p.opts.Max {
		return false
	}
	if legacy {
		return p.heldLocked(g.principal) >= share
	}
	return c.solo && p.heldLocked(c.req.Principal) >= share
}

// ownStalledLocked returns, when c's principal's calls alone occupy its
// share of g's modern children (their only calls, subscriptions aside,
// are its), the least loaded of those that c fits on; or nil. It is
// asked only when every child c could use is stalled.
func (p *Pool) ownStalledLocked(g *group, c *call) *child {
	share := p.share()
	if share >= p.opts.Max {
		return nil
	}
	n := 0
	var least *child
	for _, ch := range g.children {
		if ch.dead || !fits(ch, c) || !occupiedBy(ch, c.req.Principal) {
			continue
		}
		n++
		if least == nil || ch.inflight < least.inflight {
			least = ch
		}
	}
	if n < share {
		return nil
	}
	return least
}

// occupiedBy reports whether every call in flight on ch, subscriptions
// aside, is principal's, and there is one.
func occupiedBy(ch *child, principal auth.Tag) bool {
	if ch.inflight <= ch.listens {
		return false
	}
	for o := ch.calls; o != nil; o = o.nextOn {
		if !o.listen && o.req.Principal != principal {
			return false
		}
	}
	return true
}

// makeRoomLocked stops an idle child to make room for g: of another key,
// or, when g's principal has its share, of the principal's own other keys.
// If it did not, it says how long until a child of another principal may
// be stopped (see evictLocked).
func (p *Pool) makeRoomLocked(g *group, atShare bool) (bool, time.Duration) {
	if !atShare {
		return p.evictLocked(g, nil)
	}
	return p.evictLocked(g, func(og *group) bool {
		return og.key != modernKey && og.principal == g.principal
	})
}

// madeRoomLocked is makeRoomLocked's first answer.
func (p *Pool) madeRoomLocked(g *group, atShare bool) bool {
	ok, _ := p.makeRoomLocked(g, atShare)
	return ok
}

// shareError is the error of a request refused for its principal's share.
func (p *Pool) shareError() error {
	return fmt.Errorf("%w (%d of %d): its parked requests, subscriptions and requests with a log level keep theirs until they end; finish or cancel some first", ErrPrincipalShare, p.share(), p.opts.Max)
}

package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/peer"
)

// Churn of legacy children. A legacy pool is keyed by
// (principal, capabilities), and a key without a child starts one, at Max
// by stopping an idle child of another key: capabilities that differed in
// members no legacy child reads started a process per request (60
// capability sets, 60 starts, with no authentication needed). So:
//
//   - A legacy child is initialized with, and keyed by, the client
//     capabilities of revision 2025-11-25 that a server may act on, and
//     nothing else (legacyCapabilities): experimental, extension and
//     unknown members are left out, so that they make no key of their own.
//     The number of keys a principal can make is then bounded (75).
//   - At Max, a request whose key has no free child takes an idle child of
//     its principal initialized with fewer capabilities than it declared
//     (that child asks for nothing the client lacks) rather than stop a
//     child and start another (reusableLocked).
//   - Starts and stops for another key are counted (Stats.Started and
//     Evicted; the bridge's mcp_bridge_pool_children_started_total and
//     _evicted_total), so that an operator sees the churn and can raise
//     --pool-max.
//   - Principals never share a legacy child (isolation), so a pool serving
//     more principals than Max in turn started one per turn: 120 starts for
//     120 calls over 40 principals. At Max, a child of another principal is
//     now stopped to make room only once it has been idle
//     Options.EvictIdle (evictLocked); until then the request waits for a
//     child to free or to age, within its request timeout, and one that
//     gets none in time is refused with ErrBusy (503, Retry-After),
//     naming the flags to raise (noRoomError). A child is stopped for
//     another principal at most once per EvictIdle, so starts for other
//     principals are bounded by Max per EvictIdle, and a principal keeps
//     its child across a burst of its calls. The principal's own children
//     of other keys are stopped without waiting: that is no turn taken
//     from another client.

// DefaultEvictIdle is Options.EvictIdle's default: a child serves bursts
// of its principal's calls, and at most Max children a second are started
// for principals taking turns.
const DefaultEvictIdle = time.Second

// evictIdle is Options.EvictIdle, its default filled in.
func (p *Pool) evictIdle() time.Duration {
	switch d := p.opts.EvictIdle; {
	case d == 0:
		return DefaultEvictIdle
	case d < 0:
		return 0
	default:
		return d
	}
}

// ErrNoRoom: a legacy request got no child within its request timeout:
// every child was busy, or in use by other principals within EvictIdle.
// Errors wrapping it also match peer.ErrBusy, so that the front end
// answers 503 with Retry-After, as for a server not reading its input.
var ErrNoRoom = errors.New("no process of the MCP server came free for this client in time")

// noRoomError is the error of a request that waited for room in vain.
func (p *Pool) noRoomError() error {
	return &noRoom{fmt.Sprintf("%s: in %s (--request-timeout) all %d (--pool-max) were busy or in use by other clients within %s (--pool-evict-idle); send the request again later, or raise --pool-max (one client holds at most --pool-max-per-principal)",
		ErrNoRoom, p.opts.Limits.RequestTimeout, p.opts.Max, p.evictIdle())}
}

type noRoom struct{ msg string }

func (e *noRoom) Error() string        { return e.msg }
func (e *noRoom) Unwrap() error        { return ErrNoRoom }
func (e *noRoom) Is(target error) bool { return target == peer.ErrBusy }

// churn counts the children a pool starts, and those it stops to make
// room for another key (Stats, and the bridge's metrics); and holds the
// requests waiting for room at Max, in order.
type churn struct {
	started, evicted atomic.Int64
	// turns (under Pool.mu) are the legacy requests that found no room,
	// oldest first: only the first may stop another principal's child,
	// so that a request arriving as a child ages does not take the room
	// one waiting longer is owed, and no principal starves.
	turns []*call
}

// roomTurnLocked queues c for room, if it is not queued yet, and reports
// whether its turn has come.
func (p *Pool) roomTurnLocked(c *call) bool {
	if !slices.Contains(p.churn.turns, c) {
		p.churn.turns = append(p.churn.turns, c)
	}
	return p.churn.turns[0] == c
}

// leaveRoomTurnLocked takes c out of the queue for room, once it has a
// child or gave up; the next one's turn comes.
func (p *Pool) leaveRoomTurnLocked(c *call) {
	i := slices.Index(p.churn.turns, c)
	if i < 0 {
		return
	}
	p.churn.turns = slices.Delete(p.churn.turns, i, i+1)
	if len(p.churn.turns) == 0 {
		p.churn.turns = nil
	} else if i == 0 {
		p.signalLocked()
	}
}

// legacyCapabilities keeps of a client's capabilities (decoded) those a
// legacy child may act on, with their known members: roots (listChanged),
// sampling (context, tools), elicitation (form, url). Values are reduced
// to what they say: a flag is true or absent, a member an empty object.
func legacyCapabilities(v map[string]any) map[string]any {
	out := map[string]any{}
	if r, ok := v["roots"].(map[string]any); ok {
		m := map[string]any{}
		if r["listChanged"] == true {
			m["listChanged"] = true
		}
		out["roots"] = m
	}
	for name, members := range map[string][]string{"sampling": {"context", "tools"}, "elicitation": {"form", "url"}} {
		c, ok := v[name].(map[string]any)
		if !ok {
			continue
		}
		m := map[string]any{}
		for _, k := range members {
			if _, ok := c[k].(map[string]any); ok {
				m[k] = map[string]any{}
			}
		}
		out[name] = m
	}
	return out
}

// capsWithin reports whether the canonical capabilities a declare nothing
// b does not.
func capsWithin(a, b json.RawMessage) bool {
	var ma, mb map[string]map[string]any
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return false
	}
	for name, members := range ma {
		other, ok := mb[name]
		if !ok {
			return false
		}
		for k := range members {
			if _, ok := other[k]; !ok {
				return false
			}
		}
	}
	return true
}

// reusableLocked returns an idle child of another legacy key of g's
// principal, initialized with capabilities within g's, that c may run on;
// or nil.
func (p *Pool) reusableLocked(g *group, c *call) *child {
	for _, og := range p.groups {
		if og == g || og.key == modernKey || og.principal != g.principal || len(og.children) == 0 || !capsWithin(og.caps, g.caps) {
			continue
		}
		for _, ch := range og.children {
			if !ch.dead && ch.inflight == 0 && ch.holder == nil && fits(ch, c) {
				return ch
			}
		}
	}
	return nil
}

package pool

import (
	"encoding/json"
	"sync/atomic"
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
//     --pool-max. Principals never share a legacy child, so a pool serving
//     more principals than Max in turn still starts one per turn.

// churn counts the children a pool starts, and those it stops to make
// room for another key (Stats, and the bridge's metrics).
type churn struct {
	started, evicted atomic.Int64
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

package pool

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// subscriptions serves subscriptions/listen: "a long-lived notification
// stream from the server to the client ... It replaces the former
// resources/subscribe RPC and the HTTP GET endpoint"
// (basic/patterns/subscriptions).
//
// On a modern child the request passes through under an id of the pool's
// own (unique on the child, so the child's notifications, which carry it
// as their subscriptionId, say which subscription they belong to), and the
// client's id is put back on everything the child sends for it. On a
// legacy child the bridge does the work: it acknowledges the part of the
// filter the child's capabilities support, maps the child's list_changed
// notifications, and subscribes the child to resources (resources/subscribe,
// reference-counted per child, so two subscriptions to one URI make one
// child subscription).
type subscriptions struct {
	p  *Pool
	n  atomic.Int64
	mu sync.Mutex
	// byChild lists the subscriptions on each child.
	byChild map[*child][]*subscription
	// uris counts the legacy subscriptions per child and URI.
	uris map[*child]map[string]int
}

// subscription is one subscriptions/listen request in progress.
type subscription struct {
	c       *call
	ch      *child
	rawID   []byte // the client's id: the subscriptionId it sees
	childID string // the id the child knows it by (modern), as JSON
	legacy  bool
	filter  filter // legacy: the acknowledged part of the filter; under subscriptions.mu
}

// filter is the notifications filter of subscriptions/listen.
type filter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

func newSubscriptions(p *Pool) *subscriptions {
	return &subscriptions{p: p, byChild: make(map[*child][]*subscription), uris: make(map[*child]map[string]int)}
}

// usesLocked reports whether a subscription keeps ch running. Called under
// pool.mu (the lock order is pool.mu, then s.mu).
func (s *subscriptions) usesLocked(ch *child) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byChild[ch]) > 0
}

func (s *subscriptions) add(sub *subscription) {
	s.mu.Lock()
	s.byChild[sub.ch] = append(s.byChild[sub.ch], sub)
	s.mu.Unlock()
}

func (s *subscriptions) remove(sub *subscription) {
	s.mu.Lock()
	subs := slices.DeleteFunc(s.byChild[sub.ch], func(o *subscription) bool { return o == sub })
	if len(subs) == 0 {
		delete(s.byChild, sub.ch)
	} else {
		s.byChild[sub.ch] = subs
	}
	s.mu.Unlock()
}

// route hands a child's change notification to the subscriptions it
// belongs to, tagged with their subscriptionId.
func (s *subscriptions) route(ch *child, m *peer.Message) {
	s.mu.Lock()
	subs := slices.Clone(s.byChild[ch])
	filters := make([]filter, len(subs))
	for i, sub := range subs {
		filters[i] = sub.filter
	}
	s.mu.Unlock()
	params, _ := jsonrpc.Lookup(m.Data, "params")
	var uri string
	if m.Method == "notifications/resources/updated" {
		raw, _ := jsonrpc.Lookup(params, "uri")
		uri, _ = jsonrpc.StringValue(raw)
	}
	var childSub string
	if meta, ok := jsonrpc.Lookup(params, "_meta"); ok {
		if id, ok := jsonrpc.Lookup(meta, metaSubscriptionID); ok {
			childSub = string(id)
		}
	}
	for i, sub := range subs {
		var want bool
		if !sub.legacy {
			// "All notifications delivered on the stream carry
			// io.modelcontextprotocol/subscriptionId": the child's own
			// says whose it is.
			want = childSub == sub.childID
		} else {
			f := filters[i]
			switch m.Method {
			case "notifications/tools/list_changed":
				want = f.ToolsListChanged
			case "notifications/prompts/list_changed":
				want = f.PromptsListChanged
			case "notifications/resources/list_changed":
				want = f.ResourcesListChanged
			case "notifications/resources/updated":
				want = slices.Contains(f.ResourceSubscriptions, uri)
			}
		}
		// A caller that may not read the resource does not hear of it:
		// the one place that knows whom each update goes to decides, for
		// the subscriptions it would go to.
		if want && uri != "" && s.p.opts.Readable != nil && !s.p.opts.Readable(sub.c, uri) {
			want = false
		}
		if want {
			sub.c.push(item{kind: itemNotify, msg: jsonrpc.Message{Data: tag(m.Data, sub.rawID)}})
		}
	}
}

// ended: the child exited; its subscriptions end with it.
func (s *subscriptions) ended(ch *child) {
	s.mu.Lock()
	delete(s.uris, ch)
	s.mu.Unlock()
}

// closeAll ends every subscription gracefully, at shutdown.
func (s *subscriptions) closeAll() {
	s.mu.Lock()
	var all []*subscription
	for _, subs := range s.byChild {
		all = append(all, subs...)
	}
	s.mu.Unlock()
	for _, sub := range all {
		sub.c.push(item{kind: itemClosing})
	}
}

// tag sets params._meta's subscriptionId of a notification (or a result's
// _meta of a response) to id.
func tag(data, id []byte) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(data, &msg) != nil {
		return data
	}
	member := "params"
	if _, ok := msg["result"]; ok {
		member = "result"
	}
	obj := map[string]json.RawMessage{}
	if raw, ok := msg[member]; ok {
		_ = json.Unmarshal(raw, &obj)
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := obj["_meta"]; ok {
		_ = json.Unmarshal(raw, &meta)
	}
	meta[metaSubscriptionID] = id
	obj["_meta"], _ = json.Marshal(meta)
	msg[member], _ = json.Marshal(obj)
	out, _ := json.Marshal(msg)
	return out
}

// listen serves one subscriptions/listen until the client closes its
// stream (ctx), the child ends, or the pool closes.
func (s *subscriptions) listen(ctx context.Context, req *Request, emit func([]byte) error) ([]byte, error) {
	p := s.p
	rawID := req.Msg.Env.IDAt.In(req.Msg.Data)
	params, _ := jsonrpc.Lookup(req.Msg.Data, "params")
	var f filter
	if raw, ok := jsonrpc.Lookup(params, "notifications"); ok {
		if err := json.Unmarshal(raw, &f); err != nil {
			return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: notifications: "+err.Error(), nil), nil
		}
	}
	era, err := p.Era(ctx)
	if err != nil {
		return nil, err
	}
	c := newCall(p, req)
	c.legacy = era == EraLegacy
	c.listen = true
	sub := &subscription{c: c, rawID: rawID, legacy: era == EraLegacy}
	if sub.legacy {
		key, caps, err := legacyKey(req.Principal, req.Caps)
		if err != nil {
			return errorResponse(rawID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil), nil
		}
		if sub.ch, err = p.acquire(ctx, key, req.Principal, caps, true, false, c); err != nil {
			return nil, err
		}
	} else if sub.ch, err = p.acquire(ctx, modernKey, "", nil, false, false, c); err != nil {
		return nil, err
	}
	c.ch = sub.ch
	s.add(sub)
	defer func() {
		s.remove(sub)
		p.release(sub.ch, c, false)
	}()

	if sub.legacy {
		acked := s.subscribeLegacy(ctx, sub, f)
		defer s.unsubscribeLegacy(sub)
		ack, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
			"params": map[string]any{"_meta": map[string]json.RawMessage{metaSubscriptionID: rawID}, "notifications": acked}})
		if err := emit(ack); err != nil {
			return nil, err
		}
	} else {
		// A pool-wide unique id on the child, so that its notifications
		// name this subscription, whoever else listens on the child.
		sub.childID = strconv.Quote("mcpb-sub-" + strconv.FormatInt(s.n.Add(1), 10))
		data := jsonrpc.Rewrite(req.Msg.Data, jsonrpc.Edit{At: req.Msg.Env.IDAt, Raw: []byte(sub.childID)})
		env, err := jsonrpc.Parse(data)
		if err == nil {
			err = sub.ch.conn.Send(c, jsonrpc.Message{Data: data, Env: env})
		}
		if err != nil {
			return nil, err
		}
	}
	// "servers are encouraged to periodically emit an SSE comment line ...
	// as a keep-alive" on the listen stream (basic/transports/streamable-http):
	// emit(nil) asks the front end for one.
	var keepAlive *time.Timer
	rearm := func() {
		keepAlive = time.AfterFunc(p.opts.KeepAlive, func() { c.push(item{kind: itemKeepAlive}) })
	}
	// Not before the acknowledgment, which comes first on the stream.
	armed := sub.legacy
	if armed {
		rearm()
	}
	defer func() {
		if keepAlive != nil {
			keepAlive.Stop()
		}
	}()
	for {
		it, ok := c.next(ctx)
		if !ok {
			if !sub.legacy {
				note := []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + sub.childID + `,"reason":"the client closed its subscription stream"}}`)
				if env, err := jsonrpc.Parse(note); err == nil {
					_ = sub.ch.conn.Send(c, jsonrpc.Message{Data: note, Env: env})
				}
			}
			return nil, ctx.Err()
		}
		switch it.kind {
		case itemNotify:
			if err := emit(it.msg.Data); err != nil {
				return nil, err
			}
			if !armed {
				armed = true
				rearm()
			}
		case itemKeepAlive:
			if err := emit(nil); err != nil {
				return nil, err
			}
			rearm()
		case itemFinal:
			// The child ended the subscription gracefully: its answer,
			// with the client's id.
			env, err := jsonrpc.Parse(it.msg.Data)
			if err != nil {
				return errorResponse(rawID, jsonrpc.CodeInternalError, "invalid answer from the MCP server", nil), nil
			}
			return tag(jsonrpc.Rewrite(it.msg.Data, jsonrpc.Edit{At: env.IDAt, Raw: rawID}), rawID), nil
		case itemClosing:
			// "When the server ends a subscription on its own initiative
			// (for example, during shutdown), it SHOULD respond to the
			// original subscriptions/listen request with a completion
			// result before closing the stream."
			return tag(response(rawID, []byte(`{"resultType":"complete"}`)), rawID), nil
		case itemEnded:
			return errorResponse(rawID, jsonrpc.CodeServerError, "the MCP server ended; send subscriptions/listen again", nil), nil
		}
	}
}

// subscribeLegacy works out what a legacy child can honor of a filter and
// subscribes it to the resources, returning the acknowledged filter.
// "The notifications field in the acknowledgment reflects the subset the
// server agreed to honor. Notification types the server does not support
// are omitted."
func (s *subscriptions) subscribeLegacy(ctx context.Context, sub *subscription, f filter) filter {
	var init struct {
		Capabilities struct {
			Tools *struct {
				ListChanged bool `json:"listChanged"`
			} `json:"tools"`
			Prompts *struct {
				ListChanged bool `json:"listChanged"`
			} `json:"prompts"`
			Resources *struct {
				ListChanged bool `json:"listChanged"`
				Subscribe   bool `json:"subscribe"`
			} `json:"resources"`
		} `json:"capabilities"`
	}
	_ = json.Unmarshal(sub.ch.init, &init)
	caps := init.Capabilities
	var acked filter
	acked.ToolsListChanged = f.ToolsListChanged && caps.Tools != nil && caps.Tools.ListChanged
	acked.PromptsListChanged = f.PromptsListChanged && caps.Prompts != nil && caps.Prompts.ListChanged
	acked.ResourcesListChanged = f.ResourcesListChanged && caps.Resources != nil && caps.Resources.ListChanged
	if caps.Resources != nil && caps.Resources.Subscribe {
		for _, uri := range f.ResourceSubscriptions {
			if slices.Contains(acked.ResourceSubscriptions, uri) {
				continue
			}
			// Checked for each subscription: the child's subscription
			// is shared (counted), its callers are not. The interception
			// point checks the child's subscription itself (pinning).
			if s.p.opts.Readable != nil && !s.p.opts.Readable(sub.c, uri) {
				s.p.logger.Warn("a resource was left out of a subscription: its caller may not read it", "uri", uri)
				continue
			}
			s.mu.Lock()
			counts := s.uris[sub.ch]
			if counts == nil {
				counts = make(map[string]int)
				s.uris[sub.ch] = counts
			}
			first := counts[uri] == 0
			counts[uri]++
			s.mu.Unlock()
			if first {
				if _, err := sub.ch.conn.Call(ctx, "resources/subscribe", map[string]string{"uri": uri}); err != nil {
					s.p.logger.Info("a resource subscription was refused (by the MCP server, or the bridge's pin file)", "uri", uri, "err", err)
					s.mu.Lock()
					counts[uri]--
					s.mu.Unlock()
					continue
				}
			}
			acked.ResourceSubscriptions = append(acked.ResourceSubscriptions, uri)
		}
	}
	s.mu.Lock()
	sub.filter = acked
	s.mu.Unlock()
	return acked
}

// unsubscribeLegacy drops a subscription's resources, unsubscribing the
// child from those no other subscription on it wants.
func (s *subscriptions) unsubscribeLegacy(sub *subscription) {
	for _, uri := range sub.filter.ResourceSubscriptions {
		s.mu.Lock()
		counts := s.uris[sub.ch]
		last := false
		if counts != nil {
			counts[uri]--
			if counts[uri] <= 0 {
				delete(counts, uri)
				last = true
			}
		}
		s.mu.Unlock()
		if last {
			ctx, cancel := context.WithTimeout(context.Background(), s.p.opts.ProbeTimeout)
			_, _ = sub.ch.conn.Call(ctx, "resources/unsubscribe", map[string]string{"uri": uri})
			cancel()
		}
	}
}

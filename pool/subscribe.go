package pool

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
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
//
// A subscription spans its group (the modern children, or one legacy
// key's): a list change or resource update from any child of the group
// reaches it. It runs on one child, its home, which the listen
// holds and which answers it; on each other child of the group, now or
// started later, an attachment subscribes it too (a modern child gets the
// listen under an id of its own, a legacy child resources/subscribe), and
// what those children answer or acknowledge is dropped: the client sees
// one acknowledgment and one answer, from the home child.
type subscriptions struct {
	p  *Pool
	n  atomic.Int64
	mu sync.Mutex
	// byChild lists the subscriptions on each child, home or attached.
	byChild map[*child][]*subscription
	// all are the subscriptions in progress.
	all map[*subscription]struct{}
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
	key     string // the group's key
	want    filter // legacy: the client's filter, for the other children
	req     []byte // modern: the client's request, for the other children

	// Under subscriptions.mu:
	others map[*child]*attachment // the other children of the group
	done   bool                   // the listen has ended: attach no more
}

// attachment is a subscription on a child of its group other than its
// home. It is the Origin of what the bridge sends the child for it, so
// that the child's answers reach no call (Route drops them), and the
// interception point sees the subscription's caller.
type attachment struct {
	sub     *subscription
	childID string        // modern: the id the child knows it by
	filter  filter        // legacy: what the child agreed to; under subscriptions.mu
	ready   bool          // legacy: its resources subscribed; under subscriptions.mu
	claimed bool          // legacy: an attach subscribes its resources; under subscriptions.mu
	sent    chan struct{} // modern: closed once the listen was written
}

// Caller is the subscription's caller, for the interception point
// (peer.Origin).
func (a *attachment) Caller() *auth.Principal { return a.sub.c.Caller() }

// filter is the notifications filter of subscriptions/listen.
type filter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

func newSubscriptions(p *Pool) *subscriptions {
	return &subscriptions{p: p, byChild: make(map[*child][]*subscription), all: make(map[*subscription]struct{}), uris: make(map[*child]map[string]int)}
}

// usesLocked reports whether a subscription keeps ch running. Called under
// pool.mu (the lock order is pool.mu, then s.mu).
func (s *subscriptions) usesLocked(ch *child) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only a home: an attachment ends with its child, and keeps no child
	// from stopping.
	for _, sub := range s.byChild[ch] {
		if sub.ch == ch {
			return true
		}
	}
	return false
}

func (s *subscriptions) add(sub *subscription) {
	s.mu.Lock()
	s.byChild[sub.ch] = append(s.byChild[sub.ch], sub)
	s.all[sub] = struct{}{}
	s.mu.Unlock()
}

// unlistLocked takes sub off ch's list.
func (s *subscriptions) unlistLocked(ch *child, sub *subscription) {
	subs := slices.DeleteFunc(s.byChild[ch], func(o *subscription) bool { return o == sub })
	if len(subs) == 0 {
		delete(s.byChild, ch)
	} else {
		s.byChild[ch] = subs
	}
}

// remove ends sub on its home and on every child it is attached to.
func (s *subscriptions) remove(sub *subscription) {
	s.mu.Lock()
	s.unlistLocked(sub.ch, sub)
	delete(s.all, sub)
	sub.done = true
	others := sub.others
	sub.others = nil
	ready := make(map[*child]*attachment, len(others))
	for ch, a := range others {
		s.unlistLocked(ch, sub)
		if !sub.legacy || a.ready {
			ready[ch] = a
		}
	}
	s.mu.Unlock()
	for ch, a := range ready {
		s.detach(ch, a)
	}
}

// detach ends an attachment on its child: a modern child gets the
// cancellation of its listen, a legacy child is unsubscribed from what no
// other subscription on it wants. (A legacy attachment still subscribing
// undoes itself: see attach.)
func (s *subscriptions) detach(ch *child, a *attachment) {
	if !a.sub.legacy {
		<-a.sent
		_ = ch.conn.Send(a, peer.CancelledNotification([]byte(a.childID), "the client closed its subscription stream"))
		return
	}
	s.unsubscribeLegacy(ch, a.filter)
}

// spread attaches sub to the children of its group other than its home.
func (s *subscriptions) spread(ctx context.Context, sub *subscription) {
	p := s.p
	p.mu.Lock()
	kids := slices.Clone(sub.ch.group.children)
	p.mu.Unlock()
	for _, ch := range kids {
		s.attach(ctx, sub, ch)
	}
}

// grew: ch joined its group; the subscriptions of the group attach to it,
// in the background (a legacy child is subscribed with requests of the
// bridge's own).
func (s *subscriptions) grew(ch *child) {
	s.mu.Lock()
	var subs []*subscription
	for sub := range s.all {
		if sub.key == ch.group.key {
			subs = append(subs, sub)
		}
	}
	s.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	// A legacy subscription hears ch's list changes from now on, before
	// the request that started ch reaches it: only its resources wait
	// for the subscribe requests in the background (a list change the
	// request causes would otherwise race them and be lost).
	for _, sub := range subs {
		if sub.legacy {
			s.register(sub, ch, false)
		}
	}
	p := s.p
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.wg.Add(1) // under mu, not closed: before Close waits
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, p.opts.ProbeTimeout)
		defer cancel()
		for _, sub := range subs {
			s.attach(ctx, sub, ch)
		}
	}()
}

// attach subscribes sub on ch, a child of its group other than its home,
// unless it is already there or has ended.
func (s *subscriptions) attach(ctx context.Context, sub *subscription, ch *child) {
	if ch == sub.ch {
		return
	}
	var a *attachment
	if sub.legacy {
		if a = s.register(sub, ch, true); a == nil {
			return
		}
	} else {
		a = &attachment{sub: sub}
		s.mu.Lock()
		if sub.done || sub.others[ch] != nil {
			s.mu.Unlock()
			return
		}
		if sub.others == nil {
			sub.others = make(map[*child]*attachment)
		}
		sub.others[ch] = a
		a.childID = strconv.Quote("mcpb-sub-" + strconv.FormatInt(s.n.Add(1), 10))
		a.sent = make(chan struct{})
		s.byChild[ch] = append(s.byChild[ch], sub)
		s.mu.Unlock()
	}
	if !sub.legacy {
		defer close(a.sent)
		env, err := jsonrpc.Parse(sub.req)
		if err != nil {
			return
		}
		data := jsonrpc.Rewrite(sub.req, jsonrpc.Edit{At: env.IDAt, Raw: []byte(a.childID)})
		if env, err = jsonrpc.Parse(data); err == nil {
			err = ch.conn.Send(a, jsonrpc.Message{Data: data, Env: env})
		}
		if err != nil {
			s.p.logger.Debug("could not pass a subscription on to another MCP server of the pool", "child", ch.conn.ID(), "err", err)
		}
		return
	}
	acked := s.subscribeLegacy(ctx, sub, ch, sub.want)
	s.mu.Lock()
	if sub.done || sub.others[ch] != a {
		s.mu.Unlock()
		s.unsubscribeLegacy(ch, acked)
		return
	}
	a.filter, a.ready = acked, true
	s.mu.Unlock()
}

// register attaches a legacy subscription to ch for the list changes ch
// can honor (legacyInit.kinds), in byChild at once, and returns the
// attachment. With claim, the caller then subscribes its resources: nil
// when sub has ended or another caller claimed it.
func (s *subscriptions) register(sub *subscription, ch *child, claim bool) *attachment {
	if ch == sub.ch {
		return nil
	}
	kinds := parseLegacyInit(ch).kinds(sub.want)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.done {
		return nil
	}
	if a := sub.others[ch]; a != nil {
		if !claim || a.claimed {
			return nil
		}
		a.claimed = true
		return a
	}
	if sub.others == nil {
		sub.others = make(map[*child]*attachment)
	}
	a := &attachment{sub: sub, filter: kinds, claimed: claim}
	sub.others[ch] = a
	s.byChild[ch] = append(s.byChild[ch], sub)
	return a
}

// route hands a child's change notification to the subscriptions it
// belongs to, tagged with their subscriptionId.
func (s *subscriptions) route(ch *child, m *peer.Message) {
	s.mu.Lock()
	subs := slices.Clone(s.byChild[ch])
	filters := make([]filter, len(subs))
	childIDs := make([]string, len(subs))
	for i, sub := range subs {
		if sub.ch == ch {
			filters[i], childIDs[i] = sub.filter, sub.childID
		} else if a := sub.others[ch]; a != nil {
			filters[i], childIDs[i] = a.filter, a.childID
		}
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
		if id, ok := jsonrpc.Lookup(meta, MetaSubscriptionID); ok {
			childSub = string(id)
		}
	}
	for i, sub := range subs {
		var want bool
		if !sub.legacy {
			// "All notifications delivered on the stream carry
			// io.modelcontextprotocol/subscriptionId": the child's own
			// says whose it is.
			// An attachment's acknowledgment is the bridge's: the
			// client got its home's.
			want = childSub == childIDs[i] && (sub.ch == ch || m.Method != "notifications/subscriptions/acknowledged")
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
		if want && uri != "" && s.p.opts.Readable != nil && !s.p.opts.Readable(sub.c.Caller(), uri) {
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
	// Attachments end with their child; a home's subscription ends through
	// its call (itemEnded).
	for _, sub := range s.byChild[ch] {
		if sub.ch != ch {
			delete(sub.others, ch)
			s.unlistLocked(ch, sub)
		}
	}
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
	meta[MetaSubscriptionID] = id
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
	} else if sub.ch, err = p.acquire(ctx, modernKey, sharedOwner, nil, false, false, c); err != nil {
		return nil, err
	}
	c.ch = sub.ch
	sub.key = sub.ch.group.key
	sub.want = f
	sub.req = slices.Clone(req.Msg.Data)
	s.add(sub)
	defer func() {
		s.remove(sub)
		p.release(sub.ch, c, false)
	}()

	if sub.legacy {
		acked := s.subscribeLegacy(ctx, sub, sub.ch, f)
		s.mu.Lock()
		sub.filter = acked
		s.mu.Unlock()
		defer func() { s.unsubscribeLegacy(sub.ch, acked) }()
		s.spread(ctx, sub)
		ack, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
			"params": map[string]any{"_meta": map[string]json.RawMessage{MetaSubscriptionID: rawID}, "notifications": acked}})
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
		s.spread(ctx, sub)
	}
	// "servers are encouraged to periodically emit an SSE comment line ...
	// as a keep-alive" on the listen stream (basic/transports/streamable-http):
	// emit(nil) asks the front end for one.
	var keepAlive *time.Timer
	rearm := func() {
		if p.opts.KeepAlive > 0 {
			keepAlive = time.AfterFunc(p.opts.KeepAlive, func() { c.push(item{kind: itemKeepAlive}) })
		}
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
				_ = sub.ch.conn.Send(c, peer.CancelledNotification([]byte(sub.childID), "the client closed its subscription stream"))
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
func (s *subscriptions) subscribeLegacy(ctx context.Context, sub *subscription, ch *child, f filter) filter {
	init := parseLegacyInit(ch)
	caps := init.Capabilities
	acked := init.kinds(f)
	if caps.Resources != nil && caps.Resources.Subscribe {
		for _, uri := range f.ResourceSubscriptions {
			if slices.Contains(acked.ResourceSubscriptions, uri) {
				continue
			}
			// Checked for each subscription: the child's subscription
			// is shared (counted), its callers are not. The interception
			// point checks the child's subscription itself (pinning).
			if s.p.opts.Readable != nil && !s.p.opts.Readable(sub.c.Caller(), uri) {
				s.p.logger.Warn("a resource was left out of a subscription: its caller may not read it", "uri", uri)
				continue
			}
			s.mu.Lock()
			counts := s.uris[ch]
			if counts == nil {
				counts = make(map[string]int)
				s.uris[ch] = counts
			}
			first := counts[uri] == 0
			counts[uri]++
			s.mu.Unlock()
			if first {
				if _, err := ch.conn.Call(ctx, "resources/subscribe", map[string]string{"uri": uri}); err != nil {
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
	return acked
}

// legacyInit is what a legacy child's initialize result says of the
// notifications it sends.
type legacyInit struct {
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

// parseLegacyInit reads what ch's initialize result says of its
// notifications.
func parseLegacyInit(ch *child) *legacyInit {
	var init legacyInit
	_ = json.Unmarshal(ch.init, &init)
	return &init
}

// kinds is the part of f about list changes that the child honors: the
// kinds whose listChanged it declared.
func (init *legacyInit) kinds(f filter) filter {
	caps := init.Capabilities
	var acked filter
	acked.ToolsListChanged = f.ToolsListChanged && caps.Tools != nil && caps.Tools.ListChanged
	acked.PromptsListChanged = f.PromptsListChanged && caps.Prompts != nil && caps.Prompts.ListChanged
	acked.ResourcesListChanged = f.ResourcesListChanged && caps.Resources != nil && caps.Resources.ListChanged
	return acked
}

// unsubscribeLegacy drops a subscription's resources on ch (acked, what
// ch agreed to), unsubscribing the child from those no other subscription
// on it wants.
func (s *subscriptions) unsubscribeLegacy(ch *child, acked filter) {
	for _, uri := range acked.ResourceSubscriptions {
		s.mu.Lock()
		counts := s.uris[ch]
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
			_, _ = ch.conn.Call(ctx, "resources/unsubscribe", map[string]string{"uri": uri})
			cancel()
		}
	}
}

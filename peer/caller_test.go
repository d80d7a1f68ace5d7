package peer_test

import (
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// principalClient is a client whose caller changes over time, as a 2025
// session's does when a refreshed token brings new scopes.
type principalClient struct {
	p atomic.Pointer[auth.Principal]
}

func (c *principalClient) Caller() *auth.Principal { return c.p.Load() }

// The interception point sees a message's caller typed, asked of its
// Origin when the message passes: a request its client's caller then, the
// answer whom the client acts for when the answer comes (the token
// refreshed in between); the child's own notification, addressed to no
// client, has none.
func TestMessageCaller(t *testing.T) {
	first := &auth.Principal{Subject: "alice", Tag: "oauth:1"}
	refreshed := &auth.Principal{Subject: "alice", Scopes: []string{"more"}, Tag: "oauth:1"}
	seen := make(chan *auth.Principal, 3)
	record := func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			seen <- m.Caller()
			return next(m)
		}
	}
	proc := memchild.New(nil)
	router := newChanRouter()
	conn := peer.New(proc, router, &peer.Options{Intercept: record, Logger: slog.New(slog.DiscardHandler)})
	defer func() { proc.Exit(nil); <-conn.Done() }()
	c := &principalClient{}
	c.p.Store(first)
	if err := conn.Send(c, message(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`)); err != nil {
		t.Fatal(err)
	}
	heard(t, proc)
	c.p.Store(refreshed)
	proc.Say(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)
	proc.Say(t, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	if m := router.next(t); m.origin != nil {
		t.Fatalf("the child's notification went to %v, want no client", m.origin)
	}
	if m := router.next(t); m.origin != c {
		t.Fatalf("the answer went to %v, want its client", m.origin)
	}
	for i, want := range []*auth.Principal{first, nil, refreshed} {
		if got := <-seen; got != want {
			t.Errorf("message %d: caller %+v, want %+v", i, got, want)
		}
	}
	var none peer.Message
	if none.Caller() != nil {
		t.Error("a caller for a message without an Origin")
	}
	m := peer.Message{Origin: c}
	if allocs := testing.AllocsPerRun(100, func() { callerSink = m.Caller() }); allocs != 0 {
		t.Errorf("%v allocations to say who a message's caller is, want 0", allocs)
	}
}

var callerSink *auth.Principal

package peer_test

import (
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// heard returns the next line the scripted child (a memchild.Child) read,
// failing after 10s.
func heard(t testing.TB, p *memchild.Child) string {
	t.Helper()
	select {
	case line, ok := <-p.Lines():
		if !ok {
			t.Fatal("the child's stdin was closed")
		}
		return line
	case <-time.After(10 * time.Second):
		t.Fatal("the child read nothing for 10s")
	}
	return ""
}

// client is a test's client (a peer.Origin): a name, acting for nobody.
type client string

func (client) Caller() *auth.Principal { return nil }

// routed is what a Router was given.
type routed struct {
	origin peer.Origin
	data   string
	own    bool
}

// chanRouter records what the Conn hands it.
type chanRouter struct {
	msgs  chan routed
	ended chan error
}

func newChanRouter() *chanRouter {
	return &chanRouter{msgs: make(chan routed, 64), ended: make(chan error, 1)}
}

func (r *chanRouter) Route(m *peer.Message) {
	r.msgs <- routed{origin: m.Origin, data: string(m.Data), own: m.Own}
}

func (r *chanRouter) Ended(err error) { r.ended <- err }

func (r *chanRouter) next(t testing.TB) routed {
	t.Helper()
	select {
	case m := <-r.msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the router got nothing for 10s")
	}
	return routed{}
}

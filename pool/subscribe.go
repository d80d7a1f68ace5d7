package pool

import (
	"context"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// subscriptions serves subscriptions/listen.
type subscriptions struct {
	p *Pool
}

func newSubscriptions(p *Pool) *subscriptions { return &subscriptions{p: p} }

// usesLocked reports whether a subscription keeps ch running.
func (s *subscriptions) usesLocked(ch *child) bool { return false }

func (s *subscriptions) route(ch *child, m *peer.Message) {}

func (s *subscriptions) ended(ch *child) {}

func (s *subscriptions) closeAll() {}

func (s *subscriptions) listen(ctx context.Context, req *Request, emit func([]byte) error) ([]byte, error) {
	rawID := req.Msg.Env.IDAt.In(req.Msg.Data)
	return errorResponse(rawID, jsonrpc.CodeMethodNotFound, "Method not found: subscriptions/listen is not served yet", nil), nil
}

package affinity

import (
	"context"
	"net/http"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// stateKey marks a forwarded request that a requestState (revision
// 2026-07-28) sent to its owner, rather than a session ID.
type stateKey struct{}

// Forward sends a request to the instance owner, as Wrap does for sessions,
// for a front end that found the owner elsewhere than in Mcp-Session-Id: a
// retry of revision 2026-07-28 whose requestState names the instance that
// holds the parked call. The caller must have verified the owner under the
// shared secret (a forged name is never forwarded), and req.Body must hold
// the whole body again. A request another instance already forwarded is
// not forwarded twice: it is answered 502.
func (r *Router) Forward(w http.ResponseWriter, req *http.Request, owner string) {
	if from := req.Header.Get(HopHeader); from != "" || owner == r.self {
		r.logger.Warn("affinity: not forwarding a request twice (its requestState names another instance)",
			"owner", owner, "self", r.self, "forwarded_by", from)
		bridge.WriteError(w, http.StatusBadGateway, nil, jsonrpc.CodeInternalError,
			"Bad Gateway: the bridge instance holding this request could not be reached; send the request again without requestState", nil)
		return
	}
	_ = http.NewResponseController(w).EnableFullDuplex()
	ctx := context.WithValue(req.Context(), ownerKey{}, owner)
	r.proxy.ServeHTTP(w, req.WithContext(context.WithValue(ctx, stateKey{}, true)))
}

package pool

// The front door: the one call the stateless front end makes per request
// (Call), the refusals it returns, typed, and the names of _meta's members
// of revision 2026-07-28 that the front end and the pool read.

import (
	"context"
)

// _meta keys of revision 2026-07-28 (basic/index, "_meta"): the one place
// they are written, for the pool and the front end (package bridge).
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// MethodNotFoundError refuses a request of a method the pool's children
// cannot be asked: "If the server does not implement the requested RPC
// method, it MUST respond with 404 Not Found and a JSON-RPC error with
// code -32601 (Method not found)" (basic/transports/streamable-http).
type MethodNotFoundError struct{ Method string }

func (e *MethodNotFoundError) Error() string { return "Method not found: " + e.Method }

// HeaderMismatchError refuses a request whose header Header does not say
// what its body says (CodeHeaderMismatch, 400 Bad Request). Reason says
// how, naming the header and the body's member.
type HeaderMismatchError struct {
	Header string // canonical form, e.g. Mcp-Param-Region
	Reason string
}

func (e *HeaderMismatchError) Error() string { return e.Reason }

// A Front is the front end's side of one request in Call: the rules of its
// transport that need what only the pool knows.
type Front interface {
	// CheckParamHeaders validates a tools/call (body: the request as
	// received, Request.Msg.Data) against its tool's x-mcp-header
	// annotations (none: annotated is empty). It returns nil, a
	// *HeaderMismatchError, or an error of the front end's own, which Call
	// returns as is. (The body, not the *Request: a pointer passed to an
	// interface's method escapes, and the front end's Request would be an
	// allocation per request.)
	CheckParamHeaders(body []byte, annotated []ParamHeader) error
}

// Call answers one request of the front end, as Serve does, after the
// checks the front end needs the pool for, with the children's era read
// once: a method the children cannot be asked is refused with
// *MethodNotFoundError; a tools/call is checked by front against its
// tool's x-mcp-header annotations (known from the tools/list answers the
// pool saw, or listed now; front nil: not checked); a retry whose
// requestState another instance holds is refused with *ForwardError. Its
// other errors are Serve's. Nothing reaches a child before the checks
// pass.
func (p *Pool) Call(ctx context.Context, req *Request, front Front, emit func([]byte) error) ([]byte, error) {
	method := req.Msg.Env.Method
	switch method {
	case "server/discover":
		return p.serveDiscover(ctx, req)
	case "subscriptions/listen":
		return p.subs.listen(ctx, req, emit)
	}
	if removedMethod(method) {
		return nil, &MethodNotFoundError{Method: method}
	}
	era, err := p.Era(ctx)
	if err != nil {
		return nil, err
	}
	if era != EraModern && !legacyMethod(method) {
		return nil, &MethodNotFoundError{Method: method}
	}
	if method == "tools/call" && front != nil {
		if req.Name == "" {
			req.Name = req.Msg.Env.Name(req.Msg.Data)
		}
		annotated, err := p.paramHeaders(ctx, era, req, req.Name)
		if err != nil {
			return nil, err
		}
		if err := front.CheckParamHeaders(req.Msg.Data, annotated); err != nil {
			return nil, err
		}
	}
	return p.serveEra(ctx, era, req, emit)
}

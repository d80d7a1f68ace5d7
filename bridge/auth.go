package bridge

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// authenticate checks the request's bearer token. On success it returns
// the request with its principal attached (auth.FromContext) and the
// principal's tag, which binds sessions: stable across token refreshes, so
// a client that refreshes its token keeps its session, and another
// principal cannot use it. On failure it has answered the request.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, auth.Tag, bool) {
	p, err := h.auth.Authenticate(r)
	if err == nil {
		return r.WithContext(auth.NewContext(r.Context(), p)), p.Tag, true
	}
	status, msg := http.StatusUnauthorized, "Unauthorized: send a valid bearer token in the Authorization header"
	switch {
	case errors.Is(err, auth.ErrInsufficientScope):
		h.refusals.log(h.logger, slog.LevelInfo, "refused a token without the scopes required (--oauth-scopes)", "principal", p.Tag, "err", err)
		status, msg = http.StatusForbidden, "Forbidden: "+err.Error()
	case errors.Is(err, auth.ErrUnavailable):
		// The token may be valid: a 401 would send the client through a
		// new authorization for nothing.
		h.logger.Error("could not check a bearer token", "err", err)
		WriteError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeInternalError,
			"Service Unavailable: the authorization server could not be reached; try again later", nil)
		return nil, "", false
	case errors.Is(err, auth.ErrInvalidToken):
		h.refusals.log(h.logger, slog.LevelInfo, "refused a bearer token", "err", err)
		msg = "Unauthorized: " + err.Error()
	}
	h.auth.Challenge(w.Header(), err)
	WriteError(w, status, nil, jsonrpc.CodeInvalidRequest, msg, nil)
	return nil, "", false
}

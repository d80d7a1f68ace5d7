package bridge

// The legacy HTTP+SSE transport (revision 2024-11-05), for clients that
// predate Streamable HTTP: "The server MUST provide two endpoints: 1. An SSE
// endpoint, for clients to establish a connection and receive messages from
// the server 2. A regular HTTP POST endpoint for clients to send messages to
// the server."
//
// A GET of the SSE endpoint creates a session of the same registry as the
// Streamable HTTP endpoint (so the same launcher, limits and interception
// point: policy, pinning, audit), of the single-stream kind: the GET's
// connection is its only stream, and everything the server writes goes
// there as a "message" event. The first event is "endpoint", the URL of the
// message endpoint with the session's ID in its query. A POST there is
// answered 202 at once; the answer arrives on the stream. The stream cannot
// be resumed (that revision has no event IDs), so closing it ends the
// session.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Paths of the legacy HTTP+SSE endpoints when Options.Path is DefaultPath:
// the ones the usual clients and bridges (mcp-proxy, supergateway) use.
const (
	DefaultLegacySSEPath     = "/sse"
	DefaultLegacyMessagePath = "/message"
)

// legacySessionParam is the query parameter of the message endpoint that
// names the session (the TypeScript SDK's name for it).
const legacySessionParam = "sessionId"

// ErrLegacyStreamClosed ends a legacy session whose SSE stream closed: the
// stream is the session's only way back to the client, and cannot be
// resumed. It is the client ending its session: it matches
// session.ErrDeleted.
var ErrLegacyStreamClosed error = legacyStreamClosed{}

type legacyStreamClosed struct{}

func (legacyStreamClosed) Error() string {
	return "the client closed the session's SSE stream (legacy HTTP+SSE transport)"
}

func (legacyStreamClosed) Is(target error) bool { return target == session.ErrDeleted }

// legacyPaths are the SSE and message paths of the legacy transport beside
// an MCP endpoint: /sse and /message beside /mcp, and /servers/NAME/sse
// beside /servers/NAME/mcp.
func legacyPaths(mcpPath string) (ssePath, msgPath string) {
	dir := mcpPath[:strings.LastIndex(mcpPath, "/")]
	return dir + DefaultLegacySSEPath, dir + DefaultLegacyMessagePath
}

func (h *Handler) legacyRoutes() {
	if h.opts.NoLegacySSE {
		return
	}
	h.ssePath, h.msgPath = legacyPaths(h.opts.Path)
	h.mux.HandleFunc("GET "+h.ssePath, h.guard(h.serveLegacySSE))
	// HEAD would get the GET handler, which starts a session and its
	// server and never ends: no method of the
	// transport, as on the Streamable HTTP endpoint.
	h.mux.HandleFunc("HEAD "+h.ssePath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", "GET, OPTIONS")
		WriteError(w, http.StatusMethodNotAllowed, nil, jsonrpc.CodeInvalidRequest,
			"Method Not Allowed: open the stream with GET", nil)
	})
	h.mux.HandleFunc("POST "+h.msgPath, h.guard(h.serveLegacyMessage))
	h.mux.HandleFunc("OPTIONS "+h.ssePath, h.servePreflight)
	h.mux.HandleFunc("OPTIONS "+h.msgPath, h.servePreflight)
}

// serveLegacySSE opens a legacy session and streams it until the client
// leaves or the session ends.
func (h *Handler) serveLegacySSE(w http.ResponseWriter, r *http.Request, owner auth.Tag) {
	if a := headerValue(r.Header, hdrAccept); a != "" && !accepts(a, "text/event-stream") {
		WriteError(w, http.StatusNotAcceptable, nil, jsonrpc.CodeInvalidRequest,
			"Not Acceptable: the Accept header must list text/event-stream", nil)
		return
	}
	if h.draining.Load() {
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeServerError,
			"Service Unavailable: the bridge is shutting down; retry against another instance", nil)
		return
	}
	sess, err := h.reg.CreateWith(r.Context(), owner, &session.CreateOptions{SingleStream: true})
	if err != nil {
		h.createFailed(w, nil, err)
		return
	}
	// The stream is the session's only one: when the client leaves, the
	// session ends and its server stops.
	defer sess.Close(ErrLegacyStreamClosed)
	reader, err := sess.Listen()
	if err != nil {
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: the session ended before its stream opened: "+err.Error(), nil)
		return
	}
	defer reader.Detach()

	startSSE(w)
	dl := h.deadline(w)
	rc := dl.rc
	defer dl.extend()
	// "When a client connects, the server MUST send an endpoint event
	// containing a URI for the client to use for sending messages."
	endpoint := h.msgPath + "?" + legacySessionParam + "=" + url.QueryEscape(sess.ID())
	dl.extend()
	if _, err := io.WriteString(w, "event: endpoint\ndata: "+endpoint+"\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	ctx := r.Context()
	ka := keepAlive{ts: h.keepAlives, quiets: &h.quiets, w: w}
	defer ka.stop()
	for {
		// A quiet stream gets a comment every SSEKeepAlive: behind a proxy
		// with an idle timeout, a cut stream would end the session (this
		// transport cannot resume).
		_, data, err := ka.next(ctx, reader, &dl)
		switch {
		case err == io.EOF:
			return // the session ended; its last errors were written
		case errors.Is(err, session.ErrEventsPurged):
			h.logger.Warn("closing a legacy SSE stream that fell behind the session's event log; the session ends",
				"session", sess.LogID(), "hint", "raise --log-max-events / --log-max-bytes or read the stream faster")
			return
		case err != nil:
			return // the client left
		}
		// "Server messages are sent as SSE message events, with the
		// message content encoded as JSON in the event data." One line of
		// JSON, as the server wrote it: one data field.
		dl.extend()
		if _, err := io.WriteString(w, "event: message\ndata: "); err != nil {
			return
		}
		if _, err := w.Write(data); err != nil {
			return
		}
		if _, err := io.WriteString(w, "\n\n"); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// serveLegacyMessage takes a client's POST to the message endpoint: 202 at
// once, the answer goes to the session's stream.
func (h *Handler) serveLegacyMessage(w http.ResponseWriter, r *http.Request, owner auth.Tag) {
	if !strings.EqualFold(mediaType(headerValue(r.Header, hdrContentType)), "application/json") {
		WriteError(w, http.StatusUnsupportedMediaType, nil, jsonrpc.CodeInvalidRequest,
			"Unsupported Media Type: the body must be application/json", nil)
		return
	}
	id := r.URL.Query().Get(legacySessionParam)
	if id == "" {
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest,
			"Bad Request: the "+legacySessionParam+" query parameter is required; use the URL of the endpoint event of your SSE stream ("+h.ssePath+")", nil)
		return
	}
	sess, err := h.reg.Get(id)
	if err != nil || !sess.SingleStream() {
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: session "+fmt.Sprintf("%q", id)+" does not exist or has ended; open a new SSE stream ("+h.ssePath+")", nil)
		return
	}
	if sess.Owner() != owner {
		h.logger.Warn("refused a request for a session created with another token", "session", sess.LogID())
		WriteError(w, http.StatusForbidden, nil, jsonrpc.CodeInvalidRequest,
			"Forbidden: this session belongs to another credential", nil)
		return
	}
	var one [1]jsonrpc.Message
	msgs, _, ok := h.readMessages(w, r, &one)
	if !ok {
		return
	}
	// Revision 2026-07-28 clients probe with server/discover: the answer
	// that makes them fall back to initialize goes on the stream, like
	// every answer here. The probe never reaches the server.
	fwd := msgs[:0:0]
	for _, m := range msgs {
		if m.Env.Method != "server/discover" {
			fwd = append(fwd, m)
			continue
		}
		if m.Env.Kind == jsonrpc.KindRequest {
			if err := sess.Answer(jsonrpc.ErrorResponse(jsonrpc.RawID(m.Data), jsonrpc.CodeInvalidRequest, probeAnswer,
				map[string]any{"supportedVersions": supportedVersions})); err != nil {
				h.postFailed(w, err)
				return
			}
		}
	}
	if msgs = fwd; len(msgs) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	for i := range msgs {
		if msgs[i].Env.Method == "initialize" {
			if err := capVersion(&msgs[i]); err != nil {
				WriteError(w, http.StatusBadRequest, jsonrpc.RawID(msgs[i].Data), jsonrpc.CodeInvalidRequest, "Bad Request: "+err.Error(), nil)
				return
			}
		}
	}
	if _, err := sess.Post(msgs, session.PostOptions{Resumable: true}); err != nil {
		h.postFailed(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// capVersion lowers the protocolVersion of an initialize request to the
// latest revision with sessions, when the client asks for a later one
// (SDK clients ask for their latest whatever the transport): revision
// 2026-07-28 is stateless and has no place on a session's single stream.
// "If the server supports the requested protocol version, it MUST respond
// with the same version. Otherwise, the server MUST respond with another
// protocol version it supports": the bridge answers for the server here,
// and the client decides whether it speaks the version it gets.
func capVersion(m *jsonrpc.Message) error {
	latest := supportedVersions[len(supportedVersions)-1]
	if requestedVersion(m.Data) <= latest {
		return nil
	}
	var msg map[string]any
	if err := json.Unmarshal(m.Data, &msg); err != nil {
		return err
	}
	params, ok := msg["params"].(map[string]any)
	if !ok {
		return nil
	}
	params["protocolVersion"] = latest
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	env, err := jsonrpc.Parse(data)
	if err != nil {
		return err
	}
	*m = jsonrpc.Message{Data: data, Env: env}
	return nil
}

// retiredPost answers a request in a session whose server is being removed
// from the configuration: 503, not 404, which would tell the client that
// the session is gone while its requests in flight still run (the Go SDK
// client then drops them).
func (h *Handler) retiredPost(w http.ResponseWriter, err error) {
	WriteError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeServerError,
		"Service Unavailable: "+err.Error()+"; its session ends once its requests in flight are answered", nil)
}

// createFailed answers a request whose session could not be created.
func (h *Handler) createFailed(w http.ResponseWriter, rawID []byte, err error) {
	switch {
	case errors.Is(err, session.ErrRetired):
		WriteError(w, http.StatusNotFound, rawID, jsonrpc.CodeInvalidRequest, "Not Found: "+err.Error(), nil)
	case errors.Is(err, session.ErrTooManySessions), errors.Is(err, session.ErrShuttingDown):
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError, "Service Unavailable: "+err.Error(), nil)
	case isOutOfFiles(err):
		h.logger.Error("out of file descriptors: cannot start an MCP server", "err", err,
			"hint", "raise the open-file limit (ulimit -n), or lower --max-sessions / --max-connections")
		w.Header().Set("Retry-After", "5")
		WriteError(w, http.StatusServiceUnavailable, rawID, jsonrpc.CodeServerError,
			"Service Unavailable: the bridge is out of file descriptors; retry later", nil)
	case errors.Is(err, session.ErrLaunch):
		WriteError(w, http.StatusBadGateway, rawID, jsonrpc.CodeServerError, err.Error(), nil)
	default:
		WriteError(w, http.StatusInternalServerError, rawID, jsonrpc.CodeServerError, err.Error(), nil)
	}
}

// postFailed answers a POST that Session.Post refused.
func (h *Handler) postFailed(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, session.ErrRetired):
		h.retiredPost(w, err)
	case errors.Is(err, session.ErrNotFound):
		WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest,
			"Not Found: "+err.Error(), nil)
	case errors.Is(err, session.ErrDuplicateID):
		WriteError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest, "Bad Request: "+err.Error(), nil)
	case errors.Is(err, session.ErrTooManyRequests):
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusTooManyRequests, nil, jsonrpc.CodeServerError, "Too Many Requests: "+err.Error(), nil)
	case errors.Is(err, session.ErrStdinFull):
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeServerError, "Service Unavailable: "+err.Error(), nil)
	default:
		WriteError(w, http.StatusInternalServerError, nil, jsonrpc.CodeInternalError, err.Error(), nil)
	}
}

// isOutOfFiles: a passing overload, not a broken server.
func isOutOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

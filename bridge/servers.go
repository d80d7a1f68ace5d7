package bridge

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// ServersPrefix starts the paths of the servers of a Servers.
const ServersPrefix = "/servers/"

// ServerPath is the MCP endpoint of the server called name in a Servers:
// /servers/NAME/mcp. Its legacy HTTP+SSE endpoints are beside it:
// /servers/NAME/sse and /servers/NAME/message.
func ServerPath(name string) string { return ServersPrefix + name + DefaultPath }

// Servers serves several MCP servers from one listener, each under
// /servers/NAME/ by a Handler of its own (built with Path ServerPath(NAME)),
// so that each has its own registry, launcher and limits. Handlers are
// added, replaced and removed while it serves (a configuration reload).
//
// A replaced handler keeps serving the requests that name one of its
// sessions (Mcp-Session-Id, or the legacy sessionId parameter) until it is
// forgotten with Remove, so that its requests in flight can finish while it
// drains. A request for a name that has no handler gets 404 with a
// JSON-RPC error, after the same Host, Origin and auth checks as any
// request: who may not use the bridge learns nothing of its servers.
//
// Its methods are safe for concurrent use.
type Servers struct {
	edge *Handler // runs the checks before answers of its own, and /readyz, /metrics

	mu     sync.RWMutex
	byName map[string]*serverHandlers
}

type serverHandlers struct {
	cur *Handler   // serves new sessions; nil once removed
	old []*Handler // replaced, draining: serve their own sessions only
}

// NewServers returns an empty Servers. opts holds the checks of requests
// for unknown servers (AllowedOrigins, AllowedHosts, AuthTokens, Auth,
// Logger) and what is served outside /servers/ (/healthz, /readyz,
// Metrics, the OAuth metadata): pass those the servers' handlers get.
func NewServers(opts *Options) *Servers {
	s := &Servers{edge: NewHandler(nil, opts), byName: make(map[string]*serverHandlers)}
	// A path outside /servers/ that the edge does not serve ("/", "/mcp/")
	// gets the answer of an unknown server, naming the servers' paths.
	s.edge.notFound = func(w http.ResponseWriter, r *http.Request, _ auth.Tag) { s.serveUnknown(w, r, "") }
	return s
}

// Set makes h the handler of the server called name, for new sessions. A
// handler it replaces keeps its sessions until Remove.
func (s *Servers) Set(name string, h *Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byName[name]
	if e == nil {
		e = new(serverHandlers)
		s.byName[name] = e
	}
	if e.cur != nil && e.cur != h {
		e.old = append(e.old, e.cur)
	}
	e.cur = h
}

// Remove forgets h, the current or a replaced handler of name: its paths
// get 404 unless another handler took the name.
func (s *Servers) Remove(name string, h *Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byName[name]
	if e == nil {
		return
	}
	if e.cur == h {
		e.cur = nil
	}
	e.old = slices.DeleteFunc(e.old, func(o *Handler) bool { return o == h })
	if e.cur == nil && len(e.old) == 0 {
		delete(s.byName, name)
	}
}

// Names lists the servers that take new sessions, sorted.
func (s *Servers) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for n, e := range s.byName {
		if e.cur != nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Drain makes every handler refuse new sessions and /readyz report not
// ready, at shutdown.
func (s *Servers) Drain() {
	s.edge.Drain()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.byName {
		if e.cur != nil {
			e.cur.Drain()
		}
		for _, o := range e.old {
			o.Drain()
		}
	}
}

func (s *Servers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	boundUnreadBody(w, r, s.edge.opts.BodyReadTimeout) // for the answers below that no Handler gives
	switch p := r.URL.Path; {
	case p == DefaultPath || p == DefaultLegacySSEPath || p == DefaultLegacyMessagePath:
		// The endpoints of the one-command form: not served here.
	case !strings.HasPrefix(p, ServersPrefix):
		// /healthz, /readyz, /metrics, the OAuth metadata: the edge's
		// own routes (it has no registry; its MCP paths are those above).
		s.edge.ServeHTTP(w, r)
		return
	}
	name, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, ServersPrefix), "/")
	if !ok || !strings.HasPrefix(r.URL.Path, ServersPrefix) {
		name = ""
	}
	if h := s.handler(name, r); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	s.edge.guard(func(w http.ResponseWriter, r *http.Request, _ auth.Tag) { s.serveUnknown(w, r, name) })(w, r)
}

// serveUnknown is the 404 of a request for no server (name "") or for the
// server called name, which this bridge does not serve.
func (s *Servers) serveUnknown(w http.ResponseWriter, r *http.Request, name string) {
	names := s.Names()
	msg := "Not Found: no MCP server at " + strconv.Quote(r.URL.Path) + "; "
	if name != "" {
		msg = "Not Found: no MCP server named " + strconv.Quote(name) + " on this bridge; "
	}
	if len(names) == 0 {
		msg += "it serves " + ServersPrefix + "NAME" + DefaultPath + " for the servers of its --config file, none at the moment"
	} else {
		msg += "it serves " + ServersPrefix + "NAME" + DefaultPath + " for NAME in " + strings.Join(names, ", ")
	}
	WriteError(w, http.StatusNotFound, nil, jsonrpc.CodeInvalidRequest, msg, nil)
}

// handler picks the handler of a request for the server called name: a
// draining one if the request names one of its sessions, else the current
// one.
func (s *Servers) handler(name string, r *http.Request) *Handler {
	if name == "" {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.byName[name]
	if e == nil {
		return nil
	}
	if len(e.old) > 0 {
		id := r.Header.Get(hdrSessionID)
		if id == "" {
			id = r.URL.Query().Get(legacySessionParam)
		}
		if id != "" && (e.cur == nil || !e.cur.has(id)) {
			for _, o := range e.old {
				if o.has(id) {
					return o
				}
			}
		}
	}
	return e.cur
}

// has reports whether the handler's registry holds the session id.
func (h *Handler) has(id string) bool {
	_, err := h.reg.Get(id)
	return err == nil
}

package pool

// The tools' x-mcp-header annotations, for the front end's validation of
// Mcp-Param-{Name} headers: "Any server that processes the message body
// MUST validate that encoded header values, after decoding if
// Base64-encoded, match the corresponding values in the request body"
// (basic/transports/streamable-http, Server Behavior for Custom Headers).
// The bridge is that server for its clients, so it must know each tool's
// inputSchema. It learns them from the child's tools/list answers passing
// through to clients, lists the tools itself when a call names a tool it
// has not seen, and forgets them all on notifications/tools/list_changed.
//
// One cache serves the pool: every child runs the same command, so a tool
// has one definition whichever principal's child listed it. It only
// validates; no client ever sees what it holds.

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// ParamHeader is one x-mcp-header annotation of a tool's inputSchema: the
// value at Path in the call's arguments is mirrored in the header
// Mcp-Param-{Name}.
type ParamHeader struct {
	Path []string // property names from the root of the arguments
	Name string
}

// maxToolPages bounds the pages of the bridge's own tools/list.
const maxToolPages = 100

var toolsSeed = maphash.MakeSeed()

type toolCache struct {
	listMu sync.Mutex // one listing of the bridge's own at a time

	mu       sync.Mutex
	gen      uint64                   // raised by every invalidation
	tools    map[string][]ParamHeader // every tool seen in gen, annotated or not
	complete bool                     // tools holds a whole listing of gen
	last     uint64                   // hash of the last whole listing learned
}

func (tc *toolCache) generation() uint64 {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.gen
}

// invalidate forgets every tool: the child said its list changed.
func (tc *toolCache) invalidate() {
	tc.mu.Lock()
	tc.gen++
	tc.tools, tc.complete, tc.last = nil, false, 0
	tc.mu.Unlock()
}

// lookup returns a tool's annotations, whether the tool is known, and
// whether the cache holds a whole listing (then an unknown tool does not
// exist).
func (tc *toolCache) lookup(name string) ([]ParamHeader, bool, bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	h, ok := tc.tools[name]
	return h, ok, tc.complete
}

// learnAnswer learns from a tools/list answer of generation gen that
// passed through the pool; firstPage says the request had no cursor.
func (tc *toolCache) learnAnswer(gen uint64, firstPage bool, answer []byte) {
	result, ok := jsonrpc.Lookup(answer, "result")
	if !ok {
		return
	}
	_, more := jsonrpc.Lookup(result, "nextCursor")
	whole := firstPage && !more
	sum := maphash.Bytes(toolsSeed, result)
	tc.mu.Lock()
	skip := gen != tc.gen || (whole && tc.complete && tc.last == sum)
	tc.mu.Unlock()
	if skip {
		return // stale, or the same listing again: most tools/list are
	}
	tools, err := parseTools(result)
	if err != nil {
		return
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if gen != tc.gen {
		return
	}
	if whole {
		tc.tools, tc.complete, tc.last = tools, true, sum
		return
	}
	if tc.tools == nil {
		tc.tools = make(map[string][]ParamHeader, len(tools))
	}
	for name, h := range tools {
		tc.tools[name] = h
	}
}

// setAll installs a listing of generation gen: the whole of it, or some
// pages.
func (tc *toolCache) setAll(gen uint64, tools map[string][]ParamHeader, whole bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch {
	case gen != tc.gen:
	case whole:
		tc.tools, tc.complete, tc.last = tools, true, 0
	default:
		if tc.tools == nil {
			tc.tools = make(map[string][]ParamHeader, len(tools))
		}
		for name, h := range tools {
			tc.tools[name] = h
		}
	}
}

// parseTools reads the annotations of every tool of a tools/list result.
func parseTools(result []byte) (map[string][]ParamHeader, error) {
	var r struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, err
	}
	out := make(map[string][]ParamHeader, len(r.Tools))
	for _, t := range r.Tools {
		out[t.Name] = annotations(t.InputSchema)
	}
	return out, nil
}

// schemaNode is what an x-mcp-header annotation needs of a schema.
type schemaNode struct {
	Header     json.RawMessage       `json:"x-mcp-header"`
	Properties map[string]schemaNode `json:"properties"`
}

// annotations finds the x-mcp-header annotations of an inputSchema. Only
// properties "statically reachable from the schema root: reachable via a
// chain consisting solely of properties keys" may carry one (basic/
// transports/streamable-http, Schema Extension): annotations elsewhere
// make the tool invalid, and clients exclude it, so they are not looked
// for. Names that are not HTTP tokens are skipped for the same reason.
func annotations(schema json.RawMessage) []ParamHeader {
	if !bytes.Contains(schema, []byte(`"x-mcp-header"`)) {
		return nil
	}
	var root schemaNode
	if json.Unmarshal(schema, &root) != nil {
		return nil
	}
	var out []ParamHeader
	var walk func(props map[string]schemaNode, path []string)
	walk = func(props map[string]schemaNode, path []string) {
		for name, n := range props {
			p := append(path[:len(path):len(path)], name)
			var h string
			if json.Unmarshal(n.Header, &h) == nil && isToken(h) {
				out = append(out, ParamHeader{Path: p, Name: h})
			}
			walk(n.Properties, p)
		}
	}
	walk(root.Properties, nil)
	return out
}

// isToken reports whether s is an HTTP field-name token: "1*tchar" (RFC
// 9110, 5.1).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ParamHeaders returns the x-mcp-header annotations of tool, for a
// tools/call of req: from the tools/list answers seen so far, or else from
// a listing of the bridge's own on one of the pool's children (of req's
// principal and capabilities, for a legacy child). A tool the child does
// not list has none: the child answers the call with its own error.
func (p *Pool) ParamHeaders(ctx context.Context, req *Request, tool string) ([]ParamHeader, error) {
	if h, known, complete := p.tools.lookup(tool); known || complete {
		return h, nil
	}
	era, err := p.Era(ctx)
	if err != nil {
		return nil, err
	}
	return p.paramHeaders(ctx, era, req, tool)
}

// paramHeaders is ParamHeaders once the children's era is known.
func (p *Pool) paramHeaders(ctx context.Context, era Era, req *Request, tool string) ([]ParamHeader, error) {
	if h, known, complete := p.tools.lookup(tool); known || complete {
		return h, nil
	}
	p.tools.listMu.Lock()
	defer p.tools.listMu.Unlock()
	if h, known, complete := p.tools.lookup(tool); known || complete {
		return h, nil // another request listed them meanwhile
	}
	if err := p.listTools(ctx, era, req); err != nil {
		return nil, err
	}
	h, _, _ := p.tools.lookup(tool)
	return h, nil
}

// listTools lists the child's tools, every page, into the cache.
func (p *Pool) listTools(ctx context.Context, era Era, req *Request) error {
	gen := p.tools.generation()
	all := map[string][]ParamHeader{}
	caps := req.Caps
	if len(caps) == 0 {
		caps = json.RawMessage(`{}`)
	}
	cursor := ""
	for range maxToolPages {
		params := map[string]any{"_meta": map[string]any{
			MetaProtocolVersion: Version, MetaClientCapabilities: caps, MetaClientInfo: bridgeInfo}}
		if cursor != "" {
			params["cursor"] = cursor
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "mcp-bridge-tools", "method": "tools/list", "params": params})
		env, err := jsonrpc.Parse(body)
		if err != nil {
			return err
		}
		sreq := &Request{Principal: req.Principal, Msg: jsonrpc.Message{Data: body, Env: env}, Caps: caps}
		discard := func([]byte) error { return nil }
		var answer []byte
		if era == EraModern {
			answer, err = p.serveModern(ctx, sreq, discard)
		} else {
			answer, err = p.serveLegacy(ctx, sreq, nil, discard)
		}
		if err != nil {
			return err
		}
		result, ok := jsonrpc.Lookup(answer, "result")
		var tools map[string][]ParamHeader
		if ok {
			tools, err = parseTools(result)
		}
		if !ok || err != nil {
			// Nothing is cached as whole: the next call lists again.
			p.logger.Warn("the MCP server did not list its tools for the bridge; Mcp-Param headers of unlisted tools go unchecked",
				"err", err, "answer", string(answer))
			break
		}
		for name, h := range tools {
			all[name] = h
		}
		next, _ := jsonrpc.Lookup(result, "nextCursor")
		if cursor, ok = jsonrpc.StringValue(next); !ok || cursor == "" {
			p.tools.setAll(gen, all, true)
			return nil
		}
	}
	p.tools.setAll(gen, all, false)
	return nil
}

// Field is the annotated value's place in the request, for messages:
// params.arguments.a.b.
func (h ParamHeader) Field() string {
	return "params.arguments." + strings.Join(h.Path, ".")
}

package connect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of revision 2026-07-28 (basic/transports/streamable-http),
// derived from each message, since the stdio client that wrote it knows
// nothing of HTTP: Mcp-Method for "All requests" and Mcp-Name for
// "tools/call, resources/read, prompts/get requests" ("These headers are
// REQUIRED for compliance"), and "When a server's tool definition includes
// x-mcp-header annotations, conforming clients MUST mirror the designated
// parameter values into HTTP headers". Which parameters a tool declares is
// learnt from the tools/list answers that pass through, or from a listing
// of bridge connect's own.
const (
	methodHeader      = "Mcp-Method"
	nameHeader        = "Mcp-Name"
	paramHeaderPrefix = "Mcp-Param-"
	base64Prefix      = "=?base64?"
	base64Suffix      = "?="
)

// paramHeader is one x-mcp-header annotation of a tool's inputSchema: the
// argument at path is mirrored in the header Mcp-Param-{name}.
type paramHeader struct {
	path []string
	name string
}

// setStatelessHeaders sets the headers a message of revision 2026-07-28
// needs.
func (s *streamable) setStatelessHeaders(h http.Header, env *envelope) {
	if env.Method == "" {
		return
	}
	h.Set(methodHeader, encodeHeaderValue(env.Method)) // plain for every method the spec names
	var member string
	switch env.Method {
	case "tools/call", "prompts/get":
		member = "name"
	case "resources/read":
		member = "uri"
	default:
		return
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(env.Params, &params) != nil {
		return // the remote answers the malformed request
	}
	var name string
	if json.Unmarshal(params[member], &name) != nil {
		return
	}
	h.Set(nameHeader, encodeHeaderValue(name))
	if env.Method != "tools/call" {
		return
	}
	s.mu.Lock()
	annotated := s.tools[name]
	s.mu.Unlock()
	for _, a := range annotated {
		raw, ok := params["arguments"], true
		for _, k := range a.path {
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil {
				ok = false
				break
			}
			if raw, ok = obj[k]; !ok {
				break
			}
		}
		if !ok {
			continue // "Parameter value is null / not in arguments: ... MUST NOT" send it
		}
		if v, ok := headerValueOf(raw); ok {
			h.Set(paramHeaderPrefix+a.name, v)
		}
	}
}

// headerValueOf encodes an argument for its header: a string as is (or in
// Base64 form), a boolean as true or false, an integer in decimal. Other
// values (null, numbers with a fraction, objects, arrays) have no header.
func headerValueOf(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", false
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return encodeHeaderValue(s), true
	case string(raw) == "true" || string(raw) == "false":
		return string(raw), true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	// "Integer values MUST be within the safe range for JavaScript".
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53-1 {
		return "", false
	}
	return strconv.FormatInt(int64(f), 10), true
}

// encodeHeaderValue uses the Base64 form where the plain one cannot carry
// the value: "When a value cannot be safely represented as a plain ASCII
// header value (e.g., it contains non-ASCII characters, control
// characters, or has leading/trailing whitespace), clients MUST use Base64
// encoding of the UTF-8 representation", and "clients MUST also
// Base64-encode any plain-ASCII value that matches the sentinel pattern".
func encodeHeaderValue(v string) string {
	plain := v == "" || (v[0] != ' ' && v[0] != '\t' && v[len(v)-1] != ' ' && v[len(v)-1] != '\t')
	for i := 0; plain && i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			plain = false
		}
	}
	if plain && !(strings.HasPrefix(v, base64Prefix) && strings.HasSuffix(v, base64Suffix)) {
		return v
	}
	return base64Prefix + base64.StdEncoding.EncodeToString([]byte(v)) + base64Suffix
}

// learnTools reads the x-mcp-header annotations of the tools of a
// tools/list result.
func (s *streamable) learnTools(result json.RawMessage) {
	var r struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &r) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tools == nil {
		s.tools = make(map[string][]paramHeader)
	}
	for _, t := range r.Tools {
		s.tools[t.Name] = annotations(t.InputSchema)
	}
}

type schemaNode struct {
	Header     json.RawMessage       `json:"x-mcp-header"`
	Properties map[string]schemaNode `json:"properties"`
}

// annotations finds the x-mcp-header annotations of an inputSchema, on
// properties "statically reachable from the schema root: reachable via a
// chain consisting solely of properties keys".
func annotations(schema json.RawMessage) []paramHeader {
	if !bytes.Contains(schema, []byte(`"x-mcp-header"`)) {
		return nil
	}
	var root schemaNode
	if json.Unmarshal(schema, &root) != nil {
		return nil
	}
	var out []paramHeader
	var walk func(props map[string]schemaNode, path []string)
	walk = func(props map[string]schemaNode, path []string) {
		for name, n := range props {
			p := append(path[:len(path):len(path)], name)
			var h string
			if json.Unmarshal(n.Header, &h) == nil && h != "" && validHeaderName(h) {
				out = append(out, paramHeader{path: p, name: h})
			}
			walk(n.Properties, p)
		}
	}
	walk(root.Properties, nil)
	return out
}

// validHeaderName reports whether s is an HTTP token (RFC 9110, 5.1).
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > 0x7e || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

const (
	// maxToolPages bounds the pages of a listing of bridge connect's own.
	maxToolPages = 20
	// ownRequestTimeout bounds each request of bridge connect's own.
	ownRequestTimeout = 10 * time.Second
)

// learnToolOf lists the remote's tools when a tools/call names a tool no
// tools/list answer has shown yet (a client may call without listing):
// its x-mcp-header annotations decide the headers the call must carry.
// The listing repeats the call's _meta (protocol version, capabilities).
func (s *streamable) learnToolOf(ctx context.Context, env *envelope, version string) {
	if env.Method != "tools/call" {
		return
	}
	var p struct {
		Name string          `json:"name"`
		Meta json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(env.Params, &p) != nil || p.Name == "" {
		return
	}
	s.mu.Lock()
	_, known := s.tools[p.Name]
	tried := s.listedFor[p.Name]
	if !known && !tried {
		if s.listedFor == nil {
			s.listedFor = make(map[string]bool)
		}
		s.listedFor[p.Name] = true
	}
	s.mu.Unlock()
	if known || tried {
		return
	}
	cursor := ""
	for page := 0; page < maxToolPages; page++ {
		params := map[string]any{}
		if len(p.Meta) > 0 {
			params["_meta"] = p.Meta
		}
		if cursor != "" {
			params["cursor"] = cursor
		}
		result, err := s.ownRequest(ctx, version, "tools/list", params)
		if err != nil {
			s.log.Warn("listing the remote's tools for the headers of a call failed", "tool", p.Name, "err", err)
			return
		}
		s.learnTools(result)
		var next struct {
			NextCursor string `json:"nextCursor"`
		}
		if json.Unmarshal(result, &next) != nil || next.NextCursor == "" {
			return
		}
		cursor = next.NextCursor
	}
}

// ownRequest sends a request of bridge connect's own in revision
// 2026-07-28 and returns its result. Nothing of it reaches stdout.
func (s *streamable) ownRequest(ctx context.Context, version, method string, params any) (json.RawMessage, error) {
	s.mu.Lock()
	s.ownID++
	id := fmt.Sprintf(`"bridge-connect-%d"`, s.ownID)
	s.mu.Unlock()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	// The client's messages wait meanwhile: bounded tighter than a call.
	ctx, cancel := context.WithTimeout(ctx, ownRequestTimeout)
	defer cancel()
	req, err := s.newRequest(ctx, http.MethodPost, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(protocolVersionHeader, version)
	req.Header.Set(methodHeader, method)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the remote answered %s", resp.Status)
	}
	var answer []byte
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		if answer, err = readBody(resp.Body, s.opts.MaxMessageBytes); err != nil {
			return nil, err
		}
	case "text/event-stream":
		// The answer is the event whose data has the id; what comes
		// before it (progress, logs) is not the client's.
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		var data []byte
		for answer == nil {
			line, err := readLine(r, s.opts.MaxMessageBytes)
			if err != nil && len(line) == 0 {
				return nil, fmt.Errorf("the stream ended before the answer: %w", err)
			}
			switch {
			case len(line) == 0:
				if isAnswerTo(data, json.RawMessage(id)) {
					answer = data
				}
				data = nil
			case bytes.HasPrefix(line, []byte("data:")):
				v := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
				if len(data)+1+len(v) > s.opts.MaxMessageBytes {
					return nil, errEventTooLarge
				}
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, v...)
			}
		}
	default:
		return nil, fmt.Errorf("the remote answered with Content-Type %q", ct)
	}
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	if err := json.Unmarshal(answer, &m); err != nil {
		return nil, err
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%s: %d %s", method, m.Error.Code, m.Error.Message)
	}
	return m.Result, nil
}

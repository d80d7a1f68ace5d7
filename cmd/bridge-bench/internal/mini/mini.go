// Package mini is the smallest MCP server the benchmark can put behind the
// bridge: it answers each JSON-RPC message with encoding/json and nothing
// else, so that what the benchmark measures is the bridge, not the server.
//
// The same Handle serves both floors the benchmark compares the bridge with: the stdio server (one line
// in, one line out) and the bare HTTP server (one POST in, the same JSON
// out). Both therefore answer byte-for-byte the same JSON.
//
// Tools:
//   - echo {text}: answers the text back (the call every throughput figure
//     is made of);
//   - big {bytes}: answers a text result of that many bytes (the 10 MiB
//     pass-through);
//   - flood {n}: sends n notifications/progress on the request's progress
//     token, then answers (fills a session's event log for the replay figure).
package mini

import (
	"encoding/json"
	"strconv"
)

// MaxBigBytes bounds the big tool, so a typo cannot exhaust memory.
const MaxBigBytes = 256 << 20

// MaxFlood bounds the flood tool.
const MaxFlood = 1_000_000

// Revisions this server answers initialize with; anything else gets the newest.
var versions = map[string]bool{"2025-03-26": true, "2025-06-18": true, "2025-11-25": true}

const newestVersion = "2025-11-25"

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type callParams struct {
	Name      string `json:"name"`
	Arguments struct {
		Text  string `json:"text"`
		Bytes int    `json:"bytes"`
		N     int    `json:"n"`
	} `json:"arguments"`
	Meta struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	} `json:"_meta"`
}

// Handle answers one JSON-RPC message: it calls emit with each line to send
// (none for a notification or a response, several for flood). The lines
// carry no newline. A message that is not JSON gets a parse error.
func Handle(msg []byte, emit func([]byte) error) error {
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return emit(errorLine(nil, -32700, "parse error: "+err.Error()))
	}
	if req.Method == "" || req.ID == nil {
		return nil // a response or a notification: nothing to answer
	}
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(req.Params, &p)
		v := p.ProtocolVersion
		if !versions[v] {
			v = newestVersion
		}
		return emit(resultLine(req.ID, map[string]any{
			"protocolVersion": v,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "bridge-bench-minimal", "version": "1.0.0"},
		}))
	case "ping":
		return emit(resultLine(req.ID, struct{}{}))
	case "tools/list":
		return emit(resultLine(req.ID, map[string]any{"tools": tools}))
	case "tools/call":
		var p callParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return emit(errorLine(req.ID, -32602, "invalid params: "+err.Error()))
		}
		switch p.Name {
		case "echo":
			return emit(resultLine(req.ID, textResult{Content: []textContent{{Type: "text", Text: p.Arguments.Text}}}))
		case "big":
			n := p.Arguments.Bytes
			if n < 0 || n > MaxBigBytes {
				return emit(errorLine(req.ID, -32602, "bytes must be between 0 and "+strconv.Itoa(MaxBigBytes)))
			}
			return emit(bigLine(req.ID, n))
		case "flood":
			n := p.Arguments.N
			if n < 0 || n > MaxFlood {
				return emit(errorLine(req.ID, -32602, "n must be between 0 and "+strconv.Itoa(MaxFlood)))
			}
			if p.Meta.ProgressToken != nil {
				for i := 1; i <= n; i++ {
					if err := emit(progressLine(p.Meta.ProgressToken, i, n)); err != nil {
						return err
					}
				}
			}
			return emit(resultLine(req.ID, textResult{Content: []textContent{{Type: "text", Text: "flooded " + strconv.Itoa(n)}}}))
		}
		return emit(errorLine(req.ID, -32602, "unknown tool "+strconv.Quote(p.Name)))
	}
	return emit(errorLine(req.ID, -32601, "method not found: "+req.Method))
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type textResult struct {
	Content []textContent `json:"content"`
}

var tools = []map[string]any{
	{"name": "echo", "description": "Answer the text back", "inputSchema": map[string]any{
		"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}},
	{"name": "big", "description": "Answer a text result of the given size", "inputSchema": map[string]any{
		"type": "object", "properties": map[string]any{"bytes": map[string]any{"type": "integer"}}}},
	{"name": "flood", "description": "Send n progress notifications, then answer", "inputSchema": map[string]any{
		"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}},
}

func resultLine(id json.RawMessage, result any) []byte {
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{"2.0", id, result})
	return b
}

func errorLine(id json.RawMessage, code int, msg string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	type errObj struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   errObj          `json:"error"`
	}{"2.0", id, errObj{code, msg}})
	return b
}

func progressLine(token json.RawMessage, i, n int) []byte {
	b := make([]byte, 0, 128+len(token))
	b = append(b, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":`...)
	b = append(b, token...)
	b = append(b, `,"progress":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `}}`...)
	return b
}

// bigLine builds the big tool's answer directly: marshalling a string of
// many megabytes would only add copies to the child's side.
func bigLine(id json.RawMessage, n int) []byte {
	const head, tail = `,"result":{"content":[{"type":"text","text":"`, `"}]}}`
	b := make([]byte, 0, 32+len(id)+len(head)+n+len(tail))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, head...)
	start := len(b)
	b = b[:start+n]
	for i := start; i < len(b); i++ {
		b[i] = 'x'
	}
	b = append(b, tail...)
	return b
}

package peer

import (
	"bytes"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// withParams gives a child's request without params an empty object:
// JSON-RPC lets a request leave params out, but clients decode a request
// the bridge passes on with a params object in mind (the Go SDK v1.8
// client fails the whole call with "unexpected end of JSON input" on a
// roots/list without it, as npm server-everything sends it). It
// returns the message unchanged when it has params or cannot be parsed
// again.
func withParams(data []byte, env jsonrpc.Envelope) ([]byte, jsonrpc.Envelope) {
	if _, ok := jsonrpc.Lookup(data, "params"); ok {
		return data, env
	}
	end := bytes.LastIndexByte(data, '}')
	if end < 0 {
		return data, env
	}
	out := make([]byte, 0, len(data)+len(`,"params":{}`))
	out = append(out, data[:end]...)
	out = append(out, `,"params":{}`...)
	out = append(out, data[end:]...)
	nenv, err := jsonrpc.Parse(out)
	if err != nil {
		return data, env
	}
	return out, nenv
}

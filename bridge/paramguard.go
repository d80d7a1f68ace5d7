package bridge

import (
	"strings"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// ambiguousParamPath returns what is wrong when a member of a tools/call's
// arguments that one of the tool's Mcp-Param headers mirrors (annotated)
// is given twice, or in another case, on its path; else "". The header is
// checked against the value jsonrpc.Lookup reads (the last, exact name),
// while a server decoding names case-insensitively (Go's encoding/json,
// mark3labs/mcp-go) may act on another: such a request is refused with
// -32600, as jsonrpc.Parse refuses the members of params the bridge reads.
func ambiguousParamPath(body []byte, annotated []pool.ParamHeader) string {
	if len(annotated) == 0 {
		return ""
	}
	params, _ := jsonrpc.Lookup(body, "params")
	args, _ := jsonrpc.Lookup(params, "arguments")
	for _, a := range annotated {
		raw := args
		for i, k := range a.Path {
			v, present, ambiguous := jsonrpc.LookupUnique(raw, k)
			if ambiguous {
				return "params.arguments." + strings.Join(a.Path[:i+1], ".") + ", which the " + "Mcp-Param-" + a.Name +
					" header mirrors, is given twice or in another case"
			}
			if !present {
				break
			}
			raw = v
		}
	}
	return ""
}

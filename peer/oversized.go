package peer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// oversized handles a line from the child over MaxMessageBytes: the line
// is skipped, and if it was the answer to a request in flight, that request
// gets a JSON-RPC error naming the limit and the flag instead, as if the
// child had sent it; the connection goes on (one oversized answer
// ended the whole session, or killed a pool's child, with every other
// request on it).
func (c *Conn) oversized(tl *lineTooLong) {
	id, ok := oversizedResponseID(tl.head, tl.tail)
	if !ok {
		c.logger.Warn("skipping a message from the MCP server over the limit (--max-message-bytes): a notification or request, or an answer whose id the bridge could not find",
			"bytes", tl.size, "limit", c.maxLine, "start", truncate(tl.head, 200))
		return
	}
	c.logger.Warn("the MCP server's answer is over the limit (--max-message-bytes); its request gets an error instead",
		"bytes", tl.size, "limit", c.maxLine, "id", string(id))
	msg := fmt.Sprintf("the MCP server's answer is %d bytes, over the bridge's limit of %d bytes; raise --max-message-bytes to pass answers this large", tl.size, c.maxLine)
	data := jsonrpc.ErrorResponse(id, jsonrpc.CodeInternalError, msg, map[string]int{"size": tl.size, "limit": c.maxLine})
	env, err := jsonrpc.Parse(data)
	if err != nil {
		c.logger.Error("the bridge built an invalid error for an oversized answer", "err", err)
		return
	}
	c.receive(data, env)
}

// tailID matches an id that is the last member of a message's top-level
// object, at the very end of a line (the TypeScript SDK writes jsonrpc and
// id after the result): the final brace closes the message, so the member
// before it is the message's own.
var tailID = regexp.MustCompile(`[{,]\s*"id"\s*:\s*(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*")\s*}\s*$`)

// oversizedResponseID finds the id of a response from the first and last
// bytes of a line too long to parse: among the members of the top-level
// object at its start (the Go SDK writes jsonrpc and id first), or as its
// last member. It reports false for a request or notification (a method
// among the members at its start), and when no id is found.
func oversizedResponseID(head, tail []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var id []byte
	for {
		key, err := dec.Token()
		if err != nil {
			break // the line goes on beyond head
		}
		k, ok := key.(string)
		if !ok {
			break // the end of the object: not a line over the limit
		}
		switch k {
		case "method":
			return nil, false
		case "id":
			tok, err := dec.Token()
			if err != nil {
				return nil, false
			}
			switch v := tok.(type) {
			case string:
				id, _ = json.Marshal(v)
			case json.Number:
				id = []byte(v)
			default:
				return nil, false
			}
			continue
		}
		if !skipValue(dec) {
			break
		}
	}
	if id != nil {
		return id, true
	}
	// The pattern finds where an id may stand; json.Valid whether it is
	// one (an escape such as \0, or a number such as 1.2.3, is not).
	if m := tailID.FindSubmatch(tail); m != nil && json.Valid(m[1]) {
		return bytes.Clone(m[1]), true
	}
	return nil, false
}

// skipValue reads past one value; false if the input ends first.
func skipValue(dec *json.Decoder) bool {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return true
		}
	}
}

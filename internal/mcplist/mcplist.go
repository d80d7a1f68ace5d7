// Package mcplist rewrites the answers to MCP's list requests (tools/list,
// prompts/list, resources/list, resources/templates/list), for the
// interceptors that hide items of them (policy, pin), and the resource
// URIs of a subscriptions/listen request. It decodes only the members of
// the result and the one member of each item that names it.
package mcplist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// Filter rewrites the answer data to a list request, keeping of
// result.<array> the items whose member key is a string that keep accepts (given the name and the item as written)
// (an item without one is dropped). It returns data itself when nothing
// was dropped, else a new answer with the same id and the other members
// of result as they were; and the names dropped. Only the result's
// members and the items' key member are decoded.
func Filter(data []byte, array, key string, keep func(name string, item []byte) bool) ([]byte, []string, error) {
	result, ok := jsonrpc.Lookup(data, "result")
	if !ok {
		return nil, nil, errors.New("no result")
	}
	arr, ok := jsonrpc.Lookup(result, array)
	if !ok || bytes.Equal(arr, []byte("null")) {
		return data, nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(arr, &items); err != nil {
		return nil, nil, fmt.Errorf("result.%s is not an array: %w", array, err)
	}
	kept := items[:0]
	var dropped []string
	for _, it := range items {
		name := member(it, key)
		if name != "" && keep(name, it) {
			kept = append(kept, it)
			continue
		}
		if name == "" {
			name = "(an item without " + key + ")"
		}
		dropped = append(dropped, name)
	}
	if len(dropped) == 0 {
		return data, nil, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(result, &members); err != nil {
		return nil, nil, fmt.Errorf("result is not an object: %w", err)
	}
	members[array] = jsonArray(kept)
	out := bytes.NewBuffer(make([]byte, 0, len(data)))
	out.WriteString(`{"jsonrpc":"2.0","id":`)
	out.Write(jsonrpc.RawID(data))
	out.WriteString(`,"result":`)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false) // descriptions stay byte for byte as the server wrote them
	if err := enc.Encode(members); err != nil {
		return nil, nil, err
	}
	out.Truncate(out.Len() - 1) // Encode's newline
	out.WriteByte('}')
	return out.Bytes(), dropped, nil
}

// member returns the string member name of the JSON object obj, or "".
func member(obj []byte, name string) string {
	if v, ok := jsonrpc.Lookup(obj, name); ok {
		s, _ := jsonrpc.StringValue(v)
		return s
	}
	return ""
}

// FilterSubscriptions rewrites a subscriptions/listen request, keeping of
// params.notifications.resourceSubscriptions the URIs keep accepts (an
// element that is not a string is dropped, as no server could read it as
// a URI). It returns data itself when nothing was dropped, else the
// request with that one array rewritten (the kept elements as written)
// and every other member as it was; and the URIs dropped. Members are
// read as Lookup reads them, as the server will: exact names, the last of
// duplicates (the rewritten request has no duplicates left on the path).
// A resourceSubscriptions that is not an array is an error: the request
// must be refused, not passed on unread.
func FilterSubscriptions(data []byte, keep func(uri string) bool) ([]byte, []string, error) {
	params, _ := jsonrpc.Lookup(data, "params")
	notes, _ := jsonrpc.Lookup(params, "notifications")
	arr, ok := jsonrpc.Lookup(notes, "resourceSubscriptions")
	if !ok || bytes.Equal(arr, []byte("null")) {
		return data, nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(arr, &items); err != nil {
		return nil, nil, fmt.Errorf("params.notifications.resourceSubscriptions is not an array: %w", err)
	}
	kept := items[:0]
	var dropped []string
	for _, it := range items {
		uri, isString := jsonrpc.StringValue(it)
		if isString && keep(uri) {
			kept = append(kept, it)
			continue
		}
		if !isString {
			uri = "(not a string: " + string(it) + ")"
		}
		dropped = append(dropped, uri)
	}
	if len(dropped) == 0 {
		return data, nil, nil
	}
	out, err := replace(data, jsonArray(kept), "params", "notifications", "resourceSubscriptions")
	if err != nil {
		return nil, nil, err
	}
	return out, dropped, nil
}

// replace sets the member at path of the JSON object data to value,
// decoding only the objects along the path (the last of duplicate members
// counts, as in Lookup; the objects it re-encodes have none left).
func replace(data, value []byte, path ...string) ([]byte, error) {
	if len(path) == 0 {
		return value, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, fmt.Errorf("%s: not an object: %w", path[0], err)
	}
	inner, err := replace(members[path[0]], value, path[1:]...)
	if err != nil {
		return nil, err
	}
	members[path[0]] = inner
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(members); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// jsonArray writes a JSON array of items as written.
func jsonArray(items []json.RawMessage) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it)
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

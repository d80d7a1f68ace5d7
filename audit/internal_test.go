package audit

import (
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// within finds what Lookup found in the tail of a message, and only there.
func TestWithin(t *testing.T) {
	msg := []byte(`{"a":{"x":1},"b":{"y":2}}`)
	a, _ := jsonrpc.Lookup(msg, "a")
	b, _ := jsonrpc.Lookup(msg, "b")
	tail := msg[13:] // from the comma before "b"
	if within(a, tail) || !within(b, tail) || !within(a, msg) || !within(b, msg) {
		t.Errorf("within: a in tail %v, b in tail %v, a in msg %v, b in msg %v", within(a, tail), within(b, tail), within(a, msg), within(b, msg))
	}
	if within([]byte(`{"y":2}`), tail) {
		t.Error("a copy of b is within the tail")
	}
	if !within(b, tail[:len(tail)-1]) || within(b, tail[:len(tail)-2]) {
		t.Error("within ignores the end of the tail")
	}
	// A sub-slice whose capacity was cut is not found (never wrongly found).
	if within(b[:1:1], tail) {
		t.Error("a capped sub-slice is found")
	}
}

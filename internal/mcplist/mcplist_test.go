package mcplist_test

import (
	"slices"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/internal/mcplist"
)

// Filter keeps what keep accepts, the other members of the result, and
// the bytes of each item; a list it cannot read is an error.
func TestFilter(t *testing.T) {
	if _, _, err := mcplist.Filter([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":{"a":1}}}`), "tools", "name", func(string, []byte) bool { return true }); err == nil {
		t.Fatal("a tools member that is not an array was accepted")
	}
	out, dropped, err := mcplist.Filter([]byte(`{"jsonrpc":"2.0","id":"x","result":{"tools":[{"name":"a"},{"name":"b","description":"<&>"},{"x":1}],"nextCursor":"c"}}`),
		"tools", "name", func(n string, _ []byte) bool { return n == "b" })
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","id":"x","result":{"nextCursor":"c","tools":[{"name":"b","description":"<&>"}]}}`; string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
	if !slices.Equal(dropped, []string{"a", "(an item without name)"}) {
		t.Errorf("dropped %v", dropped)
	}
}

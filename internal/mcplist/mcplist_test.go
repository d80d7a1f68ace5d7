package mcplist_test

import (
	"slices"
	"strings"
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

// FilterSubscriptions keeps the URIs keep accepts, as written, and every
// other member of the request; it reads what the server will (the last of
// duplicate members, escapes decoded), and what is not an array of URIs
// is dropped or an error.
func TestFilterSubscriptions(t *testing.T) {
	keep := func(uri string) bool { return uri != "test://secret" }
	for _, c := range []struct{ in, out, dropped string }{
		{`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["test://a","test://secret","test:\/\/b"]},"_meta":{"k":"<&>"}}}`,
			`{"id":1,"jsonrpc":"2.0","method":"subscriptions/listen","params":{"_meta":{"k":"<&>"},"notifications":{"resourceSubscriptions":["test://a","test:\/\/b"],"toolsListChanged":true}}}`, "test://secret"},
		{`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["test://a"],"resourceSubscriptions":["test:\/\/secret",7]}}}`,
			`{"id":1,"jsonrpc":"2.0","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":[]}}}`, "test://secret (not a string: 7)"},
	} {
		out, dropped, err := mcplist.FilterSubscriptions([]byte(c.in), keep)
		if err != nil || string(out) != c.out || strings.Join(dropped, " ") != c.dropped {
			t.Errorf("%s:\ngot  %s %q %v\nwant %s %q", c.in, out, dropped, err, c.out, c.dropped)
		}
	}
	for _, same := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["test://a"]}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":null}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}}`,
	} {
		if out, dropped, err := mcplist.FilterSubscriptions([]byte(same), keep); err != nil || string(out) != same || dropped != nil {
			t.Errorf("%s: got %s %q %v, want it as it was", same, out, dropped, err)
		}
	}
	if _, _, err := mcplist.FilterSubscriptions([]byte(`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":"test://secret"}}}`), keep); err == nil {
		t.Error("a resourceSubscriptions that is not an array passed")
	}
}

package jsonrpc

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func dropPrefixed(name string) bool { return strings.HasPrefix(name, "io.modelcontextprotocol/") }

func TestWithoutMembers(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		changed  bool
	}{
		{`{"progressToken":1}`, `{"progressToken":1}`, false},
		{`{}`, `{}`, false},
		{`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`, `{}`, true},
		{`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"p"}`, `{"progressToken":"p"}`, true},
		{`{"a":[1,{"b":2}], "io.modelcontextprotocol/clientInfo" : {"name":"x"} ,"c":null}`, `{"a":[1,{"b":2}],"c":null}`, true},
		{` { "x":1 , "io.modelcontextprotocol/logLevel":"debug" } `, `{"x":1}`, true},
		// An escaped name is decoded before drop sees it.
		{`{"io.modelcontextprotocol\/protocolVersion":"2026-07-28","y":2}`, `{"y":2}`, true},
		{`{"\u0069o.modelcontextprotocol/clientCapabilities":{},"z":3}`, `{"z":3}`, true},
		{`[1]`, `[1]`, false},
	} {
		got, changed := WithoutMembers([]byte(tc.in), dropPrefixed)
		if string(got) != tc.want || changed != tc.changed {
			t.Errorf("WithoutMembers(%s) = %s, %v; want %s, %v", tc.in, got, changed, tc.want, tc.changed)
		}
	}
}

// WithoutMembers agrees with encoding/json: the result decodes to the
// input's members less the dropped ones.
func FuzzWithoutMembers(f *testing.F) {
	f.Add([]byte(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"p"}`))
	f.Add([]byte(`{"a":1,"io.modelcontextprotocol/x":{"y":[1,2]},"a":2}`))
	f.Add([]byte(`{"\u0069o.modelcontextprotocol/x":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var in map[string]json.RawMessage
		if json.Unmarshal(data, &in) != nil || in == nil {
			return
		}
		out, changed := WithoutMembers(data, dropPrefixed)
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("WithoutMembers(%q) = %q, not JSON: %v", data, out, err)
		}
		want := map[string]json.RawMessage{}
		dropped := false
		for k, v := range in {
			if dropPrefixed(k) {
				dropped = true
				continue
			}
			want[k] = v
		}
		if changed != dropped {
			t.Fatalf("WithoutMembers(%q) changed %v, want %v", data, changed, dropped)
		}
		if !reflect.DeepEqual(normalize(t, got), normalize(t, want)) {
			t.Fatalf("WithoutMembers(%q) = %q", data, out)
		}
	})
}

func normalize(t *testing.T, m map[string]json.RawMessage) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			t.Fatal(err)
		}
		out[k] = x
	}
	return out
}

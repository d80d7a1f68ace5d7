package jsonrpc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func dropPrefixed(name []byte) bool { return bytes.HasPrefix(name, []byte("io.modelcontextprotocol/")) }

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
			if dropPrefixed([]byte(k)) {
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

// metaSeeds are requests whose _meta has members of revision 2026-07-28
// around a progress token, and messages whose Spans lie on either side of
// _meta or in it.
var metaSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`,
	`{"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/logLevel":"debug", "progressToken" : "p", "io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{}},"id":"x"}`,
	`{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"_meta":{"progressToken":7,"vendor/x":[1,{"a":2}],"io.modelcontextprotocol\/clientInfo":{}},"name":"p"}}`,
	`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"progress":1}}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":{"\u0069o.modelcontextprotocol/logLevel":"info"},"requestId":5}}`,
	`{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":{"not":"an id"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
}

// dropMeta is a drop of FuzzWithoutMetaMembers, chosen by the input: the
// members of revision 2026-07-28, or the progress token as well.
func dropMeta(which byte) func([]byte) bool {
	if which%2 == 0 {
		return dropPrefixed
	}
	return func(name []byte) bool { return dropPrefixed(name) || string(name) == "progressToken" }
}

func TestWithoutMetaMembers(t *testing.T) {
	for _, seed := range metaSeeds {
		for which := range byte(2) {
			checkWithoutMetaMembers(t, []byte(seed), which)
		}
	}
}

// WithoutMetaMembers agrees with WithoutMembers of the message's _meta
// (fuzzed against encoding/json) and with Parse of its result.
func FuzzWithoutMetaMembers(f *testing.F) {
	for _, seed := range metaSeeds {
		f.Add([]byte(seed), byte(0))
		f.Add([]byte(seed), byte(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, which byte) {
		checkWithoutMetaMembers(t, data, which)
	})
}

func checkWithoutMetaMembers(t *testing.T, data []byte, which byte) {
	t.Helper()
	env, err := Parse(data)
	if err != nil {
		return
	}
	in := bytes.Clone(data)
	got, changed := Message{Data: data, Env: env}.WithoutMetaMembers(dropMeta(which))
	if !bytes.Equal(data, in) {
		t.Fatalf("WithoutMetaMembers(%q) modified its input", in)
	}
	stripped, wantChanged := WithoutMembers(env.MetaAt.In(data), dropMeta(which))
	if changed != wantChanged {
		t.Fatalf("WithoutMetaMembers(%q) changed %v, WithoutMembers of its _meta %v", data, changed, wantChanged)
	}
	if !changed {
		if !bytes.Equal(got.Data, data) || got.Env != env {
			t.Fatalf("WithoutMetaMembers(%q) changed nothing but returned %q, %+v", data, got.Data, got.Env)
		}
		return
	}
	want := Rewrite(data, Edit{At: env.MetaAt, Raw: stripped})
	if !bytes.Equal(got.Data, want) {
		t.Fatalf("WithoutMetaMembers(%q) = %q, want %q", data, got.Data, want)
	}
	wantEnv, err := Parse(want)
	if err != nil {
		t.Fatalf("Parse(%q), the message %q without members of its _meta: %v", want, data, err)
	}
	if got.Env != wantEnv {
		t.Fatalf("WithoutMetaMembers(%q): Envelope\n%+v, Parse of the result gives\n%+v", data, got.Env, wantEnv)
	}
}

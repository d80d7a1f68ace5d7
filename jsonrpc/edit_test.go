package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRewrite(t *testing.T) {
	data := []byte(`{"jsonrpc":"2.0","id":"client-7","method":"tools/call","params":{"name":"echo","_meta":{"progressToken":"tok"}}}`)
	env, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	got := Rewrite(data, Edit{env.IDAt, []byte(`12`)}, Edit{Span{}, []byte(`ignored`)}, Edit{env.ProgressTokenAt, []byte(`13`)})
	want := `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":13}}}`
	if string(got) != want || cap(got) != len(got) {
		t.Fatalf("Rewrite = %s (cap %d), want %s", got, cap(got), want)
	}
	if env2, err := Parse(got); err != nil || env2.ID != "n12" || env2.ProgressToken != "n13" || env2.Name(got) != "echo" {
		t.Fatalf("the rewritten message parses as %+v, %v", env2, err)
	}
	// The Envelope follows the edits.
	moved := env
	out := moved.Rewrite(data, Edit{env.IDAt, []byte(`"a-much-longer-id"`)}, Edit{env.ProgressTokenAt, []byte(`5`)})
	again, err := Parse(out)
	if err != nil || moved != again {
		t.Fatalf("Envelope.Rewrite: %+v, parsing the result gives %+v (%v)", moved, again, err)
	}
	if string(Rewrite(data)) != string(data) {
		t.Fatal("no edit must copy the message unchanged")
	}
}

func TestAppendRewrite(t *testing.T) {
	data := []byte(`{"params":{"_meta":{"progressToken":"tok"}},"id":"client-7","method":"m","jsonrpc":"2.0"}`)
	env, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// Out of order: the id after params.
	edits := []Edit{{env.IDAt, []byte(`12`)}, {env.ProgressTokenAt, []byte(`13`)}}
	want := `{"params":{"_meta":{"progressToken":13}},"id":12,"method":"m","jsonrpc":"2.0"}`
	buf := make([]byte, 3, 256)
	copy(buf, "ab:")
	got := AppendRewrite(buf, data, edits...)
	if string(got) != "ab:"+want || &got[0] != &buf[0] {
		t.Fatalf("AppendRewrite into room = %s (same memory: %v), want ab:%s in it", got, &got[0] == &buf[0], want)
	}
	small := []byte("ab:")
	got = AppendRewrite(small, data, edits...)
	if string(got) != "ab:"+want || cap(got) != len(got) {
		t.Fatalf("AppendRewrite beyond its room = %s (cap %d), want ab:%s at its exact size", got, cap(got), want)
	}
}

func TestLookup(t *testing.T) {
	data := []byte(`{"a":1, "b" : {"c":[1,2]}, "\u0064":"x", "a":"again", "para\ufffds":3}`)
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"a", `"again"`, true}, // the last of duplicates, as encoding/json
		{"b", `{"c":[1,2]}`, true},
		{"d", `"x"`, true}, // escaped names
		{"c", "", false},   // members of nested objects are not members
		{"para\ufffds", "3", true},
	} {
		got, ok := Lookup(data, tc.name)
		if string(got) != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%q) = %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range []string{`[1]`, `"a"`, `{"a":1`, `{"a" 1}`, ``} {
		if _, ok := Lookup([]byte(bad), "a"); ok {
			t.Errorf("Lookup(%s) found a member", bad)
		}
	}
	// params._meta through the Envelope, without allocating.
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	env, _ := Parse(msg)
	meta := env.MetaAt.In(msg)
	if v, ok := Lookup(meta, "io.modelcontextprotocol/protocolVersion"); !ok || string(v) != `"2026-07-28"` {
		t.Fatalf("Lookup in _meta = %s %v", v, ok)
	}
	if n := testing.AllocsPerRun(10, func() { Lookup(meta, "io.modelcontextprotocol/protocolVersion") }); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}

func TestIDAppendJSON(t *testing.T) {
	for _, raw := range []string{`0`, `7`, `1023`, `1024`, `-3`, `1.5`, `"x"`, `""`, `"a\"b<>\u00e9\n"`, `null`} {
		id, err := canonicalID([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		back, err := canonicalID(id.AppendJSON(nil))
		if err != nil || back != id {
			t.Errorf("%s: AppendJSON gave %s, which is %q, not %q (%v)", raw, id.AppendJSON(nil), back, id, err)
		}
		if id.IsNumber() != (raw[0] != '"' && raw != "null") {
			t.Errorf("%s: IsNumber = %v", raw, id.IsNumber())
		}
	}
	for _, n := range []int64{0, 5, 1023, 1024, 1 << 40, -1} {
		want, _ := canonicalID([]byte(json.Number(itoa(n))))
		if got := NumberID(n); got != want {
			t.Errorf("NumberID(%d) = %q, want %q", n, got, want)
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestDecodeResponse(t *testing.T) {
	res, rpcErr, err := DecodeResponse([]byte(`{"jsonrpc":"2.0","id":1,"result":{"a":1}}`))
	if err != nil || rpcErr != nil || string(res) != `{"a":1}` {
		t.Fatalf("result: %s %v %v", res, rpcErr, err)
	}
	res, rpcErr, err = DecodeResponse(ErrorResponse([]byte(`1`), CodeMethodNotFound, "no such method", nil))
	if err != nil || res != nil || rpcErr == nil || rpcErr.Code != CodeMethodNotFound || rpcErr.Message != "no such method" {
		t.Fatalf("error: %s %v %v", res, rpcErr, err)
	}
	var e error = rpcErr
	var target *Error
	if !errors.As(e, &target) || e.Error() != "JSON-RPC error -32601: no such method" {
		t.Fatalf("*Error as an error: %v", e)
	}
	if _, _, err := DecodeResponse([]byte(`{"jsonrpc":"2.0","id":1}`)); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a response without result or error: %v", err)
	}
	if string((&Error{Code: -1, Message: "m"}).Response([]byte(`"q"`))) != `{"jsonrpc":"2.0","id":"q","error":{"code":-1,"message":"m"}}` {
		t.Fatal("Error.Response")
	}
}

// LookupEach agrees with Lookup of each name, in one reading.
func TestLookupEach(t *testing.T) {
	data := []byte(`{"a":1, "b" : {"c":[1,2]}, "\u0064":"x", "a":"again", "para\ufffds":3, "` + "\xff" + `":4}`)
	names := []string{"a", "b", "c", "d", "para\ufffds", "\ufffd", "aaaaaaaaaaaaaaaaaaaa"}
	values := make([][]byte, len(names))
	if !LookupEach(data, names, values) {
		t.Fatal("LookupEach refused a valid object")
	}
	for i, n := range names {
		want, ok := Lookup(data, n)
		if !bytes.Equal(values[i], want) || (values[i] != nil) != ok {
			t.Errorf("LookupEach %q = %q, Lookup = %q, %v", n, values[i], want, ok)
		}
	}
	if string(values[5]) != "4" || string(values[0]) != `"again"` || values[2] != nil {
		t.Errorf("LookupEach = %q", values)
	}
	for _, bad := range []string{`[1]`, `{"a":1`, ``} {
		values[0] = []byte("x")
		if LookupEach([]byte(bad), names[:1], values[:1]) || values[0] != nil {
			t.Errorf("LookupEach(%s) = %q", bad, values[0])
		}
	}
	meta := []byte(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`)
	if n := testing.AllocsPerRun(10, func() {
		var v [2][]byte
		LookupEach(meta, []string{"io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"}, v[:])
	}); n != 0 {
		t.Errorf("LookupEach allocates %v times", n)
	}
}

func TestIsASCII(t *testing.T) {
	for s, want := range map[string]bool{"": true, "abc": true, "io.modelcontextprotocol/x": true, "io.modelcontextprotocol/\xff": false, "é": false, "abcdefgh\x80": false, "\x80bcdefghi": false} {
		if isASCII([]byte(s)) != want {
			t.Errorf("isASCII(%q) = %v", s, !want)
		}
	}
	// A high byte anywhere, in strings of every length around the words.
	for n := range 26 {
		b := []byte(strings.Repeat("a", n))
		if !isASCII(b) {
			t.Errorf("isASCII(%q) = false", b)
		}
		for i := range n {
			b[i] = 0x80
			if isASCII(b) {
				t.Errorf("isASCII(%q) = true", b)
			}
			b[i] = 'a'
		}
	}
}

func TestIsString(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		is        bool
	}{
		{`"2026-07-28"`, "2026-07-28", true},
		{`"2026-07-2\u0038"`, "2026-07-28", true},
		{`"2026-07-29"`, "2026-07-28", false},
		{`2026`, "2026", false},
		{"\"\xff\"", "\xff", false}, // decodes to U+FFFD
		{"\"\xff\"", "\ufffd", true},
	} {
		if got := IsString([]byte(tc.raw), tc.want); got != tc.is {
			t.Errorf("IsString(%s, %q) = %v", tc.raw, tc.want, got)
		}
	}
}

// ParseMeta finds the members of params._meta as LookupEach of MetaAt,
// the last of duplicates, and none where the Envelope has no MetaAt.
func TestParseMeta(t *testing.T) {
	names := []string{"io.modelcontextprotocol/protocolVersion", "a", "progressToken"}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v","a":[1],"progressToken":7}}}`, []string{`"v"`, `[1]`, `7`}},
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1},"_meta":{"b":2}}}`, []string{"", "", ""}},
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1},"_meta":null}}`, []string{"", "", ""}},
		{`{"jsonrpc":"2.0","id":1,"result":{},"params":{"_meta":{"a":1}}}`, []string{"", "", ""}},
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1}},"params":{}}`, []string{"", "", ""}}, // ambiguous
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1}}`, []string{"", "", ""}},              // not JSON
	} {
		values := [][]byte{[]byte("x"), []byte("x"), []byte("x")}
		env, err := ParseMeta([]byte(tc.in), names, values)
		for i, w := range tc.want {
			if string(values[i]) != w || (values[i] == nil) != (w == "") {
				t.Errorf("%s: %s = %q (err %v), want %q", tc.in, names[i], values[i], err, w)
			}
		}
		if env2, err2 := Parse([]byte(tc.in)); env2 != env || (err2 == nil) != (err == nil) {
			t.Errorf("%s: ParseMeta = %+v, %v; Parse = %+v, %v", tc.in, env, err, env2, err2)
		}
	}
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	if n := testing.AllocsPerRun(10, func() {
		var v [3][]byte
		ParseMeta(msg, names, v[:])
	}); n != 0 {
		t.Errorf("ParseMeta allocates %v times", n)
	}
}

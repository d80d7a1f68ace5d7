package pool

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// A legacy answer gets what revision 2026-07-28 requires of a result, and
// loses the error codes it retired.
func TestDecorate(t *testing.T) {
	p := &Pool{}
	info := json.RawMessage(`{"name":"s","version":"1"}`)
	tests := []struct {
		name, method, in, want string
	}{
		{"list", "tools/list", `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`,
			`{"jsonrpc":"2.0","id":"r","result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}},"cacheScope":"public","resultType":"complete","tools":[],"ttlMs":0}}`},
		{"call keeps its _meta", "tools/call", `{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"k":1}}}`,
			`{"jsonrpc":"2.0","id":"r","result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"},"k":1},"content":[],"resultType":"complete"}}`},
		{"resource not found", "resources/read", `{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"nope"}}`,
			`{"jsonrpc":"2.0","id":"r","error":{"code":-32602,"message":"nope"}}`},
		{"other errors stay", "tools/call", `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}`,
			`{"jsonrpc":"2.0","id":"r","error":{"code":-32603,"message":"x"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(p.decorate([]byte(tc.in), []byte(`"r"`), tc.method, info)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// The fast path (no decoding) says the same as decorate, whatever the
// result looks like; with a retry's id in place of the child's.
func TestDecorateMsg(t *testing.T) {
	p := &Pool{}
	info := json.RawMessage(`{"name":"s","version":"1"}`)
	for _, in := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`,
		`{"result":{},"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","id":1,"result":{ "content":[{"type":"text","text":"x"}] , "isError":false }}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"k":1}}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"nope"}}`,
		// Names written with escapes are the same names.
		`{"jsonrpc":"2.0","id":1,"result":{"content":[],"\u005fmeta":{"k":1}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultT\u0079pe":"other"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ttl\u004ds":5}}`,
		// The names nested, or in a string, are other members'.
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","_meta":{"k":1}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\"ttlMs\" and \"cacheScope\""}]}}`,
	} {
		for _, method := range []string{"tools/list", "tools/call"} {
			for _, id := range []string{`1`, `"retry-2"`} {
				// Without memory for the answer, with too little, and
				// with enough (holding another's bytes).
				for _, buf := range [][]byte{nil, make([]byte, 3, 8), []byte(strings.Repeat("x", 512))} {
					env, err := jsonrpc.Parse([]byte(in))
					if err != nil {
						t.Fatal(err)
					}
					fast := p.decorateMsg(jsonrpc.Message{Data: []byte(in), Env: env}, []byte(id), method, info, buf)
					slow := p.decorate([]byte(in), []byte(id), method, info)
					var a, b any
					if json.Unmarshal(fast, &a) != nil || json.Unmarshal(slow, &b) != nil || !reflect.DeepEqual(a, b) {
						t.Errorf("%s %s id %s, %d bytes of room:\nfast %s\nslow %s", in, method, id, cap(buf), fast, slow)
					}
				}
			}
		}
	}
}

// mentionsDecoration is bytes.Contains of each quoted name.
func TestMentionsDecoration(t *testing.T) {
	for _, res := range []string{
		`{}`, `{"content":[]}`, `{"_meta":{}}`, `{"a":"_meta"}`, `{"a":"x_meta"}`, `{"a":"\"ttlMs\""}`,
		`{"cacheScope`, `{"resultTyp":1}`, `"`, ``, `{"a":{"b":{"resultType":"x"}}}`, `{"ttlMs"`,
		`{"content":[{"type":"text","text":"hello"}]}`, `{"content":[{"type":"text","text":"a \"ttlMs\" b"}]}`,
		`{"content":[{"type":"text","text":"hello"}],"_meta":{}}`, `{"structuredContent":{"cacheScope":1}}`,
		`{"xxxxxxx"resultType"`, `{"xxxxxx"resultType"`, `12345678"_meta"`, `1234567"_meta"`, `1234567"_meta`,
		`"""""""""""""""""""""""""""ttlMs"`, `xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"`,
	} {
		want := false
		for _, k := range []string{`"_meta"`, `"resultType"`, `"ttlMs"`, `"cacheScope"`} {
			want = want || strings.Contains(res, k)
		}
		if got := mentionsDecoration([]byte(res)); got != want {
			t.Errorf("mentionsDecoration(%s) = %v, want %v", res, got, want)
		}
	}
}

// mentionsDecoration is right whichever byte of an 8-byte word a quote
// falls on, and whatever quotes come before.
func TestMentionsDecorationPositions(t *testing.T) {
	for pad := range 20 {
		for _, fill := range []string{"x", `"`, `\"`} {
			for _, k := range []string{`"_meta"`, `"resultType"`, `"ttlMs"`, `"cacheScope"`, `"_met"`, `"ttlMS"`} {
				res := strings.Repeat(fill, pad) + k + strings.Repeat("y", pad%9)
				want := strings.Contains(res, `"_meta"`) || strings.Contains(res, `"resultType"`) ||
					strings.Contains(res, `"ttlMs"`) || strings.Contains(res, `"cacheScope"`)
				if got := mentionsDecoration([]byte(res)); got != want {
					t.Errorf("mentionsDecoration(%s) = %v, want %v", res, got, want)
				}
			}
		}
	}
}

// mentionsRequestState is bytes.Contains of the quoted name.
func TestMentionsRequestState(t *testing.T) {
	for _, data := range []string{
		``, `S`, `"requestState"`, `{"params":{"requestState":"x"}}`, `{"a":"requestState"}`, `requestState"`,
		`"requestState`, `"requeststate"`, `SSS"requestSSState"S`, `"requestS"requestState"`, `x"requestState"`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"S","arguments":{"State":"requestS"}}}`,
	} {
		if got, want := mentionsRequestState([]byte(data)), strings.Contains(data, `"requestState"`); got != want {
			t.Errorf("mentionsRequestState(%s) = %v, want %v", data, got, want)
		}
	}
}

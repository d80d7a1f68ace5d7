package connect

import (
	"encoding/json"
	"net/http"
	"testing"
)

// The headers of revision 2026-07-28 derived from messages: plain values
// as they are, the rest in Base64 form, no header for a value the body
// does not have or that no header can carry.
func TestStatelessHeaders(t *testing.T) {
	s := &streamable{}
	s.learnTools(json.RawMessage(`{"tools":[{"name":"t","inputSchema":{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},
		"n":{"type":"integer","x-mcp-header":"N"},
		"ok":{"type":"boolean","x-mcp-header":"Ok"},
		"f":{"type":"number","x-mcp-header":"F"},
		"bad":{"type":"string","x-mcp-header":"Not a token"},
		"o":{"type":"object","properties":{"deep":{"type":"string","x-mcp-header":"Deep"}}}}}}]}`))
	for _, tc := range []struct {
		msg  string
		want map[string]string
	}{
		{`{"method":"tools/call","params":{"name":"t","arguments":{"region":"eu-west1","n":42.0,"ok":true,"f":1.5,"bad":"x","o":{"deep":" padded"}}}}`,
			map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "t", "Mcp-Param-Region": "eu-west1", "Mcp-Param-N": "42", "Mcp-Param-Ok": "true", "Mcp-Param-Deep": "=?base64?IHBhZGRlZA==?="}},
		{`{"method":"tools/call","params":{"name":"t","arguments":{"region":"Grüße","n":null}}}`,
			map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "t", "Mcp-Param-Region": "=?base64?R3LDvMOfZQ==?="}},
		{`{"method":"tools/call","params":{"name":"=?base64?x?=","arguments":{"region":"x"}}}`,
			map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?PT9iYXNlNjQ/eD89?="}},
		{`{"method":"resources/read","params":{"uri":"file:///a b"}}`,
			map[string]string{"Mcp-Method": "resources/read", "Mcp-Name": "file:///a b"}},
		{`{"method":"server/discover","params":{}}`, map[string]string{"Mcp-Method": "server/discover"}},
	} {
		var env envelope
		if err := json.Unmarshal([]byte(tc.msg), &env); err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		s.setStatelessHeaders(h, &env)
		if len(h) != len(tc.want) {
			t.Errorf("%s: headers %v, want %v", tc.msg, h, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: %s %q, want %q", tc.msg, k, got, v)
			}
		}
	}
}

// FuzzStatelessHeaders: whatever a message holds, the headers derived from
// it carry visible ASCII only (or the Base64 form), and decode back to the
// string value they mirror.
func FuzzStatelessHeaders(f *testing.F) {
	f.Add(`{"method":"tools/call","params":{"name":"t","arguments":{"region":"Grüße","n":3}}}`)
	f.Add(`{"method":"resources/read","params":{"uri":" x\t"}}`)
	f.Add(`{"method":"tools/call","params":{"name":"=?base64?x?=","arguments":{"region":1e300}}}`)
	f.Fuzz(func(t *testing.T, msg string) {
		s := &streamable{}
		s.learnTools(json.RawMessage(`{"tools":[{"name":"t","inputSchema":{"properties":{"region":{"x-mcp-header":"Region"},"n":{"x-mcp-header":"N"}}}}]}`))
		var env envelope
		if json.Unmarshal([]byte(msg), &env) != nil {
			return
		}
		h := http.Header{}
		s.setStatelessHeaders(h, &env)
		for k, vs := range h {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
						t.Fatalf("%s: %q", k, v)
					}
				}
			}
		}
	})
}

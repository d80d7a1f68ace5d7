package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Envelope
		err  string // "" for success, "parse" for -32700, else invalid
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, Envelope{Kind: KindRequest, ID: "n1", Method: "tools/list"}, ""},
		{`{"jsonrpc":"2.0","id":1.0,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":"1","method":"a"}`, Envelope{Kind: KindRequest, ID: "s1", Method: "a"}, ""},
		{` {"jsonrpc":"2.0", "id" : "x\u0041" ,"method":"a"}`, Envelope{Kind: KindRequest, ID: "sxA", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, Envelope{Kind: KindNotification, Method: "notifications/initialized"}, ""},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p"}}}`,
			Envelope{Kind: KindRequest, ID: "n7", Method: "tools/call", ProgressToken: "sp"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"progress":1}}`,
			Envelope{Kind: KindNotification, Method: "notifications/progress", ProgressToken: "n3"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r"}}`,
			Envelope{Kind: KindNotification, Method: "notifications/cancelled", RequestID: "sr"}, ""},
		{`{"jsonrpc":"2.0","id":2,"result":{}}`, Envelope{Kind: KindResponse, ID: "n2"}, ""},
		{`{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}`, Envelope{Kind: KindResponse, ID: "n2", IsError: true}, ""},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`, Envelope{Kind: KindResponse, IsError: true}, ""},
		{`{"jsonrpc":"2.0","id":3,"method":"m","params":[1,2]}`, Envelope{Kind: KindRequest, ID: "n3", Method: "m"}, ""},
		{`{"jsonrpc":"2.0","id":3,"method":"m","params":{"_meta":[]}}`, Envelope{Kind: KindRequest, ID: "n3", Method: "m"}, ""},
		{`{"jsonrpc":`, Envelope{}, "parse"},
		{``, Envelope{}, "parse"},
		{`[1]`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"1.0","id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":null,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":{},"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":true,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":""}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","result":{}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","result":{}}`, Envelope{}, "invalid"},

		// Member names are case-sensitive.
		{`{"JSONRPC":"2.0","id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","Method":"x","id":1}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_Meta":{"progressToken":1},"ProgressToken":2}}`,
			Envelope{}, "invalid"}, // see below

		// An envelope member in another case, or given twice, is refused:
		// servers that decode names case-insensitively
		// or keep the first duplicate would read another message.
		{`{"jsonrpc":"2.0","ID":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":5,"ID":6,"method":"tools/call"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"initialize"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"result":{},"Error":{}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","PARAMS":{}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","Jsonrpc":"1.0"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","\u0049d":2}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","param\u017f":{}}`, Envelope{}, "invalid"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"j\u017fonrpc\":1}", Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"\u0069d":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":[],"params":{}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"result":{},"result":{}}`, Envelope{}, "invalid"},
		// Names that fold to no envelope member, and members of params, are other names.
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"\u0131d\":1,\"ids\":1,\"i\":1,\"Meta\":1,\"_meta\":1,\"_meta\":2}",
			Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"ID":1,"id":2,"id":3,"Method":"b"}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}`,
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"b","method":null,"result":1}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":{},"id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"id":null,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","jsonrpc":null,"id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":1,"jsonrpc":"2.0","id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":1}},"params":{}}`,
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":1}},"params":[]}`,
			Envelope{}, "invalid"},

		// A member of params the bridge reads, given twice or in another
		// case, is refused too: the guards would check
		// one value and the server act on another.
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":1},"_meta":{"progressToken":2}}}`,
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":1},"_meta":null}}`,
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":1,"progressToken":"x"}}}`,
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":"r"}}`,
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","Name":"admin_delete"}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","name":"admin_delete"}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"NAME":"admin_delete"}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"n\u0041me":"admin_delete","name":"echo"}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///a","URI":"file:///etc/shadow"}}`, Envelope{}, "invalid"},
		{"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"resources/read\",\"params\":{\"uri\":\"a\",\"ur\u0131\":\"b\"}}", // dotless i folds to no ASCII letter
			Envelope{Kind: KindRequest, ID: "n4", Method: "resources/read"}, ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"\u212Aey\":1,\"argument\u017f\":{}}}", // Kelvin K, long s
			Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","Arguments":{},"arguments":{}}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","_META":{}}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":1,"ProgressToken":2}}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"a","NAME":"b"}}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","Type":"ref/resource"}}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":[],"resourcesubscriptions":["x"]}}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"requestState":"a","RequestState":"b"}}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"a","ProtocolVersion":"b"}}`, Envelope{}, "invalid"},
		// Members the bridge does not read, nested or not, are the server's.
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"name":1,"Name":2,"name":3},"x":1,"X":2,"_meta":{"a":1,"A":2,"a":3}}}`,
			Envelope{Kind: KindRequest, ID: "n4", Method: "tools/call"}, ""},
		// A response's params are not read.
		{`{"jsonrpc":"2.0","id":4,"result":{},"params":{"name":1,"Name":2}}`, Envelope{Kind: KindResponse, ID: "n4"}, ""},

		// Escaped names and strings are compared unescaped.
		{`{"\u006asonrpc":"2\u002e0","\u0069d":1,"\u006dethod":"\u0074ools/call"}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "tools/call"}, ""},
		{`{"jsonrpc":"2.0","id":"a\/b\n\u00e9\ud83d\ude00","method":"a\/b"}`,
			Envelope{Kind: KindRequest, ID: "sa/b\n\u00e9\U0001F600", Method: "a/b"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"\u005fmeta":{"progress\u0054oken":"t"}}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "a", ProgressToken: "st"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","met\"hod":5,"\u006Dethod\u0000":5,"m\u00e9thod":5}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","\u0070\u0061\u0072\u0061\u006d\u0073\u0000":{"_meta":{"progressToken":1}}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"a\xffb\u00e9\"}",
			Envelope{Kind: KindRequest, ID: "s\uFFFD", Method: "a\uFFFDb\u00e9"}, ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\x7fb\"}", Envelope{Kind: KindRequest, ID: "n1", Method: "a\x7fb"}, ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"\xffmethod\":5}", Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},

		// Trailing garbage, white space.
		{`{} x`, Envelope{}, "parse"},
		{`{}{}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a"},`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a"}}`, Envelope{}, "parse"},
		{"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}", Envelope{}, "parse"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\x00", Envelope{}, "parse"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\v", Envelope{}, "parse"},
		{" \t\r\n{ \"jsonrpc\" :\t\"2.0\"\r, \"id\"\n:\n1 ,\"method\" : \"a\" , \"params\" : { \"_meta\" : { \"progressToken\" : 5 } , \"x\" : [ 1 , { } , [ ] ] } } \t\r\n",
			Envelope{Kind: KindRequest, ID: "n1", Method: "a", ProgressToken: "n5"}, ""},

		// Strings: control characters and escapes.
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\tb\"}", Envelope{}, "parse"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\x00b\"}", Envelope{}, "parse"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"x\":\"\x1f\"}", Envelope{}, "parse"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"x\n\":1}", Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\x"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\'"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\0"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\ "}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\U0041"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\u004"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a\u00g1"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":"\`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":"abc`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":"\u12`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"\uABcd\"\\\/\b\f\n\r\t"}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "\uabcd\"\\/\b\f\n\r\t"}, ""},

		// Numbers.
		{`{"jsonrpc":"2.0","id":-0,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n0", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":-0.0,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n-0", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1e5,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n100000", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1E+2,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n100", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":0.1,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n0.1", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":-12,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n-12", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1023,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n1023", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1024,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n1024", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":999999999999999999,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n999999999999999999", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":9223372036854775807,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n9223372036854775807", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":-9223372036854775808,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n-9223372036854775808", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":9223372036854775808,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n9.223372036854776e+18", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1e-400,"method":"a"}`, Envelope{Kind: KindRequest, ID: "n0", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1e400,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":01,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1.,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":-,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":.5,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":+1,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1e,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1e+,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":0x1,"method":"a"}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a"`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":[1`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":{"a":1`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":{"a"`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":"`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":-`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","params":{"_meta":{"progressToken":[`, Envelope{}, "parse"},
		{`-`, Envelope{}, "parse"},
		{`0`, Envelope{}, "invalid"},

		// Literals and other top-level values.
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":tru}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":nul}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":nulll}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":True}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":[1,]}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":{"a":1,}}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":{"a"}}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":{1:1}}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","x":[1}`, Envelope{}, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"a",}`, Envelope{}, "parse"},
		{`{,}`, Envelope{}, "parse"},
		{`true`, Envelope{}, "invalid"},
		{`null`, Envelope{}, "invalid"},
		{`"x"`, Envelope{}, "invalid"},
		{` [ ] `, Envelope{}, "invalid"},
		{`{}`, Envelope{}, "invalid"},

		// The rest of the rules.
		{`{"jsonrpc":"2.0","id":true,"result":1}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":[1],"error":1}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"result":null}`, Envelope{Kind: KindResponse, ID: "n1"}, ""},
		{`{"jsonrpc":"2.0","id":1,"result":null,"error":null}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":null,"result":1}`, Envelope{Kind: KindResponse, ID: "n1"}, ""},
		{`{"jsonrpc":"2.0","method":null}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","error":null}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0 ","id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":2.0,"id":1,"method":"a"}`, Envelope{}, "invalid"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":{}}}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "tools/call"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":1e400}}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "tools/call"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":null}}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "tools/call"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":{"progressToken":1},"progressToken":2}}`,
			Envelope{Kind: KindNotification, Method: "notifications/progress", ProgressToken: "n2"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"notifications/progress","params":{"progressToken":2}}`,
			Envelope{Kind: KindRequest, ID: "n1", Method: "notifications/progress", ProgressToken: "n2"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"_meta":{"progressToken":1},"progressToken":2,"requestId":3}}`,
			Envelope{Kind: KindNotification, Method: "notifications/message"}, ""},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":true}}`,
			Envelope{Kind: KindNotification, Method: "notifications/cancelled"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":"x"}`, Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":null}`, Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},

		// Params nested deep, with the interesting names at every level.
		{`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"a":[{"_meta":{"progressToken":"no"}},[[{"progressToken":0}]],{}],` +
			`"b":{"progressToken":"no","_meta":{"progressToken":"no"}},"_meta":{"x":{"progressToken":"no"},"y":[{"progressToken":1}],"progressToken":"yes","z":{}}},` +
			`"result_":{"result":1,"error":2},"x":{"method":"no","id":2}}`,
			Envelope{Kind: KindRequest, ID: "n9", Method: "tools/call", ProgressToken: "syes"}, ""},

		// Depth: encoding/json allows 10000 nested arrays and objects.
		{strings.Repeat("[", 10000) + strings.Repeat("]", 10000), Envelope{}, "invalid"},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), Envelope{}, "parse"},
		{nested(10000), Envelope{Kind: KindRequest, ID: "n1", Method: "a"}, ""},
		{nested(10001), Envelope{}, "parse"},
		{nested(10000)[:len(nested(10000))-1], Envelope{}, "parse"},
	}
	for _, tc := range tests {
		in := []byte(tc.in)
		got, err := Parse(in[:len(in):len(in)]) // no spare capacity to read past the end into
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("Parse(%.200s): %v", tc.in, err)
		case tc.err == "" && routing(got) != tc.want:
			t.Errorf("Parse(%.200s) = %+v, want %+v", tc.in, got, tc.want)
		case tc.err != "" && err == nil:
			t.Errorf("Parse(%.200s) = %+v, want an error", tc.in, got)
		case tc.err != "" && !errors.Is(err, ErrInvalidMessage):
			t.Errorf("Parse(%.200s): error %v does not wrap ErrInvalidMessage", tc.in, err)
		case tc.err != "" && (tc.err == "parse") != IsParseError(err):
			t.Errorf("Parse(%.200s): IsParseError = %v for %v", tc.in, IsParseError(err), err)
		}
		// The reference of FuzzParse must agree, or it checks nothing.
		if want, verdict := referenceParse([]byte(tc.in)); verdict != tc.err || want != tc.want {
			t.Errorf("referenceParse(%.200s) = %+v, %q; want %+v, %q", tc.in, want, verdict, tc.want, tc.err)
		}
	}
}

// nested is a request whose params hold arrays and objects nested so that,
// with the message and params objects, depth containers are open at once.
func nested(depth int) string {
	n := depth - 2
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":`)
	for i := range n {
		if i%2 == 0 {
			b.WriteString(`[`)
		} else {
			b.WriteString(`{"progressToken":`)
		}
	}
	b.WriteString(`1`)
	for i := n - 1; i >= 0; i-- {
		if i%2 == 0 {
			b.WriteString(`]`)
		} else {
			b.WriteString(`}`)
		}
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestSplitBatch(t *testing.T) {
	if _, ok, err := SplitBatch([]byte(` {"a":1}`)); ok || err != nil {
		t.Fatal("an object is not a batch")
	}
	if _, ok, err := SplitBatch([]byte(` {"a":`)); ok || err != nil {
		t.Fatal("broken JSON that is not an array is not a batch")
	}
	data := []byte(" [{\"a\":1}, {\"b\":2}]")
	msgs, ok, err := SplitBatch(data)
	if !ok || err != nil || len(msgs) != 2 || string(msgs[0]) != `{"a":1}` || string(msgs[1]) != `{"b":2}` {
		t.Fatalf("SplitBatch = %q %v %v", msgs, ok, err)
	}
	if cap(msgs[0]) != len(msgs[0]) {
		t.Fatal("an element must be capped, so that appending to it cannot overwrite the next")
	}
	data[4] = 'A'
	if string(msgs[0]) != `{"A":1}` {
		t.Fatal("the elements must be sub-slices of the input, not copies")
	}
	msgs, ok, err = SplitBatch([]byte("\t[ 1 ,\"x\",null, [ ] ,{}]\r\n"))
	if !ok || err != nil || len(msgs) != 5 || string(msgs[1]) != `"x"` || string(msgs[2]) != "null" || string(msgs[3]) != "[ ]" {
		t.Fatalf("SplitBatch = %q %v %v", msgs, ok, err)
	}
	for _, in := range []string{`[]`, ` [ ] `} {
		if _, ok, err := SplitBatch([]byte(in)); !ok || err == nil || IsParseError(err) || !errors.Is(err, ErrInvalidMessage) {
			t.Fatalf("SplitBatch(%s): an empty batch must be refused as invalid, got %v", in, err)
		}
	}
	for _, in := range []string{`[{`, `[] x`, `[]]`, `[{}] x`, `[{},]`, `[,{}]`, `[{}{}]`, `[{} {}]`, `[`, `[1`, `[1,`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001)} {
		if _, ok, err := SplitBatch([]byte(in)); !ok || !IsParseError(err) {
			t.Errorf("SplitBatch(%.40s): %v %v, want a parse error", in, ok, err)
		}
	}
	if msgs, ok, err := SplitBatch([]byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000))); !ok || err != nil || len(msgs) != 1 {
		t.Fatalf("SplitBatch at the depth limit: %v %v", ok, err)
	}
}

func TestRawID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":"x\u0041","method":"a"}`, `"x\u0041"`},
		{`{"id" : 1.5e3 }`, `1.5e3`},
		{`{"id":null,"error":{}}`, ``},
		{`{"id":{"a":[1]}}`, ``},
		{`{"id":1,"id":2}`, ``},
		{`{"id":1,"ID":2}`, ``},
		{`{"id":true}`, ``},
		{`{"id":null}`, ``},
		{`{"id":-1234567890123456789012345678901}`, `-1234567890123456789012345678901`},
		{`{"id":123456789012345678901234567890123}`, ``},
		{`{"id":"` + strings.Repeat("9", 100000) + `"}`, `"` + strings.Repeat("9", 100000) + `"`},
		{`{"id":` + strings.Repeat("9", 100000) + `}`, ``},
		{"{\"id\":\"a\xffb\"}", ``},
		{`{"id":"\ud800"}`, `"\ud800"`},
		{`{"params":{"id":1},"x":[{"id":2}]}`, ``},
		{`{"ID":1}`, ``},
		{`{"\u0069d":3}`, `3`},
		{`{"id":1} x`, ``},
		{`{"id":1,`, ``},
		{`[{"id":1}]`, ``},
		{``, ``},
	} {
		data := []byte(tc.in)
		got := RawID(data)
		if string(got) != tc.want || (got == nil) != (tc.want == "") {
			t.Errorf("RawID(%s) = %q, want %q", tc.in, got, tc.want)
		}
		if len(got) > 0 {
			for i := range data {
				data[i] = 'x'
			}
			if string(got) != tc.want {
				t.Errorf("RawID(%s) must be a copy: the caller may reuse its buffer", tc.in)
			}
		}
	}
}

// TestCanonicalNumbers checks the shortcuts of canonicalNumber (small ids
// shared, integers taken as written) against strconv, which defines it.
func TestCanonicalNumbers(t *testing.T) {
	var nums []string
	for i := range 1100 {
		nums = append(nums, strconv.Itoa(i), strconv.Itoa(-i))
	}
	nums = append(nums, "123456789012345678", "-12345678901234567", "1234567890123456789", "-1234567890123456789",
		"99999999999999999999", "0.5", "1.0", "-1.5e-7", "1e21", "123456789e-3", "1E0", "5e-324", "1.7976931348623157e308")
	for _, n := range nums {
		want := "n"
		if i, err := strconv.ParseInt(n, 10, 64); err == nil {
			want += strconv.FormatInt(i, 10)
		} else {
			f, _ := strconv.ParseFloat(n, 64)
			want += strconv.FormatFloat(f, 'g', -1, 64)
		}
		if got, err := canonicalID([]byte(n)); err != nil || string(got) != want {
			t.Errorf("canonicalID(%s) = %q, %v; want %q", n, got, err, want)
		}
	}
}

// mcpMethods are the methods methodName shares the strings of.
var mcpMethods = []string{
	"initialize", "ping", "tools/list", "tools/call", "resources/list", "resources/templates/list",
	"resources/read", "resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get",
	"completion/complete", "logging/setLevel", "sampling/createMessage", "elicitation/create", "roots/list",
	"notifications/initialized", "notifications/progress", "notifications/cancelled", "notifications/message",
	"notifications/resources/updated", "notifications/resources/list_changed", "notifications/tools/list_changed",
	"notifications/prompts/list_changed", "notifications/roots/list_changed",
}

func TestMethodName(t *testing.T) {
	for _, m := range append(mcpMethods, "x", "tools/cal", "tools/calls", "Tools/call") {
		raw := strconv.AppendQuote(nil, m)
		if got := methodName(raw); got != m {
			t.Errorf("methodName(%s) = %q", raw, got)
		}
	}
	for _, m := range mcpMethods {
		raw := strconv.AppendQuote(nil, m)
		if n := testing.AllocsPerRun(10, func() { _ = methodName(raw) }); n != 0 {
			t.Errorf("methodName(%s) allocates %v times; it is one of MCP's", raw, n)
		}
	}
}

// TestParseAllocs holds Parse to its promise for the usual messages: the
// Envelope of a request, response or notification with a small numeric id
// and an MCP method costs no allocation.
func TestParseAllocs(t *testing.T) {
	for _, bm := range benchMessages {
		if n := testing.AllocsPerRun(10, func() { _, _ = Parse(bm.data) }); n != 0 {
			t.Errorf("Parse(%s) allocates %v times", bm.name, n)
		}
	}
}

func TestErrorResponse(t *testing.T) {
	var got struct {
		JSONRPC string
		ID      json.RawMessage
		Error   struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal(ErrorResponse([]byte(`"q"`), -32000, "m <&>", nil), &got); err != nil {
		t.Fatal(err)
	}
	if got.JSONRPC != "2.0" || string(got.ID) != `"q"` || got.Error.Code != -32000 || got.Error.Message != "m <&>" {
		t.Fatalf("%+v", got)
	}
	if err := json.Unmarshal(ErrorResponse(nil, 1, "x", nil), &got); err != nil || string(got.ID) != "null" {
		t.Fatalf("nil id: %s %v", got.ID, err)
	}
	env, err := Parse(ErrorResponse([]byte(`7`), 1, "x", map[string]int{"a": 1}))
	if err != nil || env.Kind != KindResponse || env.ID != "n7" || !env.IsError {
		t.Fatalf("an error response must parse back: %+v %v", env, err)
	}
}

// referenceParse is Parse written plainly with encoding/json, for FuzzParse
// to hold the scanner to: the verdict is "parse" for input that is not
// JSON, "invalid" for JSON that is not a message, "" for a message.
func referenceParse(data []byte) (env Envelope, verdict string) {
	return referenceParseMeta(data, nil)
}

// referenceParseMeta is referenceParse for ParseMeta of metaNames: their
// members of _meta are guarded too.
func referenceParseMeta(data []byte, metaNames []string) (env Envelope, verdict string) {
	if !json.Valid(data) {
		return Envelope{}, "parse"
	}
	var m map[string]json.RawMessage // case-sensitive, last duplicate wins
	if err := json.Unmarshal(data, &m); err != nil || m == nil || referenceAmbiguous(data) {
		return Envelope{}, "invalid"
	}
	var jsonrpc string
	if raw, ok := m["jsonrpc"]; !ok || raw[0] != '"' || json.Unmarshal(raw, &jsonrpc) != nil || jsonrpc != "2.0" {
		return Envelope{}, "invalid"
	}
	rawID, hasID := m["id"]
	if hasID {
		id, ok := referenceID(rawID)
		if !ok {
			return Envelope{}, "invalid"
		}
		env.ID = id
	}
	rawMethod, hasMethod := m["method"]
	hasMethod = hasMethod && string(rawMethod) != "null"
	_, hasResult := m["result"]
	_, hasError := m["error"]
	switch {
	case hasMethod:
		if rawMethod[0] != '"' || hasResult || hasError {
			return Envelope{}, "invalid"
		}
		if err := json.Unmarshal(rawMethod, &env.Method); err != nil || env.Method == "" {
			return Envelope{}, "invalid"
		}
		env.Kind = KindRequest
		if !hasID {
			env.Kind = KindNotification
		} else if env.ID == "" {
			return Envelope{}, "invalid"
		}
		if referenceParamsAmbiguous(m["params"], metaNames) {
			return Envelope{}, "invalid"
		}
		params := referenceObject(m["params"])
		meta := referenceObject(params["_meta"])
		if raw, ok := meta["progressToken"]; ok && env.Kind == KindRequest {
			env.ProgressToken, _ = referenceID(raw)
		} else if raw, ok := params["progressToken"]; ok && env.Method == "notifications/progress" {
			env.ProgressToken, _ = referenceID(raw)
		} else if raw, ok := params["requestId"]; ok && env.Method == "notifications/cancelled" {
			env.RequestID, _ = referenceID(raw)
		}
	case hasResult || hasError:
		if (hasResult && hasError) || !hasID {
			return Envelope{}, "invalid"
		}
		env.Kind = KindResponse
		env.IsError = hasError
	default:
		return Envelope{}, "invalid"
	}
	return env, ""
}

// routing is e without its Spans, which checkSpans checks.
func routing(e Envelope) Envelope {
	e.IDAt, e.ProgressTokenAt, e.RequestIDAt, e.NameAt, e.MetaAt, e.ArgumentsAt, e.ResultAt = Span{}, Span{}, Span{}, Span{}, Span{}, Span{}, Span{}
	return e
}

// checkSpans holds the Spans of env, parsed from data, to encoding/json:
// each locates the member's value as written, exactly when the rules of
// Envelope say it is set.
func checkSpans(t *testing.T, data []byte, env Envelope) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	params := referenceObject(m["params"])
	meta := referenceObject(params["_meta"])
	want := map[string]json.RawMessage{}
	if raw, ok := m["id"]; ok {
		want["id"] = raw // null too
	}
	switch {
	case env.ProgressToken != "" && env.Kind == KindRequest:
		want["progressToken"] = meta["progressToken"]
	case env.ProgressToken != "":
		want["progressToken"] = params["progressToken"]
	}
	if env.RequestID != "" {
		want["requestId"] = params["requestId"]
	}
	if raw := params["name"]; env.Kind != KindResponse && len(raw) > 0 && raw[0] == '"' {
		want["name"] = raw
	}
	if raw := params["_meta"]; env.Kind != KindResponse && len(raw) > 0 && raw[0] == '{' {
		want["_meta"] = raw
	}
	if raw, ok := params["arguments"]; ok && env.Kind != KindResponse {
		want["arguments"] = raw // null too
	}
	if raw, ok := m["result"]; ok && env.Kind == KindResponse {
		want["result"] = raw // null too
	}
	for _, c := range []struct {
		name string
		at   Span
	}{{"id", env.IDAt}, {"progressToken", env.ProgressTokenAt}, {"requestId", env.RequestIDAt}, {"name", env.NameAt}, {"_meta", env.MetaAt}, {"arguments", env.ArgumentsAt}, {"result", env.ResultAt}} {
		got, ok := c.at.In(data), !c.at.IsZero()
		w, wok := want[c.name]
		if ok != wok || !bytes.Equal(got, w) {
			t.Fatalf("%q: %s at %v = %q, want %q (present: %v)", data, c.name, c.at, got, w, wok)
		}
	}
	if name, ok := StringValue(want["name"]); env.Name(data) != name || ok != !env.NameAt.IsZero() {
		t.Fatalf("%q: Name = %q, want %q", data, env.Name(data), name)
	}
	// Lookup agrees with encoding/json on every member of the message.
	for k, v := range m {
		if got, ok := Lookup(data, k); !ok || !bytes.Equal(got, v) {
			t.Fatalf("Lookup(%q, %q) = %q, %v; want %q", data, k, got, ok, v)
		}
	}
}

// envelopeNames are the members of a message whose names must be given
// exactly once, and in their own case.
var envelopeNames = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// referenceAmbiguous reports whether the JSON object data gives an
// envelope member twice, or under a name equal to one under
// strings.EqualFold (the folding encoding/json matches names with) but not
// equal.
func referenceAmbiguous(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			panic(err) // it was checked as valid
		}
		key := tok.(string)
		for _, n := range envelopeNames {
			switch {
			case key == n && seen[n]:
				return true
			case key == n:
				seen[n] = true
			case strings.EqualFold(key, n):
				return true
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			panic(err)
		}
	}
	return false
}

// guardedParams are the members of params whose names must be given
// exactly once, and in their own case, and the members
// of those that must too.
var guardedParams = map[string][]string{
	"_meta": {"progressToken"}, "progressToken": nil, "requestId": nil, "name": nil, "arguments": nil,
	"uri": nil, "ref": {"type", "name", "uri"}, "cursor": nil, "requestState": nil, "inputResponses": nil,
	"notifications": {"resourceSubscriptions"}, "protocolVersion": nil,
}

// referenceParamsAmbiguous reports whether params (a JSON object, or
// anything else, which has no members) gives a member of guardedParams,
// or of its nested objects, twice or in another case; metaNames that are
// ASCII are guarded in _meta too.
func referenceParamsAmbiguous(params json.RawMessage, metaNames []string) bool {
	names := make([]string, 0, len(guardedParams))
	for n := range guardedParams {
		names = append(names, n)
	}
	ambiguous, nested := referenceMembersAmbiguous(params, names)
	if ambiguous {
		return true
	}
	for n, raw := range nested {
		inner := guardedParams[n]
		if n == "_meta" {
			for _, mn := range metaNames {
				if isASCII([]byte(mn)) && !slices.Contains(inner, mn) {
					inner = append(inner[:len(inner):len(inner)], mn)
				}
			}
		}
		if a, _ := referenceMembersAmbiguous(raw, inner); a {
			return true
		}
	}
	return false
}

// referenceMembersAmbiguous reports whether the JSON value raw is an
// object that gives one of names twice, or under a name equal to one under
// strings.EqualFold but not equal; and returns the values of names.
func referenceMembersAmbiguous(raw json.RawMessage, names []string) (bool, map[string]json.RawMessage) {
	if len(raw) == 0 || raw[0] != '{' {
		return false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.Token()
	seen := map[string]bool{}
	values := map[string]json.RawMessage{}
	ambiguous := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			panic(err)
		}
		key := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		for _, n := range names {
			switch {
			case key == n && seen[n]:
				ambiguous = true
			case key == n:
				seen[n] = true
				values[n] = v
			case strings.EqualFold(key, n):
				ambiguous = true
			}
		}
	}
	return ambiguous, values
}

// referenceObject decodes raw if it is an object, else returns nil.
func referenceObject(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &m); err != nil {
			panic(err) // it was checked as part of a valid whole
		}
	}
	return m
}

// referenceID is canonicalID with encoding/json.
func referenceID(raw json.RawMessage) (ID, bool) {
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			panic(err)
		}
		return ID("s" + s), true
	case 'n':
		return "", true
	case '{', '[', 't', 'f':
		return "", false
	}
	n := json.Number(raw)
	if i, err := n.Int64(); err == nil {
		return ID("n" + strconv.FormatInt(i, 10)), true
	}
	f, err := n.Float64()
	if err != nil {
		return "", false
	}
	return ID("n" + strconv.FormatFloat(f, 'g', -1, 64)), true
}

// FuzzParse holds Parse, RawID and SplitBatch to references written with
// encoding/json: the same verdict (parse error, invalid message, message),
// the same Envelope, the same id and batch elements. None of them may
// panic, modify their input, or keep it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e3}}`,
		`{"jsonrpc":"2.0","id":"x","result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a"}]`,
		`{"jsonrpc":"2.0","id":-0.5e-3,"method":"a","params":{"_meta":{"progressToken":-1}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,true,null,{"b":"\u00e9\n"}]},"_meta":{"progressToken":"p"}}}`,
		`{"\u006asonrpc":"2\u002e0","id":"\ud83d\ude00","method":"a\/b","params":{"_meta":null,"\u005fmeta":{"progressToken":1E2}}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":5,"method":"x","params":[],"params":{"progressToken":3}}`,
		`{"JSONRPC":"2.0","Id":1,"Method":"a"}`,
		`{"params":{"_meta":{"progressToken":"tok"},"name":"n"},"method":"tools/call","id":"late","jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1,"\u0061":2,"é":3},"_meta":{"io.modelcontextprotocol/protocolVersion":"v"}}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"_meta\":{\"\xff\":1,\"progressToken\":2,\"\\u00e9\":3}}}",
		" \t\r\n{ \"jsonrpc\" : \"2.0\" , \"id\" : 1 , \"result\" : null } \n",
		"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"\xc3\"}",
		`{"jsonrpc":"2.0","id":01,"method":"a"}`,
		`{"jsonrpc":"2.0","id":[1`,
		`{"jsonrpc":"2.0","id":9223372036854775808,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1e400,"result":1}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","Name":"admin_delete","arguments":{"Name":1}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"a","\u0055RI":"b","_meta":{"A":1,"progre\u017fsToken":2}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"a","nAme":"b"},"Ref":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":[]}}}`,
		`{} {}`,
		`[[[[[[]]]]]]`,
		`[1, "2", [], {}]`,
		`[]`,
		nested(40),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = data[:len(data):len(data)] // no spare capacity to read past the end into
		orig := bytes.Clone(data)
		env, err := Parse(data)
		want, verdict := referenceParse(orig)
		switch {
		case err == nil && verdict != "":
			t.Fatalf("Parse(%q) = %+v, want a %s error", orig, env, verdict)
		case err != nil && !errors.Is(err, ErrInvalidMessage):
			t.Fatalf("Parse(%q): error %v does not wrap ErrInvalidMessage", orig, err)
		case err != nil && verdict == "":
			t.Fatalf("Parse(%q): %v, want %+v", orig, err, want)
		case err != nil && IsParseError(err) != (verdict == "parse"):
			t.Fatalf("Parse(%q): %v, want a %s error", orig, err, verdict)
		case routing(env) != want:
			t.Fatalf("Parse(%q) = %+v, want %+v", orig, env, want)
		case err == nil:
			checkSpans(t, orig, env)
		}

		// ParseMeta: Parse, and LookupEach of its MetaAt.
		metaNames := []string{"progressToken", "io.modelcontextprotocol/protocolVersion", "a", "\ufffd", "é"}
		got := make([][]byte, len(metaNames))
		for i := range got {
			got[i] = []byte("stale")
		}
		env2, err2 := ParseMeta(data, metaNames, got)
		want2, verdict2 := referenceParseMeta(orig, metaNames)
		switch {
		case (err2 == nil) != (verdict2 == ""):
			t.Fatalf("ParseMeta(%q) = %+v, %v; want a verdict of %q", orig, env2, err2, verdict2)
		case routing(env2) != want2:
			t.Fatalf("ParseMeta(%q) = %+v, want %+v", orig, env2, want2)
		case err2 == nil && env2 != env:
			t.Fatalf("ParseMeta(%q) = %+v; Parse = %+v", orig, env2, env)
		}
		wantMeta := make([][]byte, len(metaNames))
		if err2 == nil {
			LookupEach(env.MetaAt.In(orig), metaNames, wantMeta)
		}
		for i := range metaNames {
			if !bytes.Equal(got[i], wantMeta[i]) || (got[i] == nil) != (wantMeta[i] == nil) {
				t.Fatalf("ParseMeta(%q): %q = %q, LookupEach of MetaAt = %q", orig, metaNames[i], got[i], wantMeta[i])
			}
		}

		// RawID: the id of a JSON object, copied.
		var wantID json.RawMessage
		var m map[string]json.RawMessage
		if json.Valid(orig) && json.Unmarshal(orig, &m) == nil && !referenceAmbiguous(orig) {
			// Only an id that can be echoed: a string of valid UTF-8 or a
			// number of bounded length.
			switch id := m["id"]; {
			case len(id) == 0:
			case id[0] == '"' && utf8.Valid(id):
				wantID = id
			case (id[0] == '-' || '0' <= id[0] && id[0] <= '9') && len(id) <= MaxEchoedNumberIDBytes:
				wantID = id
			}
		}
		if got := RawID(data); !bytes.Equal(got, wantID) || (got == nil) != (wantID == nil) {
			t.Fatalf("RawID(%q) = %q, want %q", orig, got, wantID)
		}

		// LookupUnique: Lookup, and whether the name is given twice or in
		// another case, on the message and on its params.
		if json.Valid(orig) {
			objs := []json.RawMessage{orig}
			if m := referenceObject(json.RawMessage(bytes.TrimLeft(orig, " \t\r\n"))); m != nil {
				objs = append(objs, m["params"])
			}
			for _, obj := range objs {
				for _, name := range []string{"name", "id", "uri", "progressToken"} {
					v, ok, amb := LookupUnique(obj, name)
					wantV, wantOK := Lookup(obj, name)
					wantAmb, _ := referenceMembersAmbiguous(obj, []string{name})
					if ok != wantOK || !bytes.Equal(v, wantV) || amb != wantAmb {
						t.Fatalf("LookupUnique(%q, %q) = %q, %v, %v; want %q, %v, %v", obj, name, v, ok, amb, wantV, wantOK, wantAmb)
					}
				}
			}
		}

		// SplitBatch: the elements of an array.
		msgs, ok, berr := SplitBatch(data)
		trimmed := bytes.TrimLeft(orig, " \t\r\n")
		var wantMsgs []json.RawMessage
		switch {
		case ok != (len(trimmed) > 0 && trimmed[0] == '['):
			t.Fatalf("SplitBatch(%q): ok = %v", orig, ok)
		case !ok:
			if msgs != nil || berr != nil {
				t.Fatalf("SplitBatch(%q) = %q, %v for a non-batch", orig, msgs, berr)
			}
		case json.Unmarshal(trimmed, &wantMsgs) != nil:
			if !IsParseError(berr) {
				t.Fatalf("SplitBatch(%q) = %q, %v; want a parse error", orig, msgs, berr)
			}
		case len(wantMsgs) == 0:
			if berr == nil || IsParseError(berr) {
				t.Fatalf("SplitBatch(%q) = %q, %v; want an invalid batch", orig, msgs, berr)
			}
		default:
			if berr != nil || len(msgs) != len(wantMsgs) {
				t.Fatalf("SplitBatch(%q) = %q, %v; want %q", orig, msgs, berr, wantMsgs)
			}
			for i := range msgs {
				if !bytes.Equal(msgs[i], wantMsgs[i]) || cap(msgs[i]) != len(msgs[i]) {
					t.Fatalf("SplitBatch(%q)[%d] = %q, want %q", orig, i, msgs[i], wantMsgs[i])
				}
			}
		}

		if !bytes.Equal(data, orig) {
			t.Fatalf("the input was modified: %q, was %q", data, orig)
		}
		// Nothing of the Envelope may share memory with the input.
		for i := range data {
			data[i] ^= 0xff
		}
		if again, _ := Parse(orig); again != env {
			t.Fatalf("the Envelope changed with its input: %+v, was %+v", env, again)
		}

		// Envelope.Rewrite of the id and the progress token gives what
		// parsing its result gives, and touches nothing else.
		if err == nil && !env.IDAt.IsZero() {
			moved := env
			out := moved.Rewrite(orig, Edit{env.IDAt, []byte(`"rewritten-id"`)}, Edit{env.ProgressTokenAt, []byte(`1234567`)})
			again, perr := Parse(out)
			if perr != nil || again != moved {
				t.Fatalf("Rewrite(%q) = %q: Envelope %+v, parsed %+v (%v)", orig, out, moved, again, perr)
			}
		}

		// The bridge's own error answer to a request's id must parse.
		if rawID := RawID(orig); err == nil && env.Kind == KindRequest && rawID != nil {
			answer := ErrorResponse(rawID, CodeServerError, "x", nil)
			if !utf8.Valid(answer) {
				t.Fatalf("error response for id %q is not valid UTF-8", rawID)
			}
			back, err := Parse(answer)
			if err != nil || back.ID != env.ID {
				t.Fatalf("error response for id %q parses as %+v, %v", env.ID, back, err)
			}
		}
	})
}

package session

import (
	"encoding/json"
	"errors"
	"testing"
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
	}
	for _, tc := range tests {
		got, err := Parse([]byte(tc.in))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("Parse(%s): %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("Parse(%s) = %+v, want %+v", tc.in, got, tc.want)
		case tc.err != "" && err == nil:
			t.Errorf("Parse(%s) = %+v, want an error", tc.in, got)
		case tc.err != "" && !errors.Is(err, ErrInvalidMessage):
			t.Errorf("Parse(%s): error %v does not wrap ErrInvalidMessage", tc.in, err)
		case tc.err != "" && (tc.err == "parse") != IsParseError(err):
			t.Errorf("Parse(%s): IsParseError = %v for %v", tc.in, IsParseError(err), err)
		}
	}
}

func TestSplitBatch(t *testing.T) {
	if _, ok, err := SplitBatch([]byte(` {"a":1}`)); ok || err != nil {
		t.Fatal("an object is not a batch")
	}
	msgs, ok, err := SplitBatch([]byte(" [{\"a\":1}, {\"b\":2}]"))
	if !ok || err != nil || len(msgs) != 2 || string(msgs[1]) != `{"b":2}` {
		t.Fatalf("SplitBatch = %q %v %v", msgs, ok, err)
	}
	if _, ok, err := SplitBatch([]byte(`[]`)); !ok || err == nil {
		t.Fatal("an empty batch must be refused")
	}
	if _, ok, err := SplitBatch([]byte(`[{`)); !ok || !IsParseError(err) {
		t.Fatalf("a broken batch: %v %v", ok, err)
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

// FuzzParse: Parse never panics, accepts only valid JSON objects, and what
// it accepts is consistent: a request has an ID and a method, a response an
// ID or null, and the same bytes always give the same envelope.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e3}}`,
		`{"jsonrpc":"2.0","id":"x","result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a"}]`,
		`{"jsonrpc":"2.0","id":-0.5e-3,"method":"a","params":{"_meta":{"progressToken":-1}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := Parse(data)
		again, err2 := Parse(data)
		if env != again || (err == nil) != (err2 == nil) {
			t.Fatalf("Parse is not deterministic")
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("error %v does not wrap ErrInvalidMessage", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		switch env.Kind {
		case KindRequest:
			if env.ID == "" || env.Method == "" {
				t.Fatalf("request without id or method: %+v", env)
			}
		case KindNotification:
			if env.ID != "" || env.Method == "" {
				t.Fatalf("bad notification: %+v", env)
			}
		case KindResponse:
			if env.Method != "" {
				t.Fatalf("response with a method: %+v", env)
			}
		default:
			t.Fatalf("no kind: %+v", env)
		}
		// The bridge's own error answer to this id must itself parse.
		if env.Kind == KindRequest {
			back, err := Parse(ErrorResponse(RawID(data), CodeServerError, "x", nil))
			if err != nil || back.ID != env.ID {
				t.Fatalf("error response for id %q parses as %+v, %v", env.ID, back, err)
			}
		}
		_, _, _ = SplitBatch(data)
	})
}

package bridge

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// Mcp-Param-{Name} headers against the body, case by case of the spec's
// table (basic/transports/streamable-http, Server Behavior for Custom
// Headers) and its Value Encoding.
func TestCheckParamHeaders(t *testing.T) {
	annotated := []pool.ParamHeader{
		{Path: []string{"region"}, Name: "Region"},
		{Path: []string{"limits", "count"}, Name: "Count"},
		{Path: []string{"dry"}, Name: "Dry-Run"},
	}
	body := func(args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"q","arguments":` + args + `}}`)
	}
	for _, tc := range []struct {
		name    string
		args    string
		headers map[string][]string
		want    string // "" when valid, else a part of the message
	}{
		{"plain values", `{"region":"us-west1","limits":{"count":42},"dry":true}`,
			map[string][]string{"Mcp-Param-Region": {"us-west1"}, "Mcp-Param-Count": {"42"}, "Mcp-Param-Dry-Run": {"true"}}, ""},
		{"integer compared numerically", `{"limits":{"count":42}}`, map[string][]string{"Mcp-Param-Count": {"42.0"}}, ""},
		{"base64 of non-ASCII", `{"region":"Hello, 世界"}`, map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8sIOS4lueVjA==?="}}, ""},
		{"base64 of padding", `{"region":" padded "}`, map[string][]string{"Mcp-Param-Region": {"=?base64?IHBhZGRlZCA=?="}}, ""},
		{"base64 of the sentinel", `{"region":"=?base64?literal?="}`, map[string][]string{"Mcp-Param-Region": {"=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="}}, ""},
		{"escaped string in the body", `{"region":"line1\nline2"}`, map[string][]string{"Mcp-Param-Region": {"=?base64?bGluZTEKbGluZTI=?="}}, ""},
		{"absent values, no headers", `{}`, nil, ""},
		{"null value, no header", `{"region":null}`, nil, ""},
		{"no arguments at all", `null`, nil, ""},
		{"unannotated header ignored", `{}`, map[string][]string{"Mcp-Param-Other": {"x"}}, ""},
		{"header name case-insensitive", `{"region":"a"}`, map[string][]string{http.CanonicalHeaderKey("mcp-param-region"): {"a"}}, ""},

		{"value in body, header omitted", `{"region":"us-west1"}`, nil, "exactly one Mcp-Param-Region header is required"},
		{"nested value, header omitted", `{"limits":{"count":1}}`, nil, "params.arguments.limits.count is in the body"},
		{"header for an absent value", `{}`, map[string][]string{"Mcp-Param-Region": {"us-west1"}}, "absent or null"},
		{"header for a null value", `{"region":null}`, map[string][]string{"Mcp-Param-Region": {"x"}}, "absent or null"},
		{"two headers", `{"region":"a"}`, map[string][]string{"Mcp-Param-Region": {"a", "a"}}, "exactly one"},
		{"string mismatch", `{"region":"us-west1"}`, map[string][]string{"Mcp-Param-Region": {"eu-west1"}}, "does not match body value params.arguments.region"},
		{"integer mismatch", `{"limits":{"count":42}}`, map[string][]string{"Mcp-Param-Count": {"43"}}, "does not match"},
		{"integer header not a number", `{"limits":{"count":42}}`, map[string][]string{"Mcp-Param-Count": {"forty-two"}}, "does not match"},
		{"integer beyond the safe range", `{"limits":{"count":9007199254740993}}`, map[string][]string{"Mcp-Param-Count": {"9007199254740993"}}, "does not match"},
		{"number with a fraction", `{"limits":{"count":1.5}}`, map[string][]string{"Mcp-Param-Count": {"1.5"}}, "does not match"},
		{"boolean written otherwise", `{"dry":true}`, map[string][]string{"Mcp-Param-Dry-Run": {"True"}}, "does not match"},
		{"object value", `{"region":{"a":1}}`, map[string][]string{"Mcp-Param-Region": {`{"a":1}`}}, "does not match"},
		{"base64 decodes to another value", `{"region":"a"}`, map[string][]string{"Mcp-Param-Region": {"=?base64?Yg==?="}}, "does not match"},
		{"plain sentinel-looking value", `{"region":"=?base64?YQ==?="}`, map[string][]string{"Mcp-Param-Region": {"=?base64?YQ==?="}}, "does not match"},
		{"invalid base64", `{"region":"a"}`, map[string][]string{"Mcp-Param-Region": {"=?base64?***?="}}, "not valid base64"},
		{"non-ASCII header value", `{"region":"ü"}`, map[string][]string{"Mcp-Param-Region": {"ü"}}, "characters other than visible ASCII"},
		{"control character", `{"region":"a\u0001"}`, map[string][]string{"Mcp-Param-Region": {"a\x01"}}, "characters other than visible ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkParamHeaders(http.Header(tc.headers), body(tc.args), annotated)
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("got %q, want %q in it", got, tc.want)
			}
		})
	}
	if got := checkParamHeaders(http.Header{"Mcp-Param-Region": {"x"}}, body(`{}`), nil); got != "" {
		t.Fatalf("a tool without annotations: %q", got)
	}
}

// Mcp-Name: decoded before the comparison, plain values limited to the
// characters the spec allows.
func TestCheckHeadersName(t *testing.T) {
	for _, tc := range []struct {
		name, header, want string
	}{
		{"q", "q", ""},
		{"世界", "=?base64?5LiW55WM?=", ""},
		{"世界", "世界", "characters other than visible ASCII"},
		{"q", "=?base64?cg==?=", "does not match"},
		{"q", "=?base64?!?=", "not valid base64"},
	} {
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tc.name + `"}}`)
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(hdrMethod, "tools/call")
		r.Header[hdrName] = []string{tc.header}
		env := parseEnvelope(t, body)
		got := checkHeaders(r, body, &env, env.Name(body))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Mcp-Name %q for %q: %q, want %q", tc.header, tc.name, got, tc.want)
		}
	}
}

func parseEnvelope(t *testing.T, body []byte) jsonrpc.Envelope {
	t.Helper()
	env, err := jsonrpc.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// statusOf gives an answer's HTTP status whether or not resultFirst
// spares it the search for "error"; resultFirst says true only for
// answers that lead with their result.
func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		answer      string
		status      int
		resultFirst bool
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"error"}]}}`, http.StatusOK, true},
		{`{"jsonrpc":"2.0","id":"a-1","result":{"error":1}}`, http.StatusOK, true},
		{`{"jsonrpc":"2.0","id":-1.5e3,"result":{}}`, http.StatusOK, true},
		{`{"result":{},"jsonrpc":"2.0","id":1}`, http.StatusOK, true},
		{`{"jsonrpc":"2.0","id":"a\",\"result\":","error":{"code":-32601,"message":"m"}}`, http.StatusNotFound, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"m"}}`, http.StatusNotFound, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"result"}}`, http.StatusBadRequest, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"m"}}`, http.StatusOK, false},
		{`{"id":1,"jsonrpc":"2.0","result":{}}`, http.StatusOK, false},
	} {
		if got := resultFirst([]byte(tc.answer)); got != tc.resultFirst {
			t.Errorf("resultFirst(%s) = %v", tc.answer, got)
		}
		if got := statusOf([]byte(tc.answer)); got != tc.status {
			t.Errorf("statusOf(%s) = %d, want %d", tc.answer, got, tc.status)
		}
	}
}

// A member of the arguments an Mcp-Param header mirrors, given twice or in
// another case, is refused: the header was checked
// against one value and a server decoding names case-insensitively acts on
// another.
func TestAmbiguousParamPath(t *testing.T) {
	annotated := []pool.ParamHeader{
		{Path: []string{"region"}, Name: "Region"},
		{Path: []string{"limits", "count"}, Name: "Count"},
	}
	body := func(args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"q","arguments":` + args + `}}`)
	}
	for _, tc := range []struct {
		args string
		want string // "" when unambiguous, else a part of the message
	}{
		{`{"region":"us","limits":{"count":1},"Other":1,"other":2}`, ""},
		{`{"region":"us","Region":"eu"}`, "params.arguments.region"},
		{`{"region":"us","region":"eu"}`, "params.arguments.region"},
		{`{"REGION":"eu"}`, "params.arguments.region"},
		{`{"limits":{"count":1,"Count":2}}`, "params.arguments.limits.count"},
		{`{"limits":{"count":1},"Limits":{"count":2}}`, "params.arguments.limits"},
		{`null`, ""},
	} {
		got := ambiguousParamPath(body(tc.args), annotated)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: refused: %s", tc.args, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: got %q, want %q in it", tc.args, got, tc.want)
		}
	}
}

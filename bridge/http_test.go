package bridge_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/session"
)

type rpcError struct {
	ID    json.RawMessage `json:"id"`
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeError(t *testing.T, body string) rpcError {
	t.Helper()
	var e rpcError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == 0 {
		t.Fatalf("body is not a JSON-RPC error: %q (%v)", body, err)
	}
	return e
}

// Every bad input gets the status and JSON-RPC error the spec names, and
// starts no server. The POST bound is the sessions' message bound: one
// value, session.Options.MaxMessageBytes, bounds a message either way.
func TestBadInput(t *testing.T) {
	b := startBridge(t, bridgeConfig{session: session.Options{MaxMessageBytes: 16 << 10}, bridge: bridge.Options{AllowedHosts: bridge.LoopbackHosts}})
	sid := rawSession(t, b.URL, "2025-11-25")
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	withSession := func(h map[string]string) map[string]string {
		h["Mcp-Session-Id"] = sid
		return h
	}
	tests := []struct {
		name    string
		method  string
		body    string
		headers map[string]string
		status  int
		code    int    // JSON-RPC error code, 0: no body check
		says    string // part of the message
	}{
		{"accept lacks event-stream", "POST", list, withSession(map[string]string{"Accept": "application/json"}), 406, jsonrpc.CodeInvalidRequest, "Accept"},
		{"accept lacks json", "POST", list, withSession(map[string]string{"Accept": "text/event-stream"}), 406, jsonrpc.CodeInvalidRequest, "Accept"},
		{"content type", "POST", list, withSession(map[string]string{"Content-Type": "text/plain"}), 415, jsonrpc.CodeInvalidRequest, "application/json"},
		{"malformed JSON", "POST", `{"jsonrpc":`, withSession(map[string]string{}), 400, jsonrpc.CodeParseError, "not valid JSON"},
		{"not a message", "POST", `{"jsonrpc":"2.0","id":3}`, withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "method"},
		{"wrong jsonrpc", "POST", `{"jsonrpc":"1.0","id":3,"method":"x"}`, withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "2.0"},
		{"null request id", "POST", `{"jsonrpc":"2.0","id":null,"method":"x"}`, withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "null"},
		{"batch in 2025-11-25", "POST", "[" + list + "]", withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "batches"},
		{"body too large", "POST", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"pad":"` + strings.Repeat("x", 20_000) + `"}}`, withSession(map[string]string{}), 413, jsonrpc.CodeInvalidRequest, "at most 16384"},
		{"missing session", "POST", list, map[string]string{}, 400, jsonrpc.CodeInvalidRequest, "Mcp-Session-Id"},
		{"unknown session", "POST", list, map[string]string{"Mcp-Session-Id": "nope"}, 404, jsonrpc.CodeInvalidRequest, "does not exist"},
		{"unsupported version", "POST", list, withSession(map[string]string{"MCP-Protocol-Version": "1999-01-01"}), 400, jsonrpc.CodeInvalidRequest, "unsupported MCP-Protocol-Version"},
		{"id in two cases", "POST", `{"jsonrpc":"2.0","id":5,"ID":6,"method":"tools/list"}`, withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "another case"},
		{"method in two cases", "POST", `{"jsonrpc":"2.0","id":5,"method":"tools/list","Method":"initialize"}`, withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "another case"},
		{"initialize in a session", "POST", initBody("2025-11-25"), withSession(map[string]string{}), 400, jsonrpc.CodeInvalidRequest, "initialize"},
		{"last-event-id on POST", "POST", list, withSession(map[string]string{"Last-Event-ID": "1_1"}), 400, jsonrpc.CodeInvalidRequest, "GET"},
		{"disallowed origin", "POST", list, withSession(map[string]string{"Origin": "https://evil.example"}), 403, jsonrpc.CodeInvalidRequest, "Origin"},
		{"rebinding host", "POST", list, withSession(map[string]string{"Host": "evil.example"}), 403, jsonrpc.CodeInvalidRequest, "Host"},
		{"other method", "PUT", list, withSession(map[string]string{}), 405, 0, ""},
		{"GET without event-stream", "GET", "", withSession(map[string]string{"Accept": "application/json"}), 406, jsonrpc.CodeInvalidRequest, "text/event-stream"},
		{"GET unknown event", "GET", "", withSession(map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "999_1"}), 400, jsonrpc.CodeInvalidRequest, "names no event"},
		{"GET malformed event", "GET", "", withSession(map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "garbage"}), 400, jsonrpc.CodeInvalidRequest, "names no event"},
		{"GET without session", "GET", "", map[string]string{"Accept": "text/event-stream"}, 400, jsonrpc.CodeInvalidRequest, "Mcp-Session-Id"},
		{"DELETE unknown", "DELETE", "", map[string]string{"Mcp-Session-Id": "nope"}, 404, jsonrpc.CodeInvalidRequest, "does not exist"},
		{"DELETE without session", "DELETE", "", map[string]string{}, 400, jsonrpc.CodeInvalidRequest, "Mcp-Session-Id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, b.URL, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.headers {
				if k == "Host" {
					req.Host = v
				}
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.code != 0 {
				e := decodeError(t, body)
				if e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.says) {
					t.Fatalf("error %d %q, want %d mentioning %q", e.Error.Code, e.Error.Message, tc.code, tc.says)
				}
			}
		})
	}
	if n := b.Reg.Len(); n != 1 {
		t.Fatalf("%d sessions alive after bad input, want the one good session", n)
	}
	// The good session still works.
	resp := rawPost(t, b.URL, list, map[string]string{"Mcp-Session-Id": sid})
	evs := readEvents(t, resp.Body)
	if len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Data, `"tools"`) {
		t.Fatalf("tools/list after bad input: %+v", evs)
	}
}

// A revision 2026-07-28 probe is answered by the bridge so that clients
// fall back to initialize, and never reaches (or starts) a server.
func TestModernProbe(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	probes := []struct {
		body, version string
	}{
		{`{"jsonrpc":"2.0","id":"d1","method":"server/discover","params":{}}`, "2026-07-28"},
		{`{"jsonrpc":"2.0","id":"d2","method":"server/discover","params":{}}`, ""},
		{`{"jsonrpc":"2.0","id":"d3","method":"tools/list","params":{}}`, "2026-07-28"},
	}
	for _, p := range probes {
		resp := rawPost(t, b.URL, p.body, map[string]string{"MCP-Protocol-Version": p.version})
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("probe %s: status %d", p.body, resp.StatusCode)
		}
		e := decodeError(t, body)
		// Codes -32020..-32022 are "recognized modern errors": a client
		// seeing one would not fall back.
		if e.Error.Code >= -32022 && e.Error.Code <= -32020 {
			t.Fatalf("probe answered with modern error %d", e.Error.Code)
		}
		if !strings.Contains(e.Error.Message, "initialize") {
			t.Fatalf("probe answer %q does not say to initialize", e.Error.Message)
		}
	}
	if n := b.Reg.Len(); n != 0 {
		t.Fatalf("a probe started %d sessions", n)
	}
}

func TestMaxSessions(t *testing.T) {
	b := startBridge(t, bridgeConfig{session: session.Options{MaxSessions: 1}})
	rawSession(t, b.URL, "2025-11-25")
	resp := rawPost(t, b.URL, initBody("2025-11-25"), nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("initialize beyond --max-sessions: %d", resp.StatusCode)
	}
	e := decodeError(t, readAll(t, resp.Body))
	if string(e.ID) != "1" || !strings.Contains(e.Error.Message, "too many sessions") {
		t.Fatalf("error %s %q", e.ID, e.Error.Message)
	}
}

func TestAuth(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{AuthTokens: []string{"alpha", "beta"}}})
	resp := rawPost(t, b.URL, initBody("2025-11-25"), nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp = rawPost(t, b.URL, initBody("2025-11-25"), map[string]string{"Authorization": "Bearer gamma"})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("wrong token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp = rawPost(t, b.URL, initBody("2025-11-25"), map[string]string{"Authorization": "Bearer alpha"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("good token: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	readAll(t, resp.Body)
	// The session is bound to the token that created it.
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	resp = rawPost(t, b.URL, list, map[string]string{"Authorization": "Bearer beta", "Mcp-Session-Id": sid})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another token on the session: %d", resp.StatusCode)
	}
	resp = rawPost(t, b.URL, list, map[string]string{"Authorization": "Bearer alpha", "Mcp-Session-Id": sid})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("same token on the session: %d", resp.StatusCode)
	}
}

// Messages from the server go to exactly one stream: the call's own while
// it is the only one in flight.
func TestRoutingOnPostStream(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	sid := rawSession(t, b.URL, "2025-11-25")
	h := map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
	resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":{"level":"debug"}}`, h)
	readAll(t, resp.Body)
	resp = rawPost(t, b.URL, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"log","arguments":{"text":"x"}}}`, h)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	evs := readEvents(t, resp.Body)
	if len(evs) != 3 || evs[0].Data != "" || !strings.Contains(evs[1].Data, "notifications/message") || !strings.Contains(evs[2].Data, `"id":6`) {
		t.Fatalf("stream of a logging call: %+v", evs)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if e.ID == "" || seen[e.ID] {
			t.Fatalf("event without a unique ID: %+v", evs)
		}
		seen[e.ID] = true
	}
}

// Revision 2025-03-26 sessions may batch; the answers share one stream,
// and no priming event is sent to such old clients.
func TestBatch20250326(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	sid := rawSession(t, b.URL, "2025-03-26")
	resp := rawPost(t, b.URL, `[{"jsonrpc":"2.0","id":"a","method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","id":"b","method":"ping"}]`,
		map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": ""})
	evs := readEvents(t, resp.Body)
	var got []string
	for _, e := range evs {
		if e.Data == "" {
			t.Fatalf("priming event sent to a 2025-03-26 session: %+v", evs)
		}
		var m struct{ ID string }
		json.Unmarshal([]byte(e.Data), &m)
		got = append(got, m.ID)
	}
	if strings.Join(got, ",") != "a,b" && strings.Join(got, ",") != "b,a" {
		t.Fatalf("batch answers: %+v", evs)
	}
}

func TestJSONResponseMode(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{JSONResponse: true}})
	resp := rawPost(t, b.URL, initBody("2025-11-25"), nil)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var res struct {
		ID     int
		Result struct{ ProtocolVersion string }
	}
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &res); err != nil || res.ID != 1 || res.Result.ProtocolVersion != "2025-11-25" {
		t.Fatalf("JSON initialize answer: %+v %v", res, err)
	}
	// The SDK client works in this mode too.
	cs := connect(t, b.URL, nil)
	if got := callCount(t, cs); got != 1 {
		t.Fatalf("count = %d", got)
	}
}

// With --json-response nothing is kept for a resume: no event ID reaches
// the client, so an answer's stream is freed once the answer is written, and
// a guessed Last-Event-ID for it is refused, not replayed.
func TestJSONResponseKeepsNoAnswers(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{JSONResponse: true}})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	resp := c.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"text":"hi"`) {
		t.Fatalf("tools/call: %s %s", resp.Status, body)
	}
	// A session's streams are numbered from 1: initialize's, then the call's.
	for _, id := range []string{"1_0", "2_0"} {
		get, err := c.get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, get.Body)
		if get.StatusCode != http.StatusGone {
			t.Errorf("GET with Last-Event-ID %s: %s %s, want 410 Gone", id, get.Status, body)
		}
	}
}

func TestHealth(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	base := strings.TrimSuffix(b.URL, b.Handler.Path())
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	b.Handler.Drain()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while draining: %d", resp.StatusCode)
	}
}

// Messages wait for the standalone stream when none is open; a second GET
// takes the stream over (the first may be a half-open connection): the
// first connection ends, the second gets what was never delivered.
func TestStandaloneTakeoverAndPending(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	sid := rawSession(t, b.URL, "2025-11-25")
	h := map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
	// "changed" makes the server send tools/list_changed after its answer,
	// with no request in flight and no GET stream open yet.
	resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"changed"}}`, h)
	readAll(t, resp.Body)
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", b.URL, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	first := get()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d", first.StatusCode)
	}
	// The held notification is delivered on the new stream.
	buf := make([]byte, 4096)
	var got string
	for !strings.Contains(got, "notifications/tools/list_changed") {
		n, err := first.Body.Read(buf)
		if err != nil {
			t.Fatalf("standalone stream ended before the held message: %q %v", got, err)
		}
		got += string(buf[:n])
	}
	second := get()
	if second.StatusCode != http.StatusOK {
		t.Fatalf("second GET: %d", second.StatusCode)
	}
	for {
		if _, err := first.Body.Read(buf); err != nil {
			break // the first connection ended
		}
	}
	// A message for the standalone stream now goes to the second.
	resp = rawPost(t, b.URL, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"changed"}}`, h)
	readAll(t, resp.Body)
	got = ""
	for !strings.Contains(got, "notifications/tools/list_changed") {
		n, err := second.Body.Read(buf)
		if err != nil {
			t.Fatalf("the second standalone stream ended: %q %v", got, err)
		}
		got += string(buf[:n])
	}
}

// TestErrorEchoesOnlyValidIDs: an error answer names the request's id only
// if it is one to echo; else null, and the body stays valid UTF-8 and small.
func TestErrorEchoesOnlyValidIDs(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	for _, id := range []string{"\"a\xffb\"", strings.Repeat("9", 100000), `{"x":1}`} {
		resp := rawPost(t, b.URL, `{"jsonrpc":"1.0","id":`+id+`,"method":"tools/list"}`, nil)
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !utf8.ValidString(body) || len(body) > 1000 ||
			!strings.Contains(body, `"id":null`) {
			t.Errorf("id %.20s: %d %.300q, want 400 with a null id", id, resp.StatusCode, body)
		}
	}
	resp := rawPost(t, b.URL, `{"jsonrpc":"1.0","id":"é-7","method":"tools/list"}`, nil)
	if body := readAll(t, resp.Body); !strings.Contains(body, `"id":"é-7"`) {
		t.Errorf("a valid id is echoed: %s", body)
	}
}

package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// The test binary plays the minimal server for the hop floors' children:
// they run os.Executable with this variable set.
func TestMain(m *testing.M) {
	if os.Getenv("MINIMAL_TEST_STDIO") == "1" {
		if err := serveStdio(stdin(), os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSSEHopAnswersWithPrimingEvent checks the SSE hop floor's answer: an
// SSE response whose first event is a priming event (an ID, empty data)
// and whose second carries the child's answer under the next ID of the
// same stream, and nothing else; and that a notification still gets 202.
func TestSSEHopAnswersWithPrimingEvent(t *testing.T) {
	t.Setenv("MINIMAL_TEST_STDIO", "1")
	h, err := newHop(true)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.closeAll()

	post := func(sid, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	events := func(resp *http.Response) []string {
		t.Helper()
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q, want text/event-stream", ct)
		}
		var evs []string
		var cur strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "" {
				evs = append(evs, cur.String())
				cur.Reset()
				continue
			}
			cur.WriteString(sc.Text() + "\n")
		}
		if cur.Len() > 0 {
			t.Fatalf("unterminated event %q", cur.String())
		}
		return evs
	}

	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("no Mcp-Session-Id on the initialize answer")
	}
	evs := events(resp)
	if len(evs) != 2 || evs[0] != "id: 1_0\ndata: \n" || !strings.HasPrefix(evs[1], "id: 1_1\ndata: {") ||
		!strings.Contains(evs[1], `"id":1`) || strings.Count(evs[1], "\n") != 2 {
		t.Fatalf("initialize answered with events %q; want a priming event 1_0 and the answer as 1_1", evs)
	}

	resp = post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a notification got %d, want 202", resp.StatusCode)
	}

	resp = post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
	evs = events(resp)
	if len(evs) != 2 || evs[0] != "id: 2_0\ndata: \n" || !strings.HasPrefix(evs[1], "id: 2_1\ndata: {") ||
		!strings.Contains(evs[1], "hello") {
		t.Fatalf("tools/call answered with events %q; want a priming event 2_0 and the answer as 2_1", evs)
	}
}

package msglog_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
	"github.com/mcp-bridge/mcp-bridge/msglog"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lines are the JSON log records written to l so far.
func lines(t *testing.T, l *testlog.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %s", line)
		}
		out = append(out, rec)
	}
	return out
}

// Every message both ways, with a real server behind a real connection:
// direction, method, id as the client wrote it, size and body; a long
// body is cut; a request the policy refuses is logged with the refusal.
func TestLogsBothWays(t *testing.T) {
	var buf testlog.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil)).With("session", "s-1")
	p, err := policy.Parse("p.yaml", []byte("tools:\n  deny: [test_image_content]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := childtest.Start(t, msglogThenPolicy(logger, p), childtest.EverythingServer(t))
	long := strings.Repeat("é", 3000)
	c.Call(t, "client", "tools/call", map[string]any{"name": "test_tool_with_logging", "arguments": map[string]any{"text": long}})
	c.Call(t, "client", "tools/call", map[string]any{"name": "test_image_content"})

	var toServer, fromServer, refused int
	for _, rec := range lines(t, &buf) {
		if rec["msg"] != "MCP message" {
			continue
		}
		if rec["session"] != "s-1" {
			t.Errorf("a line without its session: %v", rec)
		}
		body, _ := rec["body"].(string)
		if !utf8.ValidString(body) || len(body) > msglog.DefaultMaxBody+40 {
			t.Errorf("body of %d bytes, not cut at a UTF-8 boundary near %d: %.80q", len(body), msglog.DefaultMaxBody, body)
		}
		switch rec["dir"] {
		case "to_server":
			if rec["method"] == "tools/call" {
				toServer++
				if rec["kind"] != "request" || rec["id"] == "" || rec["bytes"].(float64) <= 0 {
					t.Errorf("a request's line: %v", rec)
				}
				if rec["bytes"].(float64) > msglog.DefaultMaxBody && !strings.Contains(body, "more bytes)") {
					t.Errorf("a long body not marked as cut: %.80q", body)
				}
			}
			if r, ok := rec["refused"].(string); ok {
				refused++
				if !strings.HasPrefix(r, "-32602 ") {
					t.Errorf("the refusal: %q", r)
				}
			}
		case "from_server":
			if rec["method"] == "tools/call" && rec["kind"] == "response" {
				fromServer++
			}
		}
	}
	if toServer != 2 || fromServer != 1 || refused != 1 {
		t.Errorf("logged %d tools/call to the server, %d answers from it, %d refusals; want 2, 1, 1\n%v", toServer, fromServer, refused, lines(t, &buf))
	}
}

// Off is off: a logger above the level costs the chain nothing but the
// check.
func TestQuietBelowLevel(t *testing.T) {
	var buf testlog.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := childtest.Start(t, msglog.Interceptor(logger, nil), childtest.EverythingServer(t))
	c.Call(t, "client", "tools/list", nil)
	if strings.Contains(buf.String(), "MCP message") {
		t.Errorf("logged below its level: %s", buf.String())
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…(1 more bytes)"},
		{"aé", 2, "a…(2 more bytes)"}, // é is 2 bytes: not split
		{"é", 0, "…(2 more bytes)"},
	} {
		if got := msglog.Cut([]byte(c.in), c.max); got != c.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

func FuzzCut(f *testing.F) {
	f.Add([]byte("aé€😀"), 3)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		got := msglog.Cut(data, max)
		if len(data) <= max {
			if got != string(data) {
				t.Fatalf("Cut changed a short body")
			}
			return
		}
		kept, _, ok := strings.Cut(got, "…(")
		if !ok || len(kept) > max || !strings.HasPrefix(string(data), kept) {
			t.Fatalf("Cut(%q, %d) = %q", data, max, got)
		}
		if utf8.Valid(data) && !utf8.ValidString(kept) {
			t.Fatalf("Cut split a rune: %q", kept)
		}
	})
}

func msglogThenPolicy(logger *slog.Logger, p *policy.Policy) peer.Interceptor {
	return peer.Chain(msglog.Interceptor(logger, nil), p.Interceptor(&policy.Options{Logger: slog.New(slog.DiscardHandler)}))
}

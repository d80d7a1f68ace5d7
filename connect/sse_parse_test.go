package connect

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// readEvents forwards message events whole, one line each, keeps the last
// event ID and the retry delay, and stops at the answer to its request.
func TestReadEvents(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		callID       string
		want         string // stdout
		answered     bool
		lastID       string
		retry        time.Duration
	}{
		{
			name:     "priming event, then a notification and the answer",
			stream:   "id: s_0\nretry: 250\ndata:\n\nid: s_1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\nid: s_2\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\nid: s_3\ndata: {\"after\":true}\n\n",
			callID:   "7",
			want:     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n",
			answered: true, lastID: "s_2", retry: 250 * time.Millisecond,
		},
		{
			name:     "data on several lines, CRLF, a comment and another event type",
			stream:   ": keep-alive\r\nevent: other\r\ndata: {\"x\":1}\r\n\r\nid: a\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata:  \"id\":\"q\", \"result\":{}}\r\n\r\n",
			callID:   `"q"`,
			want:     "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"result\":{}}\n",
			answered: true, lastID: "a", retry: DefaultRetry,
		},
		{
			name:   "a request of the server with the call's id is not its answer; the stream ends",
			stream: "id: b\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"elicitation/create\"}\n\n",
			callID: "7",
			want:   "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"elicitation/create\"}\n",
			lastID: "b", retry: DefaultRetry,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := &forwarder{opts: &Options{MaxMessageBytes: 1 << 10}, out: &lineWriter{w: &out}}
			f.ctx, f.fail = context.WithCancelCause(context.Background())
			defer f.fail(nil)
			s := newStreamable(f, false)
			var lastID string
			retry := DefaultRetry
			answered, err := s.readEvents(strings.NewReader(tc.stream), []byte(tc.callID), &lastID, &retry)
			if err != nil {
				t.Fatal(err)
			}
			if answered != tc.answered || lastID != tc.lastID || retry != tc.retry || out.String() != tc.want {
				t.Errorf("answered %v, last ID %q, retry %v, stdout:\n%s\nwant %v, %q, %v:\n%s", answered, lastID, retry, out.String(), tc.answered, tc.lastID, tc.retry, tc.want)
			}
		})
	}
}

// FuzzReadEvents: whatever the remote sends, every line on stdout is one
// JSON-RPC message in UTF-8, and no message outgrows the bound.
func FuzzReadEvents(f *testing.F) {
	f.Add("id: s_0\nretry: 250\ndata:\n\nid: s_1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n")
	f.Add("data: {\"a\":\r\ndata: \"\xff\"}\r\n\r\n")
	f.Add("data: [1,\ndata: 2]\n\n: c\nevent: message\ndata: {}\n\n")
	f.Fuzz(func(t *testing.T, stream string) {
		var out bytes.Buffer
		f := &forwarder{opts: &Options{MaxMessageBytes: 256}, out: &lineWriter{w: &out}}
		f.ctx, f.fail = context.WithCancelCause(context.Background())
		defer f.fail(nil)
		s := newStreamable(f, false)
		s.log = slog.New(slog.DiscardHandler)
		var lastID string
		retry := DefaultRetry
		s.readEvents(strings.NewReader(stream), []byte("7"), &lastID, &retry)
		for _, line := range bytes.SplitAfter(out.Bytes(), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			if line[len(line)-1] != '\n' || checkMessage(line) != nil || len(line) > 257 {
				t.Fatalf("stdout line %q", line)
			}
		}
	})
}

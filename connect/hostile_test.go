package connect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
)

// runHostile runs connect.Run against handler, sends one request, and
// returns the line stdout got for it, and the log.
func runHostile(t *testing.T, handler http.HandlerFunc, opts connect.Options, request string) (string, string) {
	t.Helper()
	srv := httptest.NewServer(handler)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()
	var logs testlog.Buffer
	opts.URL = srv.URL
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	if opts.Transport == "" {
		opts.Transport = connect.TransportStreamable
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- connect.Run(ctx, inR, outW, &opts); outW.Close() }()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if _, err := io.WriteString(inW, request+"\n"); err != nil {
		t.Fatal(err)
	}
	var got string
	select {
	case got = <-lines:
	case <-ctx.Done():
		t.Fatalf("no answer on stdout; log:\n%s", logs.String())
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for l := range lines {
		t.Errorf("another line on stdout: %.200q", l)
	}
	return got, logs.String()
}

// wantRPCError checks that line is a JSON-RPC error answering id 1 whose
// message holds want.
func wantRPCError(t *testing.T, line, want string) {
	t.Helper()
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil || string(m.ID) != "1" || m.Error == nil {
		t.Fatalf("stdout got %.300q, want a JSON-RPC error for id 1", line)
	}
	if !strings.Contains(m.Error.Message, want) {
		t.Errorf("error %q, want it to contain %q", m.Error.Message, want)
	}
}

const pingRequest = `{"jsonrpc":"2.0","id":1,"method":"ping"}`

func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).Flush()
}

// TestConnectHostileHugeEvent: an event of endless data lines (the server
// would send 1 GiB) is refused as its lines arrive, not when a blank line
// ends it: the client gets an error, and the connection is closed long
// before the server is through.
func TestConnectHostileHugeEvent(t *testing.T) {
	const max = 64 << 10
	var written int64
	var mu sync.Mutex
	line := []byte("data: " + strings.Repeat("x", 1<<10) + "\n")
	got, logs := runHostile(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		sseHeader(w)
		for n := int64(0); n < 1<<30; n += int64(len(line)) {
			if _, err := w.Write(line); err != nil {
				break
			}
			mu.Lock()
			written = n
			mu.Unlock()
		}
		<-r.Context().Done()
	}, connect.Options{MaxMessageBytes: max}, pingRequest)
	wantRPCError(t, got, "an SSE event over 65536 bytes")
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "over 65536 bytes") {
		t.Errorf("log:\n%s\nwant an error naming the bound", logs)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the server wrote %d bytes before the connection closed", written)
	if written >= 1<<30-int64(len(line)) {
		t.Errorf("the server wrote the whole GiB")
	}
}

// TestConnectHostileDrip: an event, or a JSON answer, that stops half way
// is given up after EventTimeout, with an error to the client.
func TestConnectHostileDrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w http.ResponseWriter)
		want  string
	}{
		{"sse event", func(w http.ResponseWriter) {
			sseHeader(w)
			io.WriteString(w, "id: 1\ndata: {\"jsonrpc\":\"2.0\",")
		}, "an SSE event did not arrive whole"},
		{"sse line", func(w http.ResponseWriter) {
			sseHeader(w)
			io.WriteString(w, ": keep-alive\n\n: a comment that never ends")
		}, "an SSE event did not arrive whole"},
		{"json body", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"jsonrpc":"2.0",`)
		}, "the JSON answer did not arrive whole"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, logs := runHostile(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					w.WriteHeader(http.StatusMethodNotAllowed)
					return
				}
				tc.write(w)
				http.NewResponseController(w).Flush()
				<-r.Context().Done()
			}, connect.Options{EventTimeout: 50 * time.Millisecond}, pingRequest)
			wantRPCError(t, got, tc.want)
			if !strings.Contains(logs, "level=ERROR") {
				t.Errorf("log:\n%s\nwant an error", logs)
			}
		})
	}
}

// TestConnectHostileMalformed: malformed JSON or invalid UTF-8 from the
// remote never reaches stdout; the client gets an error instead.
func TestConnectHostileMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"sse truncated json", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\n\n", "not valid JSON"},
		{"sse invalid utf-8", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"t\":\"\xff\xfe\"}}\n\n", "not valid UTF-8"},
		{"sse not an object", "text/event-stream", "data: hello\n\n", "not a JSON object"},
		{"json truncated", "application/json", `{"jsonrpc":"2.0","id":1,"result":`, "not valid JSON"},
		{"json invalid utf-8", "application/json", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"t\":\"\xc3\x28\"}}", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, logs := runHostile(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					w.WriteHeader(http.StatusMethodNotAllowed)
					return
				}
				w.Header().Set("Content-Type", tc.contentType)
				io.WriteString(w, tc.body)
			}, connect.Options{}, pingRequest)
			wantRPCError(t, got, tc.want)
			if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, tc.want) {
				t.Errorf("log:\n%s\nwant an error saying %q", logs, tc.want)
			}
		})
	}
}

// TestConnectHostileLegacy: on the legacy HTTP+SSE transport, an answer
// in invalid UTF-8 is answered with an error, and malformed JSON (after
// which the stream cannot be trusted) answers every request in flight
// with an error before bridge connect gives up; stdout gets JSON only.
func TestConnectHostileLegacy(t *testing.T) {
	for _, tc := range []struct {
		name, event, want string
		fatal             bool
	}{
		{"invalid utf-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"t\":\"\xff\"}}", "not valid UTF-8", false},
		{"truncated json", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{", "the remote's SSE stream ended", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := make(chan string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					w.WriteHeader(http.StatusAccepted)
					events <- tc.event
					return
				}
				sseHeader(w)
				io.WriteString(w, "event: endpoint\ndata: /post\n\n")
				http.NewResponseController(w).Flush()
				select {
				case ev := <-events:
					io.WriteString(w, "event: message\ndata: "+ev+"\n\n")
					http.NewResponseController(w).Flush()
				case <-r.Context().Done():
					return
				}
				<-r.Context().Done()
			}))
			defer func() {
				srv.CloseClientConnections()
				srv.Close()
			}()
			var logs testlog.Buffer
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- connect.Run(ctx, inR, outW, &connect.Options{URL: srv.URL, Transport: connect.TransportSSE,
					Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				outW.Close()
			}()
			lines := make(chan string, 4)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(outR)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			io.WriteString(inW, pingRequest+"\n")
			select {
			case got := <-lines:
				wantRPCError(t, got, tc.want)
			case <-ctx.Done():
				t.Fatalf("no answer; log:\n%s", logs.String())
			}
			inW.Close()
			err := <-done
			if tc.fatal != (err != nil) {
				t.Errorf("Run: %v", err)
			}
			for l := range lines {
				t.Errorf("another line on stdout: %.200q", l)
			}
			if !strings.Contains(logs.String(), "level=ERROR") {
				t.Errorf("log:\n%s\nwant an error", logs.String())
			}
		})
	}
}

package bridge_test

// The HTTP edge under hostile or careless clients, over raw TCP: stalled bodies, clients that stop reading, too many
// connections, HEAD. Timeouts are short and set through Options; tests wait
// for the server's own events (its answer, its end of the connection, the
// ConnState hook), never for time to pass. The 60 s connection deadlines
// only bound a failure.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// dialFrom opens a raw connection to the bridge from a loopback address
// (127.0.0.x), with a deadline that bounds a failing test.
func dialFrom(t *testing.T, b *testBridge, localIP string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
	c, err := d.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("dialing from %s: %v", localIP, err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// expectClosed reads what is left on the connection and fails unless the
// server closes it (EOF).
func expectClosed(t *testing.T, br *bufio.Reader) {
	t.Helper()
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the server did not close the connection: %v", err)
	}
}

// connWatch reports, by the client's address, when the server closed a
// connection (its ConnState hook).
type connWatch struct {
	mu     sync.Mutex
	closed map[string]chan struct{}
}

func (w *connWatch) ch(addr string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed == nil {
		w.closed = make(map[string]chan struct{})
	}
	c, ok := w.closed[addr]
	if !ok {
		c = make(chan struct{})
		w.closed[addr] = c
	}
	return c
}

func (w *connWatch) hook(c net.Conn, st http.ConnState) {
	if st == http.StateClosed {
		close(w.ch(c.RemoteAddr().String()))
	}
}

// waitClosed waits until the server closed the client connection c.
func (w *connWatch) waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	select {
	case <-w.ch(c.LocalAddr().String()):
	case <-time.After(60 * time.Second):
		t.Fatalf("the server kept the connection open: %s", what)
	}
}

// listeners are the ways the tests of deadlines serve the bridge: on the
// test server's listener, and behind LimitListener, whose connections
// defer deadline changes until a read or write (limit.go), as the command
// serves it.
var listeners = []struct {
	name string
	wrap func(*httptest.Server)
}{
	{"plain", func(*httptest.Server) {}},
	{"limited", func(s *httptest.Server) { s.Listener = bridge.LimitListener(s.Listener, nil) }},
}

const postHead = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"

// A body that stalls, with a declared length or chunked without end, gets
// 408 within BodyReadTimeout and its connection closes (before: it stayed
// open forever).
func TestBodyReadTimeout(t *testing.T) {
	for _, ln := range listeners {
		t.Run(ln.name, func(t *testing.T) { testBodyReadTimeout(t, ln.wrap) })
	}
}

func testBodyReadTimeout(t *testing.T, wrap func(*httptest.Server)) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{BodyReadTimeout: 50 * time.Millisecond}, server: wrap})
	for _, tc := range []struct{ name, req string }{
		{"stalled mid-body", postHead + "Content-Length: 1000\r\n\r\n{\"jsonrpc\":\"2.0\","},
		{"chunked without end", postHead + "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"jso\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialFrom(t, b, "127.0.0.1")
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			body := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d %s, want 408", resp.StatusCode, body)
			}
			if e := decodeError(t, body); !strings.Contains(e.Error.Message, "--body-read-timeout") {
				t.Errorf("message %q does not name --body-read-timeout", e.Error.Message)
			}
			expectClosed(t, br)
		})
	}
}

// A declared length is not an allocation: a client that declares 64 MiB
// and sends 1 KiB costs about what it sent (before: 64 MiB at once, before
// any session lookup).
func TestBodyBufferGrowsWithBytesReceived(t *testing.T) {
	const limit = 64 << 20
	b := startBridge(t, bridgeConfig{session: session.Options{MaxMessageBytes: limit}, bridge: bridge.Options{BodyReadTimeout: 50 * time.Millisecond}})
	c := dialFrom(t, b, "127.0.0.1")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", postHead, limit-1, strings.Repeat(" ", 1024))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("a stalled body that declared %d bytes and sent 1 KiB cost %d bytes of allocation", limit-1, got)
	}

	// Bodies that do arrive are read whole, of declared length or chunked
	// (with the default body timeout: a loaded machine may take more than
	// 50 ms to read 2.4 MB).
	b = startBridge(t, bridgeConfig{session: session.Options{MaxMessageBytes: limit}})
	sid := rawSession(t, b.URL, "2025-11-25")
	text := strings.Repeat("abcdefgh", 300_000) // 2.4 MB: several doublings
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + text + `"}}}`
	for _, chunked := range []bool{false, true} {
		var r io.Reader = strings.NewReader(call)
		if chunked {
			r = io.MultiReader(r) // hides the length: net/http sends it chunked
		}
		req, _ := http.NewRequest("POST", b.URL, r)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		evs := readEvents(t, resp.Body)
		resp.Body.Close()
		if len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Data, text) {
			t.Errorf("chunked=%v: the echo of a %d-byte body did not come back whole (status %d)", chunked, len(call), resp.StatusCode)
		}
	}
}

// HEAD on the endpoint gets 405 with Allow, never a stream (before: the GET
// handler served it, took over the standalone stream and never ended).
func TestHeadIsNotAStream(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	sid := rawSession(t, b.URL, "2025-11-25")
	c := dialFrom(t, b, "127.0.0.1")
	fmt.Fprintf(c, "HEAD /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n", sid)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "GET") {
		t.Fatalf("HEAD: %d, Allow %q; want 405 with Allow listing GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "event-stream") {
		t.Fatalf("HEAD answered with %s", ct)
	}
	// The standalone stream is still free for a GET.
	req, _ := http.NewRequest("GET", b.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	get, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Body.Close()
	if get.StatusCode != http.StatusOK {
		t.Fatalf("GET after HEAD: %d", get.StatusCode)
	}
}

// A client that stops reading an SSE stream loses its connection, and the
// handler its goroutine (goleak), within WriteTimeout; here after its
// session was deleted (before: both stayed forever).
func TestWriteTimeoutFreesAStalledReader(t *testing.T) {
	for _, ln := range listeners {
		t.Run(ln.name, func(t *testing.T) { testWriteTimeoutFreesAStalledReader(t, ln.wrap) })
	}
}

func testWriteTimeoutFreesAStalledReader(t *testing.T, wrap func(*httptest.Server)) {
	const size = 7 << 20 // beyond what the socket buffers of both ends hold
	var watch connWatch
	b := startBridge(t, bridgeConfig{
		session: session.Options{MaxMessageBytes: 8 << 20, LogMaxBytes: 32 << 20},
		bridge:  bridge.Options{WriteTimeout: time.Second},
		server:  func(s *httptest.Server) { wrap(s); s.Config.ConnState = watch.hook },
	})
	sid := rawSession(t, b.URL, "2025-11-25")
	c := dialFrom(t, b, "127.0.0.1")
	c.(*net.TCPConn).SetReadBuffer(4096) // a small window: the server's writes block soon
	call := fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"big","arguments":{"n":%d}}}`, size)
	fmt.Fprintf(c, "%sMcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n%s", postHead, sid, len(call), call)
	// Read the start of the answer, so that it is being written, then stop.
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call: %d", resp.StatusCode)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 64<<10); err != nil {
		t.Fatal(err)
	}
	del, _ := http.NewRequest("DELETE", b.URL, nil)
	del.Header.Set("Mcp-Session-Id", sid)
	dresp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	dresp.Body.Close()
	if dresp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d", dresp.StatusCode)
	}
	watch.waitClosed(t, c, "a client that stopped reading, after DELETE of its session")
}

// Connections beyond the limits, in all and per client address, get a 503
// with Retry-After and a JSON-RPC error, and are closed; a place frees when
// a connection closes.
func TestConnectionLimits(t *testing.T) {
	var watch connWatch
	b := startBridge(t, bridgeConfig{server: func(s *httptest.Server) {
		s.Listener = bridge.LimitListener(s.Listener, &bridge.LimitOptions{MaxConnections: 3, MaxConnectionsPerClient: 2})
		s.Config.ConnState = watch.hook
	}})
	// healthy opens a connection from ip and checks that it is served (so
	// it was counted in), keeping it open.
	healthy := func(ip string) net.Conn {
		t.Helper()
		c := dialFrom(t, b, ip)
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a connection from %s within the limits: %v", ip, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a connection from %s within the limits: %d", ip, resp.StatusCode)
		}
		return c
	}
	refused := func(ip, limit string) {
		t.Helper()
		c := dialFrom(t, b, ip)
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("a connection from %s beyond %s got no answer: %v", ip, limit, err)
		}
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("a connection from %s beyond %s: %d, Retry-After %q; want 503 with Retry-After", ip, limit, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if e := decodeError(t, body); !strings.Contains(e.Error.Message, limit) {
			t.Errorf("the 503 says %q, not naming %s", e.Error.Message, limit)
		}
		expectClosed(t, br)
	}
	a1 := healthy("127.0.0.2")
	healthy("127.0.0.2")
	refused("127.0.0.2", "--max-connections-per-client")
	healthy("127.0.0.3")
	refused("127.0.0.4", "--max-connections")
	a1.Close()
	watch.waitClosed(t, a1, "closed by its client")
	healthy("127.0.0.4")
}

// A connection beyond the limits is answered once its request's head has
// arrived, not on accept: net/http's client takes an answer that comes
// before it has written its request for an error on an idle connection
// ("unsolicited response"), not for the 503 (before: now and then, under
// load). A connection that sends no request, or a TLS handshake, is closed
// without an answer.
func TestRefusalAnswersTheRequest(t *testing.T) {
	b := startBridge(t, bridgeConfig{server: func(s *httptest.Server) {
		s.Listener = bridge.LimitListener(s.Listener, &bridge.LimitOptions{MaxConnections: 1})
	}})
	held := dialFrom(t, b, "127.0.0.2")
	io.WriteString(held, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(held), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the one connection within the limit: %v %v", resp, err)
	}
	for _, tc := range []struct{ name, sent string }{
		{"no request", ""},
		{"a TLS handshake", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"},
	} {
		c := dialFrom(t, b, "127.0.0.3")
		io.WriteString(c, tc.sent)
		c.(*net.TCPConn).CloseWrite()
		if got, err := io.ReadAll(c); err != nil || len(got) != 0 {
			t.Errorf("%s beyond the limit: got %q, %v; want no answer and the connection closed", tc.name, got, err)
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 20 {
		resp, err := client.Get(b.srv.URL + "/healthz")
		if err != nil {
			t.Fatalf("request %d beyond the limit: %v; want a 503", i, err)
		}
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "--max-connections") {
			t.Fatalf("request %d beyond the limit: %d %s; want a 503 naming --max-connections", i, resp.StatusCode, body)
		}
	}
}

// The buffers of bodies being read are bounded all together: a body that
// would go beyond MaxBodyBytesInFlight gets 503 with Retry-After (before:
// 200 bodies stalled near their end held 834 MB).
func TestBodyBytesInFlight(t *testing.T) {
	b := startBridge(t, bridgeConfig{session: session.Options{MaxMessageBytes: 1 << 20}, bridge: bridge.Options{MaxBodyBytesInFlight: 200 << 10}})
	c := dialFrom(t, b, "127.0.0.1")
	fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", postHead, 300<<10, strings.Repeat(" ", 300<<10))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a body beyond the bytes in flight: %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if e := decodeError(t, body); !strings.Contains(e.Error.Message, "--max-body-bytes-in-flight") {
		t.Errorf("message %q does not name --max-body-bytes-in-flight", e.Error.Message)
	}
	expectClosed(t, br)
	// The refused body gave its bytes back: one within the limit is read.
	sid := rawSession(t, b.URL, "2025-11-25")
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("y", 150<<10) + `"}}}`
	resp = rawPost(t, b.URL, call, map[string]string{"Mcp-Session-Id": sid})
	if evs := readEvents(t, resp.Body); resp.StatusCode != 200 || len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Data, `"result"`) {
		t.Fatalf("a body within the limit after a refused one: %d %+v", resp.StatusCode, evs)
	}
}

// A stream may wait between events longer than WriteTimeout and
// BodyReadTimeout: neither cuts it. The time waited is the subject here,
// so the test lets it pass (3 s against 1 s timeouts).
func TestStreamsWaitBeyondTheTimeouts(t *testing.T) {
	for _, ln := range listeners {
		t.Run(ln.name, func(t *testing.T) { testStreamsWaitBeyondTheTimeouts(t, ln.wrap) })
	}
}

func testStreamsWaitBeyondTheTimeouts(t *testing.T, wrap func(*httptest.Server)) {
	const timeout = time.Second
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{WriteTimeout: timeout, BodyReadTimeout: timeout}, server: wrap})
	sid := rawSession(t, b.URL, "2025-11-25")
	req, _ := http.NewRequest("GET", b.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	get, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Body.Close()
	lines := bufio.NewScanner(get.Body)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "id: ") {
		t.Fatalf("the standalone stream did not start with its priming event: %q %v", lines.Text(), lines.Err())
	}
	<-time.After(3 * timeout)
	resp := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"changed","arguments":{}}}`,
		map[string]string{"Mcp-Session-Id": sid})
	readAll(t, resp.Body)
	for lines.Scan() {
		if strings.Contains(lines.Text(), "notifications/tools/list_changed") {
			return
		}
	}
	t.Fatalf("the standalone stream ended after waiting %s: %v", 3*timeout, lines.Err())
}

// The next request on a kept-alive connection inherits no deadline from
// the stream before it: its answer goes out, though it comes after the
// stream's last write deadline passed, and so does the next stream's. The
// time waited is the subject here, so the test lets it pass.
func TestKeptAliveConnectionStartsWithoutDeadline(t *testing.T) {
	for _, ln := range listeners {
		t.Run(ln.name, func(t *testing.T) {
			const timeout = 200 * time.Millisecond
			b := startBridge(t, bridgeConfig{bridge: bridge.Options{WriteTimeout: timeout, BodyReadTimeout: timeout}, server: ln.wrap})
			sid := rawSession(t, b.URL, "2025-11-25")
			c := dialFrom(t, b, "127.0.0.1")
			br := bufio.NewReader(c)
			post := func(body string) *http.Response {
				t.Helper()
				fmt.Fprintf(c, "%sMcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n%s", postHead, sid, len(body), body)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer on the kept-alive connection: %v", err)
				}
				return resp
			}
			call := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
			for i := range 2 {
				resp := post(call)
				if evs := readEvents(t, resp.Body); resp.StatusCode != 200 || len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Data, `"result"`) {
					t.Fatalf("call %d: %d %+v", i, resp.StatusCode, evs)
				}
				<-time.After(3 * timeout)
				resp = post(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
				readAll(t, resp.Body)
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("a notification after a stream: %d", resp.StatusCode)
				}
				<-time.After(3 * timeout)
			}
		})
	}
}

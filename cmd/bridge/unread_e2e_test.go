package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// On answers written without reading the body (401,
// 403 for Origin or Host, 404, 405, 406, 415), net/http first discards a
// body declared under 256 KiB, and no deadline covered that: a client that
// declared Content-Length 200000, sent one byte and stalled kept its
// connection for as long as it liked, and --max-connections of them
// locked every authenticated client out. Each such connection must be
// answered or closed within --body-read-timeout of its headers; then an
// authenticated initialize succeeds.
func TestUnreadBodiesAreBounded(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const conns = 24
	p := startBridgeBinary(t, bridgeBin, "--auth-token-file", tokens, "--max-connections", fmt.Sprint(conns),
		"--body-read-timeout", "1s", "--", helloBin)
	const json = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
	const auth = "Authorization: Bearer s3cret\r\n"
	heads := []string{
		"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + json,                                                                                 // 401
		"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\n" + json,                                                 // 403 Origin
		"POST /mcp HTTP/1.1\r\nHost: evil.example\r\n" + json,                                                                              // 403 Host
		"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + json,                                                                      // 404
		"PUT /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + json,                                                                           // 405
		"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Content-Type: application/json\r\nAccept: text/html\r\n",                     // 406
		"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Content-Type: text/plain\r\nAccept: application/json, text/event-stream\r\n", // 415
	}
	var (
		mu       sync.Mutex
		held     int
		statuses = map[string]int{}
		wg       sync.WaitGroup
	)
	for i := range conns {
		c := rawConn(t, p.url)
		// A bound on a failing test, far beyond --body-read-timeout.
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "%sContent-Length: 200000\r\n\r\n{", heads[i%len(heads)])
		wg.Go(func() {
			br := bufio.NewReader(c)
			status := "none"
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				status = resp.Status
				_, err = io.Copy(io.Discard, resp.Body)
			}
			if err == nil {
				_, err = io.Copy(io.Discard, br) // until the bridge closes
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				held++
			}
		})
	}
	wg.Wait()
	t.Logf("answers: %v; connections still held 30 s after their headers (--body-read-timeout 1s): %d of %d", statuses, held, conns)
	if held > 0 {
		t.Fatalf("%d of %d connections with a stalled, unread body were still open 30 s after their headers (--body-read-timeout 1s)", held, conns)
	}
	// Since Go 1.27, net/http half-closes a connection whose body it gave
	// up discarding and closes it rstAvoidanceDelay (500 ms) later, so
	// that the client reads the answer before a reset; the place in
	// --max-connections is held until then. The clients above saw the
	// half-close; nothing shows them the close, so the initialize is
	// retried while the limit refuses it (as its Retry-After invites), up
	// to far beyond that delay.
	initialize := func() (status int, answer string) {
		req, _ := http.NewRequest(http.MethodPost, p.url, strings.NewReader(initRequest))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Status + " " + string(body)
	}
	status, answer := initialize()
	for until := time.Now().Add(10 * time.Second); status == http.StatusServiceUnavailable &&
		strings.Contains(answer, "--max-connections") && time.Now().Before(until); {
		time.Sleep(20 * time.Millisecond) // a poll's pace, not a wait for an event
		status, answer = initialize()
	}
	if status != http.StatusOK || !strings.Contains(answer, `"result"`) {
		t.Fatalf("an authenticated initialize after the stalled bodies: %s", answer)
	}
}

package main

// The HTTP edge of the real binary: the server's idle
// timeout, a stalled body, streams that outlive every timeout, and the
// connection limit under a low open-file limit. Tests wait for what the
// bridge does (an answer, its end of a connection); the 60 s connection
// deadlines only bound a failure.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawConn opens a connection to the bridge at u, with a deadline that
// bounds a failing test.
func rawConn(t *testing.T, u string) net.Conn {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func healthz(c net.Conn, br *bufio.Reader) (*http.Response, string, error) {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

const initRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`

func TestHTTPTimeoutsOfTheBinary(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	// Timeouts shorter than the 100 ms between the countdown's events.
	// (--write-timeout is left out: a write deadline that short could cut
	// a legitimate write on a loaded machine; the handler's tests cover it.)
	p := startBridgeBinary(t, bridgeBin, "--http-idle-timeout", "90ms", "--body-read-timeout", "90ms", "--", helloBin)

	t.Run("idle keep-alive connection closed", func(t *testing.T) {
		c := rawConn(t, p.url)
		br := bufio.NewReader(c)
		if resp, _, err := healthz(c, br); err != nil || resp.StatusCode != 200 {
			t.Fatalf("/healthz: %v %v", resp, err)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("an idle keep-alive connection: read %v, want EOF (closed by the bridge)", err)
		}
	})

	t.Run("stalled body", func(t *testing.T) {
		c := rawConn(t, p.url)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 4194303\r\n\r\n{\"jsonrpc\":")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a stalled body: %d, want 408", resp.StatusCode)
		}
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("the connection of a stalled body stayed open: %v", err)
		}
	})

	t.Run("streams outlive the timeouts", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		progressed := make(chan struct{}, 100)
		client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
		})
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"from": 3}}
		params.SetProgressToken("c")
		res, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Fatalf("a call whose stream is silent for 100 ms at a time: %v", err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != "liftoff" || len(progressed) != 3 {
			t.Fatalf("countdown: %q with %d progress events, want liftoff with 3", got, len(progressed))
		}
	})
}

// Under a low open-file limit, connections beyond what the limit leaves
// for servers' pipes get a clear 503, and a session still starts (before:
// connections took every descriptor, then new ones hung unaccepted and
// initialize failed with "502 pipe2: too many open files").
func TestConnectionsLeaveDescriptorsForServers(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	// A script lowers both open-file limits (the Go runtime would raise
	// a soft one alone to the hard one), then becomes the bridge.
	script := filepath.Join(t.TempDir(), "bridge-ulimit")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nulimit -n 128 || exit 9\nexec "+bridgeBin+` "$@"`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startBridgeBinary(t, script, "--", helloBin)
	var open []*bufio.Reader
	var conns []net.Conn
	refused := false
	for range 200 {
		c := rawConn(t, p.url)
		br := bufio.NewReader(c)
		resp, body, err := healthz(c, br)
		if err != nil {
			t.Fatalf("connection %d got no answer: %v (descriptors ran out?)", len(open)+1, err)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			var e struct{ Error struct{ Message string } }
			if json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error.Message, "--max-connections") || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("the 503 beyond the limit: Retry-After %q, body %q", resp.Header.Get("Retry-After"), body)
			}
			refused = true
			break
		}
		if resp.StatusCode != 200 {
			t.Fatalf("connection %d: %d", len(open)+1, resp.StatusCode)
		}
		open, conns = append(open, br), append(conns, c)
	}
	if !refused {
		t.Fatalf("%d connections under an open-file limit of 128, none refused", len(open))
	}
	// A session starts on a connection already open: its server's pipes
	// find descriptors.
	c, br := conns[0], open[0]
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(initRequest), initRequest)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"result"`) {
		t.Fatalf("initialize with %d connections open: %d %s", len(open), resp.StatusCode, body)
	}
}

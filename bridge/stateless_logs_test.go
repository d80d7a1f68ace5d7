package bridge_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/pool"
)

// noInputsMeta declares no capability a child could ask for: without the
// log level rule, such calls would share a child freely.
const noInputsMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// logCall is the body of a tools/call of the test child's tool, with a log
// level in _meta unless level is "".
func logCall(id, tool, text, level string) string {
	meta := strings.Replace(noInputsMeta, `"_meta":{`, `"_meta":{"progressToken":"`+id+`",`, 1)
	if level != "" {
		meta = strings.Replace(meta, `"_meta":{`, `"_meta":{"io.modelcontextprotocol/logLevel":"`+level+`",`, 1)
	}
	args := `{}`
	if text != "" {
		args = `{"text":"` + text + `"}`
	}
	return `{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `,` + meta + `}}`
}

// postLines posts a stateless request and sends each data line of the
// answer (one JSON body, or the events of an SSE stream) to lines, which it
// closes at the end of the answer.
func postLines(ctx context.Context, url, body string, headers map[string]string, lines chan<- string) error {
	defer close(lines)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "application/json" {
		b, err := io.ReadAll(resp.Body)
		lines <- string(b)
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			lines <- data
		}
	}
	return sc.Err()
}

// collect posts a tools/call of tool in the background and returns the
// channel of the answer's lines and the channel of its error.
func collect(ctx context.Context, url, body, tool string) (<-chan string, <-chan error) {
	return collectWith(ctx, url, body, statelessHeaders("tools/call", tool))
}

func collectWith(ctx context.Context, url, body string, headers map[string]string) (<-chan string, <-chan error) {
	lines := make(chan string, 16)
	errc := make(chan error, 1)
	go func() { errc <- postLines(ctx, url, body, headers, lines) }()
	return lines, errc
}

// Two calls on one child (--pool-max 1): a call that set a log level never
// runs beside another, so the child's notifications/message (which names
// no request) is exactly its own; a call without a log level gets none,
// even from a child whose level an earlier call set. For children of both
// eras: a modern child's messages name no request either. A subscription
// open on the child all along neither blocks such calls nor gets their
// messages.
func TestStatelessLogsOneChild(t *testing.T) {
	for _, era := range []pool.Era{pool.EraLegacy, pool.EraModern} {
		t.Run(era.String(), func(t *testing.T) {
			b, p := startStateless(t, pool.Options{Era: era, Max: 1}, bridge.Options{})
			ctxL, cancelL := context.WithCancel(ctxT(t))
			defer cancelL()
			listen, listenErr := collectWith(ctxL, b.URL,
				`{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+noInputsMeta+`}}`,
				statelessHeaders("subscriptions/listen", ""))
			if ack := <-listen; !strings.Contains(ack, "notifications/subscriptions/acknowledged") {
				t.Fatalf("listen: %q", ack)
			}

			// A call without a log level is in flight on the only child
			// (its progress says so); a call with one arrives meanwhile.
			ctxW, cancelW := context.WithCancel(ctxT(t))
			defer cancelW()
			wait, waitErr := collect(ctxW, b.URL, logCall("w", "wait", "", ""), "wait")
			if first := <-wait; !strings.Contains(first, "notifications/progress") {
				t.Fatalf("wait: %q", first)
			}
			logged, loggedErr := collect(ctxT(t), b.URL, logCall("a", "log", "for-a", "debug"), "log")
			// It waits for a child of its own; ending the other call
			// (closing its stream) frees the child.
			if err := p.Await(ctxT(t), func(s pool.Stats) bool { return s.Waiting == 1 }); err != nil {
				t.Fatalf("the call with a log level did not wait for the busy child: %v (%+v)", err, p.Stats())
			}
			cancelW()
			for line := range wait {
				t.Errorf("the call without a log level got %q", line)
			}
			<-waitErr
			var got []string
			for line := range logged {
				got = append(got, line)
			}
			if err := <-loggedErr; err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || !strings.Contains(got[0], `"notifications/message"`) || !strings.Contains(got[0], "for-a") || !strings.Contains(got[1], `"logged"`) {
				t.Fatalf("the call with a log level got %q", got)
			}

			// Several at once, with and without log levels: each message
			// reaches the call that caused it, and only calls that asked.
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for i := range 6 {
				level := "info"
				if i%3 == 2 {
					level = ""
				}
				id := fmt.Sprintf("c%d", i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					lines := make(chan string, 16)
					done := make(chan error, 1)
					go func() {
						done <- postLines(ctxT(t), b.URL, logCall(id, "log", "text-"+id, level), statelessHeaders("tools/call", "log"), lines)
					}()
					var got []string
					for l := range lines {
						got = append(got, l)
					}
					if err := <-done; err != nil {
						errs <- err
						return
					}
					want := 2
					if level == "" {
						want = 1
					}
					if len(got) != want || !strings.Contains(got[len(got)-1], `"logged"`) ||
						(level != "" && !strings.Contains(got[0], `"text-`+id+`"`)) {
						errs <- fmt.Errorf("call %s (log level %q) got %q", id, level, got)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			cancelL()
			for line := range listen {
				t.Errorf("the subscription got %q", line)
			}
			<-listenErr
			if err := p.WaitIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if s := p.Stats(); s.Children > 1 {
				t.Fatalf("%d children, --pool-max 1", s.Children)
			}
		})
	}
}

// An unknown log level is refused: "If the io.modelcontextprotocol/logLevel
// value carried in a request's _meta is not a recognized log level, the
// server SHOULD reject that request with ... -32602 (Invalid params)"
// (server/utilities/logging).
func TestStatelessLogLevelInvalid(t *testing.T) {
	b, _ := startStateless(t, pool.Options{Era: pool.EraLegacy}, bridge.Options{})
	for _, level := range []string{`"verbose"`, `3`, `""`} {
		body := strings.Replace(logCall("x", "log", "t", "debug"), `"debug"`, level, 1)
		status, a := postAnswer(t, b.URL, body, statelessHeaders("tools/call", "log"))
		if status != http.StatusBadRequest || a.Error == nil || a.Error.Code != -32602 || !strings.Contains(a.Error.Message, "logLevel") {
			t.Errorf("log level %s: %d %+v", level, status, a.Error)
		}
	}
}

package bridge_test

// The official Go SDK client reconnecting by itself: cut streams, its
// default backoff, polling, and the revisions without resumption.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// TestResumeSDKClientRecoversCutStreams: the official Go SDK client, whose
// StreamableClientTransport reconnects with Last-Event-ID by itself,
// recovers streams cut at random bytes through the bridge with nothing
// lost: every progress notification once and in order, every answer, and
// a sampling round trip in the middle of a cut stream.
func TestResumeSDKClientRecoversCutStreams(t *testing.T) {
	seed := rsSeed(t)
	// SSEPollAfter makes the priming event carry "retry: 1": the SDK then
	// reconnects after 1 ms instead of its default backoff of 1 s or more.
	// An hour never closes a connection within the test.
	b := startBridge(t, bridgeConfig{
		bridge:  bridge.Options{SSEPollAfter: time.Hour, SSERetry: time.Millisecond},
		session: session.Options{LogMaxEvents: 10000}, // eviction is not under test here
	})
	rec := newRsRecorder(seed, 80, 3000)
	prog := newRsProgress()
	cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{
		ProgressNotificationHandler: prog.handler,
		CreateMessageHandler:        rsSampler,
	}, "")
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %s, want 2025-11-25", v)
	}
	ctx := ctxT(t)
	call := func(k, n int) {
		params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": n}}
		params.SetProgressToken("tok-" + strconv.Itoa(k))
		res, err := cs.CallTool(ctx, params)
		if got := rsToolText(t, res, err); got != "sent "+strconv.Itoa(n) {
			t.Errorf("call %d answered %q", k, got)
		}
	}
	call(0, 300)
	var wg sync.WaitGroup
	for k := 1; k <= 4; k++ {
		wg.Go(func() { call(k, 150) })
	}
	wg.Go(func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "cut"}})
		if got := rsToolText(t, res, err); got != "sampled: re:cut" {
			t.Errorf("sample answered %q", got)
		}
	})
	wg.Wait()
	call(5, 300)
	checkAll := func() {
		prog.check(t, ctx, "tok-0", 300)
		for k := 1; k <= 4; k++ {
			prog.check(t, ctx, "tok-"+strconv.Itoa(k), 150)
		}
		prog.check(t, ctx, "tok-5", 300)
	}
	checkAll()
	// The resumptions answered before the session ends. Closing it races
	// the SDK's own resumption of its GET stream, which the DELETE ends:
	// that one may get the 404 the spec requires once a session has ended
	// ("the server MUST respond to requests containing that session ID
	// with HTTP 404 Not Found").
	before := rec.exchanges()
	if err := cs.Close(); err != nil {
		t.Errorf("closing the SDK session: %v", err)
	}
	checkAll() // nothing came twice, late

	rec.mu.Lock()
	cuts := rec.cuts
	rec.mu.Unlock()
	resumes := 0
	for _, x := range before {
		if x.method == http.MethodGet && x.lastEventID != "" {
			if x.status != http.StatusOK {
				t.Errorf("a resume after %s was answered %d: %s", x.lastEventID, x.status, x.bodyString())
			}
			resumes++
		}
	}
	if cuts < 5 || resumes == 0 {
		t.Errorf("%d cuts, %d resumptions: the SDK's reconnection was not exercised (seed %d)", cuts, resumes, seed)
	}
	t.Logf("%d cuts, %d resumptions with Last-Event-ID", cuts, resumes)
}

// TestResumeSDKClientDefaultBackoff: without a retry field (no polling),
// the SDK waits its own backoff and still recovers a cut stream.
func TestResumeSDKClientDefaultBackoff(t *testing.T) {
	seed := rsSeed(t)
	b := startBridge(t, bridgeConfig{})
	rec := newRsRecorder(seed, 0, 2000)
	prog := newRsProgress()
	cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{ProgressNotificationHandler: prog.handler}, "")
	// Cut the next SSE response: the call's POST stream (about 25 kB),
	// within 2 kB after its priming event.
	rec.mu.Lock()
	rec.cutsLeft = 1
	rec.mu.Unlock()
	ctx := ctxT(t)
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 200}}
	params.SetProgressToken("tok")
	if got := rsCall(t, ctx, cs, params); got != "sent 200" {
		t.Fatalf("answered %q", got)
	}
	prog.check(t, ctx, "tok", 200)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.cuts != 1 {
		t.Fatalf("%d cuts, want 1 (seed %d)", rec.cuts, seed)
	}
	for _, x := range rec.log {
		if x.method == http.MethodGet && x.lastEventID != "" && x.status == http.StatusOK {
			return // the SDK resumed
		}
	}
	t.Fatal("the SDK recovered without a GET with Last-Event-ID")
}

// TestResumeSDKPolling: with SSEPollAfter the bridge closes connections of
// 2025-11-25 sessions after the interval, having sent retry; the SDK
// client resumes with Last-Event-ID and the answer arrives on a resumed
// connection.
func TestResumeSDKPolling(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{SSEPollAfter: 20 * time.Millisecond, SSERetry: time.Millisecond}})
	rec := newRsRecorder(1, 0, 1)
	ctx := ctxT(t)
	var callStream string
	cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			// Hold the sampling answer until the call's stream was closed by
			// the bridge and resumed by the client at least twice.
			var post *rsExchange
			if err := rec.waitFor(ctx, func(log []*rsExchange) bool {
				for _, x := range log {
					if x.method == http.MethodPost && strings.Contains(x.reqBody, `"tools/call"`) && x.sse {
						post = x
						return true
					}
				}
				return false
			}); err != nil {
				return nil, err
			}
			evs, _ := rsReadAll(strings.NewReader(post.bodyString()))
			if len(evs) == 0 {
				return nil, fmt.Errorf("the call's stream has no priming event")
			}
			s, _, _ := bridge.ParseEventID(evs[0].ID)
			callStream = strconv.FormatInt(s, 10)
			if err := rec.waitFor(ctx, func(log []*rsExchange) bool {
				resumes := 0
				for _, x := range log {
					if x.method == http.MethodGet && strings.HasPrefix(x.lastEventID, callStream+"_") && x.status == http.StatusOK {
						resumes++
					}
				}
				return resumes >= 2
			}); err != nil {
				return nil, err
			}
			return rsSampler(ctx, req)
		},
	}, "")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "poll"}})
	if got := rsToolText(t, res, err); got != "sampled: re:poll" {
		t.Fatalf("sample answered %q", got)
	}
	// The transcript: the POST was primed with retry, closed by the bridge
	// with a retry event and without the answer; the answer came on a GET
	// that resumed the same stream.
	var answeredOn *rsExchange
	for _, x := range rec.exchanges() {
		evs, _ := rsReadAll(strings.NewReader(x.bodyString()))
		if x.method == http.MethodPost && strings.Contains(x.reqBody, `"tools/call"`) {
			if len(evs) < 2 || evs[0].Retry != "1" || !evs[0].priming() || evs[len(evs)-1].Retry != "1" || evs[len(evs)-1].HasID {
				t.Errorf("the call's POST stream: %q, want priming with retry: 1 ... closing retry: 1", x.bodyString())
			}
		}
		for _, e := range evs {
			if m, err := rsParse(e.Data); err == nil && m.text() == "sampled: re:poll" {
				if answeredOn != nil {
					t.Errorf("the answer was delivered twice")
				}
				answeredOn = x
			}
		}
	}
	if answeredOn == nil || answeredOn.method != http.MethodGet || !strings.HasPrefix(answeredOn.lastEventID, callStream+"_") {
		t.Fatalf("the answer did not come on a GET resuming stream %s: %+v", callStream, answeredOn)
	}
}

// TestResumeOlderRevisions: sessions of 2025-03-26 and 2025-06-18 get no
// priming event and no retry field (their clients may not expect an event
// without data) and are never polled; everything works. 2025-11-25 gets
// both, for contrast. Every event still carries an ID.
func TestResumeOlderRevisions(t *testing.T) {
	for _, version := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			b := startBridge(t, bridgeConfig{bridge: bridge.Options{SSEPollAfter: time.Hour, SSERetry: time.Millisecond}})
			rec := newRsRecorder(1, 0, 1)
			prog := newRsProgress()
			logs := make(chan string, 10)
			cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{
				ProgressNotificationHandler: prog.handler,
				CreateMessageHandler:        rsSampler,
				LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
					logs <- fmt.Sprint(req.Params.Data)
				},
			}, version)
			if v := cs.InitializeResult().ProtocolVersion; v != version {
				t.Fatalf("negotiated %s, want %s", v, version)
			}
			ctx := ctxT(t)
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 100}}
			params.SetProgressToken("p")
			if got := rsCall(t, ctx, cs, params); got != "sent 100" {
				t.Fatalf("progress answered %q", got)
			}
			prog.check(t, ctx, "p", 100)
			if got := rsCall(t, ctx, cs, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "old"}}); got != "sampled: re:old" {
				t.Fatalf("sample answered %q", got)
			}
			if got := rsCall(t, ctx, cs, &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"text": "hi"}}); got != "logged" {
				t.Fatalf("log answered %q", got)
			}
			if got := <-logs; got != "hi" {
				t.Fatalf("log message %q", got)
			}
			primed := version >= "2025-11-25"
			sse := 0
			for _, x := range rec.exchanges() {
				if !x.sse {
					continue
				}
				if x.method == http.MethodGet && x.lastEventID != "" {
					t.Errorf("the client resumed after %s: a connection was closed early", x.lastEventID)
				}
				evs, err := rsReadAll(strings.NewReader(x.bodyString()))
				if x.method == http.MethodGet {
					// The standalone stream is still open: what the client
					// read of it so far is its priming event in a 2025-11-25
					// session, or nothing.
					if len(evs) > 1 || (len(evs) == 1 && !(primed && evs[0].priming())) {
						t.Errorf("%s session, standalone stream so far: %q", version, x.bodyString())
					}
					continue
				}
				sse++
				if err != nil || len(evs) == 0 {
					t.Fatalf("SSE body %q: %v", x.bodyString(), err)
				}
				for i, e := range evs {
					if !e.HasID {
						t.Errorf("event without ID: %+v", e)
					}
					if _, _, err := bridge.ParseEventID(e.ID); err != nil {
						t.Errorf("event ID %q: %v", e.ID, err)
					}
					if e.priming() != (primed && i == 0) || (e.Retry != "") != (primed && i == 0) {
						t.Errorf("%s session, event %d of a POST stream: %+v (priming and retry expected: %v)", version, i, e, primed && i == 0)
					}
				}
			}
			if sse < 4 {
				t.Fatalf("only %d SSE responses recorded", sse)
			}
		})
	}
}

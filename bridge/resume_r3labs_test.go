package bridge_test

// github.com/r3labs/sse/v2, an SSE client written independently of MCP,
// resuming through connections cut at event boundaries.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// TestResumeR3labsClient: github.com/r3labs/sse/v2, an SSE client written
// with no knowledge of MCP, resumes a POST stream by GET with
// Last-Event-ID and keeps resuming through cut connections (cut at event
// boundaries: that client treats the bytes before a cut as a whole event)
// until the stream ends with the answer, with nothing lost or repeated.
func TestResumeR3labsClient(t *testing.T) {
	seed := rsSeed(t)
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	const n = 300
	resp := c.call(ctx, 11, "progress", map[string]any{"n": n}, "r3")
	prime, err := rsNext(bufio.NewReader(resp.Body))
	resp.Body.Close() // the client leaves after the priming event
	if err != nil || !prime.priming() {
		t.Fatal(prime, err)
	}

	cutter := &rsEventCutter{base: &http.Transport{}, rng: rand.New(rand.NewPCG(seed, 3))}
	t.Cleanup(cutter.base.CloseIdleConnections)
	client := sse.NewClient(b.URL)
	client.Connection = &http.Client{Transport: cutter}
	client.Headers["Mcp-Session-Id"] = c.sid
	client.Headers["MCP-Protocol-Version"] = c.version
	client.LastEventID.Store([]byte(prime.ID))
	client.ReconnectStrategy = backoff.WithContext(backoff.NewConstantBackOff(time.Millisecond), ctx)
	// A cut can fall right after the answer, the stream's last event;
	// resuming after it, the bridge answers 204 (the stream is finished,
	// nothing follows), which ends the subscription like the end of the
	// stream would. Any other status is an error.
	errFinished := errors.New("204: stream finished")
	client.ResponseValidator = func(_ *sse.Client, resp *http.Response) error {
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			return backoff.Permanent(errFinished)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return backoff.Permanent(fmt.Errorf("%s: %s", resp.Status, body))
		}
		return nil
	}
	var ids, data []string
	err = client.SubscribeWithContext(ctx, "", func(ev *sse.Event) {
		if len(ev.Data) == 0 {
			return // a priming event
		}
		ids = append(ids, string(ev.ID))
		data = append(data, string(ev.Data))
	})
	if err != nil && !errors.Is(err, errFinished) {
		t.Fatalf("r3labs client: %v (seed %d)", err, seed)
	}
	stream, _, _ := bridge.ParseEventID(prime.ID)
	if len(ids) != n+1 {
		t.Fatalf("r3labs client got %d events, want %d (seed %d)", len(ids), n+1, seed)
	}
	for i := range n + 1 {
		if ids[i] != bridge.EventID(stream, uint64(i+1)) {
			t.Fatalf("event %d has ID %q (seed %d)", i, ids[i], seed)
		}
		m, err := rsParse(data[i])
		switch {
		case err != nil:
			t.Fatalf("event %s: %q", ids[i], data[i])
		case i < n && m.Params.Progress != float64(i+1):
			t.Fatalf("event %s: %s, want progress %d", ids[i], data[i], i+1)
		case i == n && m.text() != fmt.Sprintf("sent %d", n):
			t.Fatalf("last event %s", data[i])
		}
	}
	cutter.mu.Lock()
	defer cutter.mu.Unlock()
	if cutter.cuts < 3 {
		t.Fatalf("only %d cuts (seed %d)", cutter.cuts, seed)
	}
	for i, last := range cutter.lastIDs {
		if last == "" {
			t.Fatalf("connection %d of the r3labs client had no Last-Event-ID", i)
		}
	}
	t.Logf("r3labs client: %d connections, %d cuts", len(cutter.lastIDs), cutter.cuts)
}

// rsEventCutter cuts each SSE response after a random number (1 to 40) of
// whole events, with a read error, so that the client reconnects.
type rsEventCutter struct {
	base *http.Transport
	mu   sync.Mutex
	rng  *rand.Rand
	cuts int
	// lastIDs are the Last-Event-ID headers the client sent, per connection.
	lastIDs []string
}

func (c *rsEventCutter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.lastIDs = append(c.lastIDs, req.Header.Get("Last-Event-ID"))
	k := 1 + c.rng.IntN(40)
	c.mu.Unlock()
	resp, err := c.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = &rsBoundaryCut{rc: resp.Body, events: k + 1, onCut: func() {
		c.mu.Lock()
		c.cuts++
		c.mu.Unlock()
	}}
	return resp, nil
}

// rsBoundaryCut ends a body with an error after a number of events.
type rsBoundaryCut struct {
	rc     io.ReadCloser
	events int // still to pass, counting the priming event
	prev   byte
	onCut  func()
	cut    bool
}

func (b *rsBoundaryCut) Read(p []byte) (int, error) {
	if b.cut || b.events == 0 {
		if !b.cut {
			b.cut = true
			b.rc.Close()
			b.onCut()
		}
		return 0, errRsCut
	}
	n, err := b.rc.Read(p)
	for i := 0; i < n; i++ {
		if p[i] == '\n' && b.prev == '\n' {
			b.events--
			if b.events == 0 {
				b.prev = 0
				return i + 1, nil
			}
		}
		b.prev = p[i]
	}
	return n, err
}

func (b *rsBoundaryCut) Close() error { return b.rc.Close() }

package bridge_test

// End-to-end benchmark of resumption: a GET with Last-Event-ID
// that replays 10,000 events over a real TCP connection, from the request to
// the end of the stream (target: at most 20 ms).
//
//	go test -run '^$' -bench ResumeReplay10k -benchmem ./bridge/

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/session"
)

func BenchmarkResumeReplay10k(b *testing.B) {
	const events = 10000 // 9,999 progress notifications and the answer
	br := startBridge(b, bridgeConfig{session: session.Options{LogMaxEvents: 2 * events, LogMaxBytes: 64 << 20}})
	c := rsOpen(b, br.URL, "2025-11-25")
	ctx := ctxT(b)
	all := c.drain(c.call(ctx, 1, "progress", map[string]any{"n": events - 1}, "bench"))
	if len(all) != events+1 {
		b.Fatalf("the call's stream has %d events, want %d and the priming event", len(all), events)
	}
	from := all[0].ID // the priming position: replay everything
	sep := []byte("\n\n")
	var size int64
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.get(ctx, from)
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET with Last-Event-ID %s: %s", from, resp.Status)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if n := bytes.Count(body, sep); n != events+1 {
			b.Fatalf("the replay carried %d events, want %d and the priming event", n, events)
		}
		size = int64(len(body))
	}
	b.SetBytes(size)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/replay")
}

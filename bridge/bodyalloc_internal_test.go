package bridge

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/session"
)

// TestBodyReadAllocatesWhatItCounts: a body read into a
// buffer that doubled as bytes arrived left its earlier arrays to the
// collector, as much again as MaxBodyBytesInFlight counted, so the budget
// bounded half of what bodies took (RSS 600 MB under 256 MiB). Reading a
// 4 MiB body now allocates the body and little more.
func TestBodyReadAllocatesWhatItCounts(t *testing.T) {
	if raceEnabled {
		t.Skip("counts allocated bytes: not under the race detector")
	}
	logger := slog.New(slog.DiscardHandler)
	reg := session.NewRegistry(&session.Options{Launcher: memLauncher{}, Logger: logger})
	defer reg.Shutdown(context.Background())
	h := NewHandler(reg, &Options{Logger: logger})
	const size = 4 << 20
	body := bytes.Repeat([]byte{'x'}, size)
	read := func() {
		r := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
		r.ContentLength = size
		got, err := h.readBody(httptest.NewRecorder(), r)
		if err != nil || len(got) != size {
			t.Fatalf("readBody: %d bytes, %v", len(got), err)
		}
	}
	// No collection during the measure: what is allocated stays counted,
	// and what was pooled stays pooled.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	read() // warms what is reused
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	read()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > size+size/8 {
		t.Fatalf("reading a body of %d bytes allocated %d bytes, want at most %d", size, got, size+size/8)
	}
}

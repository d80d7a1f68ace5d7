package audit_test

import (
	"io"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/audit"
)

// BenchmarkWriteLine: one record written, as a request's line is when no
// other write is under way (by the request itself).
func BenchmarkWriteLine(b *testing.B) {
	l := audit.New(io.Discard, &audit.Options{Logger: quiet})
	defer l.Close()
	b.ReportAllocs()
	for b.Loop() {
		l.Alert("session", nil, "tool", "echo", "p")
	}
}

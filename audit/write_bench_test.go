package audit_test

import (
	"io"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/audit"
)

// BenchmarkWriteLine: one record written and waited for, as a request's
// line is (on the log's goroutine, not the request's).
func BenchmarkWriteLine(b *testing.B) {
	l := audit.New(io.Discard, &audit.Options{Logger: quiet})
	defer l.Close()
	b.ReportAllocs()
	for b.Loop() {
		l.Alert("session", nil, "tool", "echo", "p")
	}
}

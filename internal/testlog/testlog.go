// Package testlog holds what tests read a log with while the code under
// test writes it from its own goroutines.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a log destination (a slog handler's writer) that is safe for
// the writes of the code under test and the reads of the test at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

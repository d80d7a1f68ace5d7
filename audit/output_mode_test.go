//go:build unix

package audit

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// How requests write to each kind of file: a regular file directly; a
// FIFO or pipe the process opened (non-blocking, polled) with writes tried
// without blocking, so that a stalled reader holds no request.
func TestFileModes(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if m, _ := fileMode(f); m != modeDirect {
		t.Errorf("a regular file: mode %d, want modeDirect", m)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if m, rc := fileMode(w); m != modeNonblock || rc == nil {
		t.Errorf("a pipe the process made: mode %d, want modeNonblock", m)
	}
	fifo := filepath.Join(dir, "audit.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	rd, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	wr, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	if m, _ := fileMode(wr); m != modeNonblock {
		t.Errorf("a FIFO: mode %d, want modeNonblock", m)
	}
}

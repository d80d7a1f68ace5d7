package bridge

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/session"
)

// An event is framed the same whether its data is copied into the frame or
// written between its framing (above frameCopyMax).
func TestWriteEvent(t *testing.T) {
	for _, n := range []int{0, 1, frameCopyMax, frameCopyMax + 1, 3 * frameCopyMax} {
		data := bytes.Repeat([]byte{'x'}, n)
		var out bytes.Buffer
		if err := writeEvent(&out, 12, 345, data); err != nil {
			t.Fatal(err)
		}
		if want := "id: 12_345\ndata: " + string(data) + "\n\n"; out.String() != want {
			t.Errorf("%d bytes of data framed as %q…, want %q…", n, trunc(out.String()), trunc(want))
		}
	}
}

func TestWritePrime(t *testing.T) {
	l := session.NewEventLog(0, 0)
	r, err := l.Attach(l.NewStream(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for retry, want := range map[int64]string{-1: "id: 1_0\ndata: \n\n", 0: "id: 1_0\nretry: 0\ndata: \n\n", 1500: "id: 1_0\nretry: 1500\ndata: \n\n"} {
		var out bytes.Buffer
		if err := writePrime(&out, r, retry); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("writePrime(retry %d) = %q, want %q", retry, out.String(), want)
		}
	}
}

// A failed write ends the event with the writer's error.
func TestWriteEventError(t *testing.T) {
	for _, n := range []int{10, 2 * frameCopyMax} {
		if err := writeEvent(failWriter{}, 1, 1, make([]byte, n)); !errors.Is(err, errWrite) {
			t.Errorf("writeEvent of %d bytes to a failing writer = %v, want %v", n, err, errWrite)
		}
	}
}

var errWrite = errors.New("connection reset")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

func trunc(s string) string {
	if len(s) > 40 {
		return s[:20] + strings.Repeat(".", 3) + s[len(s)-20:]
	}
	return s
}

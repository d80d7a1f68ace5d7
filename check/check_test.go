package check

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// The stdout watch classifies lines as a whole-input split would, however
// the input is cut into reads.
func FuzzStdoutWatch(f *testing.F) {
	f.Add([]byte("Usage: x\n{\"jsonrpc\":\"2.0\"}\n  \nbanner"), uint8(3))
	f.Add([]byte("[1]\n\t{\n"+strings.Repeat("x", 300)+"\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		w := &stdoutWatch{r: &chunkReader{data: data, n: int(chunk) + 1}, start: time.Now().Add(-time.Second)}
		if _, err := io.Copy(io.Discard, w); err != nil {
			t.Fatal(err)
		}
		wantJunk, wantJSON, lastJunk := 0, false, false
		lines := bytes.Split(data, []byte("\n"))
		for i, l := range lines {
			t := bytes.TrimSpace(l)
			if len(t) == 0 {
				continue
			}
			switch {
			case t[0] == '{' || t[0] == '[':
				wantJSON = true
			case i < len(lines)-1:
				wantJunk++
			default:
				lastJunk = true // a last line without its newline may not be over yet
			}
		}
		junk, samples := w.junk()
		if (junk != wantJunk && !(lastJunk && junk == wantJunk+1)) || (w.firstJSON() != 0) != wantJSON || len(samples) > shownLines {
			t.Fatalf("%q: %d junk lines, JSON %v; want %d, %v", data, junk, w.firstJSON() != 0, wantJunk, wantJSON)
		}
	})
}

// chunkReader reads data n bytes at a time.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[n:]
	return n, nil
}

package sandbox

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"
)

// logEntry is one record captured by logRecorder, with the attributes of
// Logger.With flattened in.
type logEntry struct {
	msg   string
	attrs map[string]string
}

// logRecorder is a slog.Handler that keeps every record, for tests, and
// lets a test wait for one.
type logRecorder struct {
	mu      *sync.Mutex
	entries *[]logEntry
	changed *chan struct{} // closed and replaced at each record
	attrs   []slog.Attr
}

func newLogRecorder() *logRecorder {
	ch := make(chan struct{})
	return &logRecorder{mu: new(sync.Mutex), entries: new([]logEntry), changed: &ch}
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	e := logEntry{msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		e.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		e.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.entries = append(*h.entries, e)
	close(*h.changed)
	*h.changed = make(chan struct{})
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(slices.Clone(h.attrs), attrs...)
	return &h2
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// stderrLines returns the "line" attribute of every logged stderr line.
func (h *logRecorder) stderrLines() []string {
	var out []string
	for _, e := range h.all() {
		if e.msg == "server stderr" {
			out = append(out, e.attrs["line"])
		}
	}
	return out
}

func (h *logRecorder) all() []logEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.entries)
}

// find returns the entries logged with message msg.
func (h *logRecorder) find(msg string) []logEntry {
	var out []logEntry
	for _, e := range h.all() {
		if e.msg == msg {
			out = append(out, e)
		}
	}
	return out
}

// wait blocks until n entries with message msg were logged.
func (h *logRecorder) wait(t *testing.T, msg string, n int) []logEntry {
	t.Helper()
	guard := time.After(30 * time.Second) // a guard against a hang, not a synchronization
	for {
		h.mu.Lock()
		changed := *h.changed
		h.mu.Unlock()
		if got := h.find(msg); len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-guard:
			t.Fatalf("%q was not logged %d times within 30s", msg, n)
		}
	}
}

// chunkReader returns its data in reads of the given sizes, cycling.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := r.sizes[r.i%len(r.sizes)]
	r.i++
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func TestStderrLogger(t *testing.T) {
	const m = truncatedMarker
	tests := []struct {
		name    string
		in      string
		maxLine int
		tail    int
		logged  []string // every logged line, in order
		kept    []string // the tail, oldest first; nil means same as logged
	}{
		{name: "lines", in: "a\nbb\nccc\n", logged: []string{"a", "bb", "ccc"}},
		{name: "last line without newline", in: "a\nlast", logged: []string{"a", "last"}},
		{name: "CRLF", in: "a\r\nb\r\n", logged: []string{"a", "b"}},
		{name: "only one CR dropped", in: "a\r\r\n", logged: []string{"a\r"}},
		{name: "CR inside a line kept", in: "a\rb\n", logged: []string{"a\rb"}},
		{name: "empty lines skipped", in: "\n\r\na\n\n", logged: []string{"a"}},
		{name: "nothing", in: "", logged: nil},
		{name: "cut at the bound", in: "abcdefgh\nxy\n", maxLine: 4, logged: []string{"abcd" + m, "xy"}},
		{name: "exactly the bound", in: "abcd\nabcde\n", maxLine: 4, logged: []string{"abcd", "abcd" + m}},
		{name: "exactly the bound with CRLF", in: "abcd\r\n", maxLine: 4, logged: []string{"abcd"}},
		{name: "one more than the bound with CRLF", in: "abcde\r\n", maxLine: 4, logged: []string{"abcd" + m}},
		{name: "cut line without newline at EOF", in: "abcdefgh", maxLine: 4, logged: []string{"abcd" + m}},
		{name: "cut keeps whole runes", in: "abc€\n", maxLine: 4, logged: []string{"abc" + m}},
		{name: "cut after a whole rune", in: "a€b\n", maxLine: 4, logged: []string{"a€" + m}},
		{name: "cut inside the first rune", in: "€€\n", maxLine: 2, logged: []string{m}},
		{
			name: "tail keeps the last lines, oldest first",
			in:   "1\n2\n3\n4\n5\n", tail: 3,
			logged: []string{"1", "2", "3", "4", "5"}, kept: []string{"3", "4", "5"},
		},
		{
			name: "tail exactly full",
			in:   "1\n2\n3\n", tail: 3,
			logged: []string{"1", "2", "3"},
		},
		{
			name: "tail wraps twice",
			in:   "1\n2\n3\n4\n5\n6\n7\n", tail: 3,
			logged: []string{"1", "2", "3", "4", "5", "6", "7"}, kept: []string{"5", "6", "7"},
		},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"chunks":   func(s string) io.Reader { return &chunkReader{data: []byte(s), sizes: []int{3, 1, 2}} },
		// The last bytes arrive together with io.EOF.
		"data with EOF": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
	}
	for _, tt := range tests {
		for rname, newReader := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				rec := newLogRecorder()
				s := newStderrLogger(slog.New(rec), tt.maxLine, tt.tail)
				s.run(newReader(tt.in))
				if got := rec.stderrLines(); !slices.Equal(got, tt.logged) {
					t.Errorf("logged %q, want %q", got, tt.logged)
				}
				kept := tt.kept
				if kept == nil {
					kept = tt.logged
				}
				if got := s.lines(); !slices.Equal(got, kept) {
					t.Errorf("kept %q, want %q", got, kept)
				}
			})
		}
	}
}

func TestStderrLoggerDefaults(t *testing.T) {
	s := newStderrLogger(nil, 0, -1)
	if s.logger == nil || s.maxLine != DefaultStderrLineBytes || s.max != DefaultStderrTailLines {
		t.Fatalf("defaults: logger %v, maxLine %d, tail %d", s.logger, s.maxLine, s.max)
	}
}

// A read error other than EOF ends the reader like EOF: the partial line is
// still emitted.
func TestStderrLoggerReadError(t *testing.T) {
	rec := newLogRecorder()
	s := newStderrLogger(slog.New(rec), 0, 0)
	s.run(io.MultiReader(strings.NewReader("a\npartial"), iotest.ErrReader(io.ErrUnexpectedEOF)))
	if got, want := s.lines(), []string{"a", "partial"}; !slices.Equal(got, want) {
		t.Errorf("kept %q, want %q", got, want)
	}
}

func FuzzStderrLogger(f *testing.F) {
	f.Add([]byte("a\nbb\r\nccc"), uint16(2), uint8(2), uint8(1))
	f.Add([]byte("€€€€\n\n\r\n\rx"), uint16(5), uint8(1), uint8(3))
	f.Add(bytes.Repeat([]byte("x"), 100000), uint16(7), uint8(0), uint8(200))
	f.Add([]byte("\xff\xfe\n\xe2\x82"), uint16(1), uint8(4), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, maxLine uint16, tail uint8, chunk uint8) {
		rec := newLogRecorder()
		s := newStderrLogger(slog.New(rec), int(maxLine), int(tail))
		s.run(&chunkReader{data: slices.Clone(in), sizes: []int{int(chunk) + 1, 1, int(chunk)*7 + 1}})

		logged := rec.stderrLines()
		// What the input's lines should give: unchanged when they fit,
		// else a prefix cut at most one rune before the bound, plus the marker.
		var want []string
		for _, line := range strings.Split(string(in), "\n") {
			// Empty lines (also the "" after a final newline) are skipped.
			line = strings.TrimSuffix(line, "\r")
			if line != "" {
				want = append(want, line)
			}
		}
		if len(logged) != len(want) {
			t.Fatalf("logged %d lines %q, want %d", len(logged), logged, len(want))
		}
		for i, got := range logged {
			if len(got) > s.maxLine+len(truncatedMarker) {
				t.Errorf("line %d is %d bytes, bound %d+%d", i, len(got), s.maxLine, len(truncatedMarker))
			}
			if strings.Contains(got, "\n") {
				t.Errorf("line %d contains a newline: %q", i, got)
			}
			if len(want[i]) <= s.maxLine {
				if got != want[i] {
					t.Errorf("line %d = %q, want %q", i, got, want[i])
				}
				continue
			}
			prefix, ok := strings.CutSuffix(got, truncatedMarker)
			if !ok || !strings.HasPrefix(want[i], prefix) || len(prefix) < s.maxLine-utf8.UTFMax+1 {
				t.Errorf("line %d = %q, want a prefix of %q of at least %d bytes and the marker", i, got, want[i], s.maxLine-utf8.UTFMax+1)
			}
		}
		kept := s.lines()
		if len(kept) > s.max {
			t.Fatalf("kept %d lines, bound %d", len(kept), s.max)
		}
		if wantKept := logged[len(logged)-len(kept):]; !slices.Equal(kept, wantKept) || len(kept) != min(len(logged), s.max) {
			t.Errorf("kept %q, want the last %d of %q", kept, s.max, logged)
		}
	})
}

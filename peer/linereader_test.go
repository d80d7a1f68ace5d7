package peer

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkedReader returns its input in reads of the given sizes, cycling.
type chunkedReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data))
	if len(c.sizes) > 0 {
		n = min(n, max(1, c.sizes[c.i%len(c.sizes)]))
		c.i++
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// referenceLines is what a line reader must return for input: the lines
// split at '\n', a last one without newline included; a line longer than
// limit comes as a *lineTooLong with its size and ends, and reading goes
// on after it.
func referenceLines(input []byte, limit int) (lines [][]byte, long []*lineTooLong) {
	for len(input) > 0 {
		line, rest, _ := bytes.Cut(input, []byte("\n"))
		if len(line) > limit {
			long = append(long, tooLong(line))
			lines = append(lines, nil)
		} else {
			lines = append(lines, line)
		}
		input = rest
	}
	return lines, long
}

// readAllLines reads to the end; a line over the limit is a nil line, its
// error in long.
func readAllLines(t testing.TB, lr *lineReader) (lines [][]byte, long []*lineTooLong, err error) {
	for {
		line, err := lr.next()
		var tl *lineTooLong
		if errors.As(err, &tl) {
			if !errors.Is(err, errLineTooLong) {
				t.Fatalf("a lineTooLong is not errLineTooLong")
			}
			long = append(long, tl)
			lines = append(lines, nil)
			continue
		}
		if err != nil {
			return lines, long, err
		}
		lines = append(lines, line)
	}
}

func checkLines(t testing.TB, input []byte, limit int, lr *lineReader) {
	t.Helper()
	want, wantLong := referenceLines(input, limit)
	got, gotLong, err := readAllLines(t, lr)
	if err != io.EOF {
		t.Fatalf("err = %v, want io.EOF", err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
			t.Fatalf("line %d: got %d bytes %.40q, want %d bytes %.40q", i, len(got[i]), got[i], len(want[i]), want[i])
		}
	}
	if len(gotLong) != len(wantLong) {
		t.Fatalf("got %d lines over the limit, want %d", len(gotLong), len(wantLong))
	}
	for i, w := range wantLong {
		g := gotLong[i]
		if g.size != w.size || !bytes.Equal(g.head, w.head) || !bytes.Equal(g.tail, w.tail) {
			t.Fatalf("line over the limit %d: size %d head %.20q tail %.20q, want %d %.20q %.20q", i, g.size, g.head, g.tail, w.size, w.head, w.tail)
		}
	}
}

func TestLineReader(t *testing.T) {
	long := func(n int, c byte) string { return strings.Repeat(string(c), n) }
	tests := []struct {
		name  string
		input string
		limit int
	}{
		{"empty", "", 100},
		{"lines", "a\nbb\n\nccc\n", 100},
		{"no final newline", "a\nbb", 100},
		{"buffer size exactly", long(4095, 'x') + "\n" + long(4096, 'y') + "\n" + long(4097, 'z') + "\nend\n", 1 << 20},
		{"long then many short", long(100_000, 'l') + "\n" + strings.Repeat("short line\n", 2000), 1 << 20},
		{"mapped segments", long(3<<20+17, 'm') + "\n" + long(70_000, 'n') + "\nlast", 8 << 20},
		{"long last line", "a\n" + long(200_000, 'e'), 1 << 20},
		{"limit exactly", long(5000, 'a') + "\n" + long(10, 'b') + "\n", 5000},
		{"over the limit, short", "ok\n" + long(101, 'a') + "\n", 100},
		{"over the limit, long", "ok\n" + long(2<<20, 'a') + "\nnever\n", 1 << 20},
		{"over the limit, last line", "ok\n" + long(5001, 'a'), 5000},
		{"over the limit, ends kept", "{\"id\":1," + long(3<<20, 'm') + ",\"id\":2}\nnext\n" + long(6000, 'q') + "\nlast", 5000},
		{"over the limit, twice", long(1<<20+1, 'a') + "\n" + long(1<<20+9, 'b') + "\nok\n", 1 << 20},
	}
	readers := map[string]func([]byte) io.Reader{
		"whole":      func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one byte":   func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"data+EOF":   func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
		"odd chunks": func(b []byte) io.Reader { return &chunkedReader{data: b, sizes: []int{7, 4093, 1, 65537, 300}} },
	}
	for _, tc := range tests {
		for rname, mk := range readers {
			if rname == "one byte" && len(tc.input) > 300_000 {
				continue
			}
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				checkLines(t, []byte(tc.input), tc.limit, newLineReader(mk([]byte(tc.input)), tc.limit))
			})
		}
	}
}

func TestLineReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("a\n"+strings.Repeat("b", 10_000)), iotest.ErrReader(boom))
	lr := newLineReader(r, 1<<20)
	if line, err := lr.next(); err != nil || string(line) != "a" {
		t.Fatalf("first line: %q, %v", line, err)
	}
	// A line cut short by a read error is not a line.
	if _, err := lr.next(); err != boom {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

// The buffer grown to keep what followed a long line shrinks back once
// drained, so an idle session holds only the usual buffer.
func TestLineReaderBufferShrinks(t *testing.T) {
	input := strings.Repeat("x", 10_000) + "\n" + strings.Repeat("short\n", 5000)
	lr := newLineReader(&chunkedReader{data: []byte(input), sizes: []int{1 << 20}}, 1<<20)
	if _, _, err := readAllLines(t, lr); err != io.EOF {
		t.Fatal(err)
	}
	if len(lr.buf) != lineReaderSize {
		t.Fatalf("buffer is %d bytes after draining, want %d", len(lr.buf), lineReaderSize)
	}
}

// FuzzLineReader checks the reader against bytes.Cut on any input, read
// in any chunking, with a buffer small enough that fuzzed input reaches
// the long-line path.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), uint64(1), uint8(4), uint16(100))
	f.Add([]byte("0123456789abcdef\nxy\n"), uint64(7), uint8(3), uint16(12))
	f.Add(bytes.Repeat([]byte("long line with no end "), 40), uint64(3), uint8(8), uint16(1000))
	f.Fuzz(func(t *testing.T, input []byte, seed uint64, size uint8, limit uint16) {
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		sizes := make([]int, 1+rng.IntN(8))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(2*int(size)+64)
		}
		orig := bytes.Clone(input)
		lr := newLineReaderSize(&chunkedReader{data: input, sizes: sizes}, int(limit), 1+int(size%32))
		checkLines(t, orig, int(limit), lr)
	})
}

package peer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"
)

var errLineTooLong = errors.New("line too long")

// keptBytes is how much of each end of a line over the limit next keeps:
// enough for the envelope's members before a large result (the Go SDK
// writes jsonrpc and id first) or after it (the TypeScript SDK writes them
// last).
const keptBytes = 4096

// lineTooLong is next's error for a line over the limit. The line was
// skipped, up to its newline, and the reader goes on with the next line
// (one oversized answer must not end the connection). Head and
// tail are its first and last bytes, at most keptBytes each, which say
// whose answer it was.
type lineTooLong struct {
	size       int // bytes of the line, without its newline
	head, tail []byte
}

func (e *lineTooLong) Error() string        { return fmt.Sprintf("line too long (%d bytes)", e.size) }
func (e *lineTooLong) Is(target error) bool { return target == errLineTooLong }

// tooLong is the lineTooLong of line, the whole of a line over the limit.
func tooLong(line []byte) *lineTooLong {
	return &lineTooLong{size: len(line), head: bytes.Clone(line[:min(len(line), keptBytes)]), tail: bytes.Clone(line[max(0, len(line)-keptBytes):])}
}

// lineReaderSize is the buffer every session holds for the server's
// output: lines that fit are copied out of it once, into memory of their
// own (the event log keeps them).
const lineReaderSize = 4096

// lineReader splits the server's output into lines. It replaces a
// bufio.Reader so that a line longer than its buffer costs neither a read
// per 4 KiB nor twice its size in memory: the rest of such a line is read
// straight into a spill area in large reads, then copied once into a slice
// of its exact size, and the spill area beyond its first segment lives
// outside the Go heap, so that it is returned to the kernel segment by
// segment as the copy proceeds instead of at the next garbage collection.
// A 10 MiB line then peaks at about 11 MiB of memory rather than 20
// (the goal: peak RSS at most 3 times a message's size).
type lineReader struct {
	r     io.Reader
	limit int    // longest line accepted, in bytes without the newline
	buf   []byte // unread input is buf[start:end]
	start int
	end   int
	seen  int   // buf[start:seen] is known to hold no newline
	size  int   // the buffer's usual size
	err   error // the error that ended r, once it has
}

func newLineReader(r io.Reader, limit int) *lineReader {
	return newLineReaderSize(r, limit, lineReaderSize)
}

// newLineReaderSize is newLineReader with a buffer of size bytes (tests
// make it small, to reach the long-line path with short input).
func newLineReaderSize(r io.Reader, limit, size int) *lineReader {
	return &lineReader{r: r, limit: limit, buf: make([]byte, size), size: size}
}

// next returns the next line, without its newline, in memory of its own.
// A last line without a newline is returned before io.EOF; a line cut
// short by any other read error is dropped, and the error returned.
func (l *lineReader) next() ([]byte, error) {
	for {
		if i := bytes.IndexByte(l.buf[l.seen:l.end], '\n'); i >= 0 {
			nl := l.seen + i
			if nl-l.start > l.limit {
				err := tooLong(l.buf[l.start:nl])
				l.consume(nl + 1)
				return nil, err
			}
			line := bytes.Clone(l.buf[l.start:nl])
			l.consume(nl + 1)
			return line, nil
		}
		l.seen = l.end
		if l.err != nil {
			if l.start == l.end || l.err != io.EOF {
				return nil, l.err // a line cut by a read error is dropped
			}
			if l.end-l.start > l.limit {
				err := tooLong(l.buf[l.start:l.end])
				l.consume(l.end)
				return nil, err
			}
			line := bytes.Clone(l.buf[l.start:l.end])
			l.consume(l.end)
			return line, nil
		}
		if l.start > 0 {
			n := copy(l.buf, l.buf[l.start:l.end])
			l.start, l.end, l.seen = 0, n, n
		}
		if l.end == len(l.buf) {
			return l.long()
		}
		n, err := l.r.Read(l.buf[l.end:])
		l.end += n
		l.err = err
	}
}

// consume drops buf[:to] of the unread input. A buffer grown to keep what
// followed a long line goes back to the usual size once it is drained.
func (l *lineReader) consume(to int) {
	l.start, l.seen = to, to
	if l.start == l.end {
		l.start, l.end, l.seen = 0, 0, 0
		if len(l.buf) > l.size {
			l.buf = make([]byte, l.size)
		}
	}
}

// Read sizes of a long line: the spill area grows by segments from
// spillFirst, doubling up to spillMax. Reads are at least spillMinRead.
const (
	spillFirst   = 64 << 10
	spillMax     = 1 << 20
	spillMinRead = 16 << 10
)

// long reads a line that does not fit the buffer, which is full of its
// beginning.
func (l *lineReader) long() ([]byte, error) {
	var sp spill
	defer sp.free()
	sp.append(l.buf[l.start:l.end])
	l.start, l.end, l.seen = 0, 0, 0
	for {
		if sp.total > l.limit {
			return nil, l.skip(&sp, nil)
		}
		free := sp.space(spillMinRead)
		n, err := l.r.Read(free)
		if i := bytes.IndexByte(free[:n], '\n'); i >= 0 {
			sp.commit(i)
			if sp.total > l.limit {
				return nil, l.skip(&sp, &longRest{free[i+1 : n], err})
			}
			// Keep what follows the newline for the next lines.
			rest := free[i+1 : n]
			if len(rest) > len(l.buf) {
				l.buf = make([]byte, len(rest))
			}
			l.end = copy(l.buf, rest)
			l.err = err
			return sp.bytes(), nil
		}
		sp.commit(n)
		if err != nil {
			l.err = err
			switch {
			case err != io.EOF:
				return nil, err
			case sp.total > l.limit:
				return nil, l.skip(&sp, &longRest{nil, err})
			}
			return sp.bytes(), nil // the last line, without a newline
		}
	}
}

// longRest is what followed the newline of a long line in the read that
// found it, and that read's error.
type longRest struct {
	b   []byte
	err error
}

// skip reads past the rest of a line over the limit whose beginning is in
// sp (rest: what followed its newline, if the newline was read already),
// keeping its last keptBytes, and returns its lineTooLong. The bytes read
// after the newline stay for the next lines.
func (l *lineReader) skip(sp *spill, rest *longRest) error {
	e := &lineTooLong{size: sp.total}
	e.head = make([]byte, 0, keptBytes)
	for _, seg := range sp.segs {
		e.head = append(e.head, seg[:min(len(seg), keptBytes-len(e.head))]...)
		if len(e.head) == keptBytes {
			break
		}
	}
	for i := len(sp.segs) - 1; i >= 0 && len(e.tail) < keptBytes; i-- {
		seg := sp.segs[i]
		e.tail = append(seg[max(0, len(seg)-(keptBytes-len(e.tail))):len(seg):len(seg)], e.tail...)
	}
	e.tail = bytes.Clone(e.tail)
	if rest != nil {
		// Out of sp before it is freed: rest may be in its last segment.
		l.keepRest(rest)
		sp.free()
		return e
	}
	sp.free()
	keep := func(b []byte) {
		e.size += len(b)
		if n := keptBytes - len(e.head); n > 0 {
			e.head = append(e.head, b[:min(n, len(b))]...)
		}
		if len(b) >= keptBytes {
			e.tail = append(e.tail[:0], b[len(b)-keptBytes:]...)
			return
		}
		e.tail = append(e.tail, b...)
		if over := len(e.tail) - keptBytes; over > 0 {
			e.tail = append(e.tail[:0], e.tail[over:]...)
		}
	}
	buf := make([]byte, spillMax/4)
	for {
		n, err := l.r.Read(buf)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			keep(buf[:i])
			l.keepRest(&longRest{buf[i+1 : n], err})
			return e
		}
		keep(buf[:n])
		if err != nil {
			l.keepRest(&longRest{nil, err})
			return e
		}
	}
}

// keepRest makes what followed a long line the reader's unread input.
func (l *lineReader) keepRest(rest *longRest) {
	if len(rest.b) > len(l.buf) {
		l.buf = make([]byte, len(rest.b))
	}
	l.start, l.seen = 0, 0
	l.end = copy(l.buf, rest.b)
	l.err = rest.err
}

// spill gathers a long line in segments. The first is on the Go heap, so a
// line of a few kilobytes costs no system call; the others are anonymous
// mappings, unmapped as soon as their bytes are copied out.
type spill struct {
	segs   [][]byte // filled up to len; only the last has room
	mapped []bool   // whether segs[i] came from syscall.Mmap
	total  int
}

// space returns room for at least min more bytes, adding a segment if the
// last one has less.
func (s *spill) space(min int) []byte {
	if n := len(s.segs); n > 0 {
		if last := s.segs[n-1]; cap(last)-len(last) >= min {
			return last[len(last):cap(last)]
		}
	}
	size := spillFirst << len(s.segs)
	if size > spillMax || size <= 0 {
		size = spillMax
	}
	var seg []byte
	mapped := false
	if len(s.segs) > 0 {
		mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err == nil {
			seg, mapped = mem[:0], true
		}
	}
	if !mapped {
		seg = make([]byte, 0, size) // the first segment, or no mapping to be had
	}
	s.segs = append(s.segs, seg)
	s.mapped = append(s.mapped, mapped)
	return seg[:cap(seg)]
}

// commit adds n bytes written into the room space returned.
func (s *spill) commit(n int) {
	last := &s.segs[len(s.segs)-1]
	*last = (*last)[:len(*last)+n]
	s.total += n
}

func (s *spill) append(b []byte) {
	for len(b) > 0 {
		n := copy(s.space(1), b)
		s.commit(n)
		b = b[n:]
	}
}

// bytes copies the line out, releasing each segment once copied.
func (s *spill) bytes() []byte {
	line := make([]byte, 0, s.total)
	for i, seg := range s.segs {
		line = append(line, seg...)
		s.release(i)
	}
	return line
}

// free releases what bytes did not.
func (s *spill) free() {
	for i := range s.segs {
		s.release(i)
	}
}

// release lets go of segment i: a mapping is unmapped at once, a Go heap
// segment left to the collector.
func (s *spill) release(i int) {
	if s.mapped[i] {
		_ = syscall.Munmap(s.segs[i][:cap(s.segs[i])])
		s.mapped[i] = false
	}
	s.segs[i] = nil
}

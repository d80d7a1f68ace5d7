package jsonrpc

// A single-pass JSON scanner for the routing envelope of JSON-RPC messages.
//
// encoding/json reads a message twice (checkValid, then decode) and
// allocates as it decodes; for a bridge that only needs a handful of
// members of every message, and passes the rest on untouched, that was most
// of its CPU time on large messages. The scanner below validates the whole
// input exactly as encoding/json does (RFC 8259, invalid UTF-8 accepted
// inside strings, at most maxDepth nested arrays and objects) and lets its
// caller pick the members it wants on the way, as sub-slices of the input.
// Decoding those few values is the caller's business.

import (
	"encoding/binary"
	"math/bits"
	"unicode"
)

// maxDepth is encoding/json's limit on nested arrays and objects; deeper
// input is a syntax error there, and so here, so that the bridge and any
// peer using encoding/json agree on what is JSON.
const maxDepth = 10000

// scanner walks one input. pos never passes its end, even on error, so the
// bytes between two positions can always be sliced. depth counts the arrays
// and objects open at pos, including those its caller walked into itself
// (openObject).
type scanner struct {
	data  []byte
	pos   int
	depth int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipSpace moves past the white space JSON allows between tokens.
func (s *scanner) skipSpace() {
	// Compact JSON has no white space at all: one comparison says so.
	for s.pos < len(s.data) && s.data[s.pos] <= ' ' && isSpace(s.data[s.pos]) {
		s.pos++
	}
}

// peek returns the byte after any white space, or 0 at the end of the input:
// a NUL is no more valid than the end outside a string, so callers need no
// test of their own for the end.
func (s *scanner) peek() byte {
	// skipSpace and a load in one loop: a token at pos, the usual case,
	// is found with one load and one comparison.
	for s.pos < len(s.data) {
		if c := s.data[s.pos]; c > ' ' || !isSpace(c) {
			return c
		}
		s.pos++
	}
	return 0
}

// value scans one value, after optional white space, and returns its bytes.
func (s *scanner) value() ([]byte, bool) {
	s.skipSpace()
	start := s.pos
	ok := s.skipValue()
	return s.data[start:s.pos], ok
}

// openObject enters the object whose '{' is at pos and reports whether it
// has members; if not, it has also left it.
func (s *scanner) openObject() (more, ok bool) {
	s.pos++
	if s.depth++; s.depth > maxDepth {
		return false, false
	}
	if s.peek() == '}' {
		s.pos++
		s.depth--
		return false, true
	}
	return true, true
}

// key reads a member's name and the colon after it. It returns the name's
// contents as written, and whether they contain escapes.
func (s *scanner) key() (raw []byte, escaped, ok bool) {
	if s.peek() != '"' {
		return nil, false, false
	}
	start := s.pos
	if escaped, ok = s.skipString(); !ok {
		return nil, false, false
	}
	// The name ends at pos-1, with its closing quote. In compact JSON the
	// colon follows at once: one test, not peek's loop.
	end := s.pos
	if d := s.data; end < len(d) && d[end] == ':' {
		s.pos = end + 1
	} else if s.peek() == ':' {
		s.pos++
	} else {
		return nil, false, false
	}
	return s.data[start+1 : end-1], escaped, true
}

// nextMember follows a member's value: it reads the comma before the next
// member (more) or the brace that ends the object, which it leaves.
func (s *scanner) nextMember() (more, ok bool) {
	switch s.peek() {
	case ',':
		s.pos++
		return true, true
	case '}':
		s.pos++
		s.depth--
		return false, true
	}
	return false, false
}

// skipValue scans one value, after optional white space, validating it.
// Most values are strings, numbers and literals: they need none of the
// state of skipNested.
func (s *scanner) skipValue() bool {
	switch s.peek() {
	case '{', '[':
		return s.skipNested()
	case '"':
		_, ok := s.skipString()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.skipNumber()
}

// skipNested scans one value as skipValue does, arrays and objects
// included. They are walked without recursion, so the depth limit costs
// no stack: kinds holds one bit per open container (1 for an object) and
// lives on the stack up to 256 levels.
func (s *scanner) skipNested() bool {
	var inline [4]uint64
	kinds := inline[:]
	base := s.depth
	for {
		// A value is expected at pos.
		switch s.peek() {
		case '{', '[':
			isObject := s.data[s.pos] == '{'
			s.pos++
			if s.depth++; s.depth > maxDepth {
				return false
			}
			level := s.depth - base - 1
			if level>>6 >= len(kinds) {
				kinds = append(kinds, 0)
			}
			if isObject {
				kinds[level>>6] |= 1 << (level & 63)
				if s.peek() != '}' {
					if !s.skipKey() {
						return false
					}
					continue // the member's value
				}
			} else {
				kinds[level>>6] &^= 1 << (level & 63)
				if s.peek() != ']' {
					continue // the first element
				}
			}
			s.pos++ // an empty container: a value like any other
			s.depth--
		case '"':
			if _, ok := s.skipString(); !ok {
				return false
			}
		case 't':
			if !s.literal("true") {
				return false
			}
		case 'f':
			if !s.literal("false") {
				return false
			}
		case 'n':
			if !s.literal("null") {
				return false
			}
		default:
			if !s.skipNumber() {
				return false
			}
		}
		// A value has ended: close the containers it ends, or go on to the
		// next element or member.
		for {
			if s.depth == base {
				return true
			}
			level := s.depth - base - 1
			isObject := kinds[level>>6]&(1<<(level&63)) != 0
			c := s.peek()
			if c == ',' {
				s.pos++
				if isObject && !s.skipKey() {
					return false
				}
				break
			}
			if (isObject && c == '}') || (!isObject && c == ']') {
				s.pos++
				s.depth--
				continue
			}
			return false
		}
	}
}

// skipKey reads a member's name and colon inside skipValue.
func (s *scanner) skipKey() bool {
	_, _, ok := s.key()
	return ok
}

func (s *scanner) literal(lit string) bool {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.pos += len(lit)
	return true
}

// skipNumber scans a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// What follows it is the caller's to check ("01" is the number 0 followed
// by a stray 1).
func (s *scanner) skipNumber() bool {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return false
	case d[i] == '0':
		i++
	case '1' <= d[i] && d[i] <= '9':
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	s.pos = i
	return true
}

// Masks for looking at 8 bytes of a string at once.
const (
	lsbs = 0x0101010101010101
	msbs = 0x8080808080808080
)

// stringStops marks, in the high bit of each byte of w (little-endian), the
// bytes a string cannot simply contain: '"', '\\' and control characters.
// Borrows may mark bytes after the first marked one too, but the lowest
// mark is always exact, and that is the only one the caller uses.
func stringStops(w uint64) uint64 {
	q := w ^ (lsbs * '"')
	b := w ^ (lsbs * '\\')
	return (((q - lsbs) &^ q) | ((b - lsbs) &^ b) | ((w - lsbs*0x20) &^ w)) & msbs
}

// plainString marks the bytes a string contains as they are.
var plainString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipString scans the string whose opening quote is at pos and reports
// whether it contains escapes. Long strings are the bulk of large messages,
// so their plain runs are skipped 8 bytes at a time.
func (s *scanner) skipString() (escaped, ok bool) {
	d, i := s.data, s.pos+1
	for {
		if i+8 <= len(d) {
			m := stringStops(binary.LittleEndian.Uint64(d[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(d) && plainString[d[i]] { // the last few bytes
				i++
			}
		}
		if i >= len(d) {
			return false, false
		}
		switch d[i] {
		case '"':
			s.pos = i + 1
			return escaped, true
		case '\\':
			escaped = true
			if i+1 >= len(d) {
				return false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(d)-i < 6 || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return false, false
				}
				i += 6
			default:
				return false, false
			}
		default: // a control character
			return false, false
		}
	}
}

func isHex(c byte) bool {
	return isDigit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// foldedName returns the member the bridge knows (memberName) that the
// name raw (as written, escaped or not) equals under the case folding of
// encoding/json (bytes.EqualFold: Unicode simple folding, so "ſ" is an
// "s"), or nameOther. Many servers decode member names
// case-insensitively: for them "ID" is "id" and "Name"
// is "name".
func foldedName(raw []byte, escaped bool) name {
	if len(raw) == 0 {
		return nameOther
	}
	if c := raw[0]; c < 0x80 && c != '\\' && !nameStarts[c] {
		return nameOther // most names: one load
	}
	if !escaped && isASCII(raw) {
		return foldedASCII(raw)
	}
	var buf [maxFolded]byte
	n, ok := foldKey(&buf, raw, escaped)
	if !ok || n > len("protocolVersion") {
		return nameOther
	}
	return foldedMember(buf[:n])
}

// smallestFold is the smallest rune that r equals under simple case
// folding, as encoding/json compares names.
func smallestFold(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

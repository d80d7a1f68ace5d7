package audit

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Bounds of the arguments an audit line holds (Options.Args). Arguments
// are a client's: a line must stay valid JSON (RFC 8259 wants UTF-8) and
// of a size a log reader copes with, whatever the client sent.
const (
	// MaxArgsDepth is how deeply nested the arguments written may be: a
	// value nested deeper is written as the string ArgsDepthMarker.
	MaxArgsDepth = 32
	// MaxArgsBytes bounds the arguments written: larger ones are written
	// as an object {"truncated": ArgsSizeMarker, "bytes": N}, N their
	// size as sent (args_sha256 still identifies them).
	MaxArgsBytes = 64 << 10
)

// Markers of what the bounds left out.
const (
	ArgsDepthMarker = "truncated: nested deeper than 32"
	ArgsSizeMarker  = "arguments over 65536 bytes, left out"
)

// appendArgs appends the arguments v as compact, valid JSON within the
// bounds: as written when they are valid UTF-8 and within them (the
// common case, without decoding them); else decoded (invalid UTF-8 becomes
// U+FFFD), cut at MaxArgsDepth and encoded again; a value that is not JSON
// at all is written as a string.
func appendArgs(b, v []byte) []byte {
	if len(v) > MaxArgsBytes {
		return appendArgsTooLarge(b, len(v))
	}
	if utf8.Valid(v) && depthWithin(v, MaxArgsDepth) {
		start := len(b)
		b = appendCompact(b, v)
		if len(b)-start <= MaxArgsBytes {
			return b
		}
		return appendArgsTooLarge(b[:start], len(v))
	}
	var x any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil || dec.More() {
		return appendString(b, string(v)) // replaces invalid UTF-8 too
	}
	out, err := json.Marshal(cutDepth(x, 1))
	if err != nil || len(out) > MaxArgsBytes {
		return appendArgsTooLarge(b, len(v))
	}
	return append(b, out...)
}

func appendArgsTooLarge(b []byte, n int) []byte {
	b = append(b, `{"truncated":"`+ArgsSizeMarker+`","bytes":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '}')
}

// depthWithin reports whether the JSON text v nests arrays and objects at
// most max deep (strings skipped; v need not be valid).
func depthWithin(v []byte, max int) bool {
	depth, inString := 0, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > max {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}

// cutDepth replaces the arrays and objects of x nested deeper than
// MaxArgsDepth (x being at depth) with ArgsDepthMarker.
func cutDepth(x any, depth int) any {
	switch v := x.(type) {
	case map[string]any:
		if depth > MaxArgsDepth {
			return ArgsDepthMarker
		}
		for k, e := range v {
			v[k] = cutDepth(e, depth+1)
		}
	case []any:
		if depth > MaxArgsDepth {
			return ArgsDepthMarker
		}
		for i, e := range v {
			v[i] = cutDepth(e, depth+1)
		}
	}
	return x
}

package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// A line is encoded by appending to a pooled buffer, member by member in
// the order of Record's fields, without reflection: encoding/json spent
// most of an audited request's cost (issue 16, the bench row with the
// guards). The bytes are those json.Marshal writes for the same Record
// (TestEncodeAsMarshal): readers decode lines with encoding/json.

// bufs holds line buffers; one that grew past maxPooled is left to the GC.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooled = 64 << 10

// appendJSON appends r as one JSON object, without a newline.
func (r *Record) appendJSON(b []byte) []byte {
	b = append(b, `{"time":`...)
	b = appendTime(b, r.Time)
	b = append(b, `,"event":`...)
	b = appendString(b, r.Event)
	b = appendMember(b, `,"server":`, r.Server)
	b = appendMember(b, `,"session":`, r.Session)
	b = appendMember(b, `,"sub":`, r.Sub)
	b = appendMember(b, `,"client_id":`, r.ClientID)
	b = appendMember(b, `,"from":`, r.From)
	b = appendMember(b, `,"method":`, r.Method)
	b = appendMember(b, `,"tool":`, r.Tool)
	b = appendMember(b, `,"prompt":`, r.Prompt)
	b = appendMember(b, `,"resource":`, r.Resource)
	switch {
	case r.ArgsSHA256 != "":
		b = appendMember(b, `,"args_sha256":`, r.ArgsSHA256)
	case r.hasSum:
		b = append(b, `,"args_sha256":"`...)
		b = hex.AppendEncode(b, r.argsSum[:])
		b = append(b, '"')
	}
	if len(r.Args) > 0 {
		b = append(b, `,"args":`...)
		b = appendCompact(b, r.Args)
	}
	b = append(b, `,"outcome":`...)
	b = appendString(b, r.Outcome)
	if r.ErrorCode != 0 {
		b = append(b, `,"error_code":`...)
		b = strconv.AppendInt(b, int64(r.ErrorCode), 10)
	}
	b = appendMember(b, `,"denied_by":`, r.DeniedBy)
	b = appendMember(b, `,"reason":`, r.Reason)
	b = append(b, `,"duration_ms":`...)
	b = appendFloat(b, r.DurationMS)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, int64(r.BytesIn), 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, int64(r.BytesOut), 10)
	return append(b, '}')
}

// appendMember appends an omitempty string member.
func appendMember(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(b, name...), v)
}

// appendTime writes t as time.Time.MarshalJSON does.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendFloat writes f as encoding/json does: ECMAScript's number to
// string, 'e' form only for tiny and huge magnitudes, exponents unpadded.
func appendFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		f = 0 // no duration is either; JSON has no such number
	}
	form := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		form = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, form, -1, 64)
	if form == 'e' {
		// 1e-07 is written 1e-7.
		if i := bytes.LastIndexByte(b[start:], 'e'); i >= 0 {
			exp := b[start+i+2:]
			if len(exp) == 2 && exp[0] == '0' {
				exp[0] = exp[1]
				b = b[:len(b)-1]
			}
		}
	}
	return b
}

// appendCompact appends JSON value v without insignificant white space
// (so that a line stays one line) and with <, >, &, U+2028 and U+2029
// escaped, as json.Marshal writes a json.RawMessage. Invalid JSON, which
// the interception point never passes on, is written as a string.
func appendCompact(b []byte, v []byte) []byte {
	start := len(b)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, v); err != nil {
		return appendString(b[:start], string(v))
	}
	b = buf.Bytes()
	// Compact leaves strings as written; escape what Marshal escapes.
	if v := b[start:]; bytes.ContainsAny(v, "<>&\u2028\u2029") {
		var out bytes.Buffer
		json.HTMLEscape(&out, v)
		b = append(b[:start], out.Bytes()...)
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json
// escapes: quotes, backslashes and control characters; <, > and & (HTML
// safety); U+2028 and U+2029 (JavaScript line terminators); and each byte
// of invalid UTF-8 replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[done:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[done:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[done:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	b = append(b, s[done:]...)
	return append(b, '"')
}

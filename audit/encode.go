package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// A line is encoded by appending to a pooled buffer, member by member in
// the order of Record's fields, without reflection: encoding/json spent
// most of an audited request's cost (the bench row with the
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
	b = appendWord(b, r.Event)
	b = appendMember(b, `,"server":`, r.Server)
	if r.quotedSession != "" {
		b = append(append(b, `,"session":`...), r.quotedSession...)
	} else {
		b = appendMember(b, `,"session":`, r.Session)
	}
	b = appendMember(b, `,"sub":`, r.Sub)
	b = appendMember(b, `,"client_id":`, r.ClientID)
	if r.From != "" {
		b = appendWord(append(b, `,"from":`...), r.From)
	}
	if r.Method != "" {
		b = appendWord(append(b, `,"method":`...), r.Method)
	}
	b = r.appendName(b, `,"tool":`, r.Tool, namesTool)
	b = r.appendName(b, `,"prompt":`, r.Prompt, namesPrompt)
	b = appendMember(b, `,"advertised":`, r.Advertised)
	b = appendMember(b, `,"resource":`, r.Resource)
	switch {
	case r.ArgsSHA256 != "":
		b = appendMember(b, `,"args_sha256":`, r.ArgsSHA256)
	case r.hasSum:
		b = append(b, `,"args_sha256":"`...)
		b = appendHex(b, &r.argsSum)
		b = append(b, '"')
	}
	if len(r.Args) > 0 {
		b = append(b, `,"args":`...)
		b = appendArgs(b, r.Args)
	}
	b = append(b, `,"outcome":`...)
	b = appendWord(b, r.Outcome)
	if r.ErrorCode != 0 {
		b = append(b, `,"error_code":`...)
		b = strconv.AppendInt(b, int64(r.ErrorCode), 10)
	}
	b = appendMember(b, `,"denied_by":`, r.DeniedBy)
	b = appendMember(b, `,"reason":`, r.Reason)
	b = append(b, `,"duration_ms":`...)
	b = appendFloat(b, r.DurationMS)
	b = append(b, `,"bytes_in":`...)
	b = appendCount(b, int64(r.BytesIn))
	b = append(b, `,"bytes_out":`...)
	b = appendCount(b, int64(r.BytesOut))
	return append(b, '}')
}

// quoted is s as a JSON string, for Record's quoted members; "" (which
// they omit) stays "".
func quoted(s string) string {
	if s == "" {
		return ""
	}
	return string(appendString(nil, s))
}

// appendName appends the member Tool or Prompt (what says which): v, or
// quotedName if it is that member's.
func (r *Record) appendName(b []byte, name, v string, what named) []byte {
	if r.quotedLen > 0 && r.quotedWhat == what {
		return append(append(b, name...), r.quotedName[:r.quotedLen]...)
	}
	return appendMember(b, name, v)
}

// appendMember appends an omitempty string member.
func appendMember(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(b, name...), v)
}

// appendTime writes t as time.Time.MarshalJSON does: RFC 3339, the
// fraction of the second without its trailing zeros. A record's time is
// UTC, written here from the Unix time with a few divisions (civil from
// days, as in H. Hinnant's "chrono-Compatible Low-Level Date Algorithms"):
// a quarter of AppendFormat's instructions, and the lines of one second
// share that (lastStamp). Other zones, and years MarshalJSON refuses,
// take AppendFormat.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	sec := t.Unix()
	if t.Location() != time.UTC || sec < minUnix || sec >= maxUnix {
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	if st := lastStamp.Load(); st != nil && st.sec == sec {
		b = append(b, st.text[:]...)
	} else {
		start := len(b)
		b = appendStamp(b, sec)
		st := &stamp{sec: sec}
		copy(st.text[:], b[start:])
		lastStamp.Store(st)
	}
	if ns := t.Nanosecond(); ns != 0 {
		b = appendFraction(b, uint32(ns))
	}
	return append(b, 'Z', '"')
}

// appendFraction appends the fraction of a second of ns nanoseconds, in
// (0, 1e9): a point and its nine digits less the trailing zeros. The last
// eight are worked out together, in the bytes of a uint64 (a third of
// the instructions of a division by ten per digit).
func appendFraction(b []byte, ns uint32) []byte {
	var frac [10]byte
	frac[0], frac[1] = '.', byte('0'+ns/1e8)
	d := digits8(ns % 1e8)
	binary.LittleEndian.PutUint64(frac[2:], d|0x3030303030303030)
	// The trailing zeros are the top bytes of d that are 0; the first
	// digit stays (ns is not 0: if it is 0, d is not).
	n := len(frac) - bits.LeadingZeros64(d)/8
	return append(b, frac[:n]...)
}

// digits8 returns the eight decimal digits of v, below 1e8, one in each
// byte from the least significant (the first digit there).
func digits8(v uint32) uint64 {
	// Four digits in each half, the first four in the low one.
	x := uint64(v/10000) | uint64(v%10000)<<32
	// Two in each quarter: x*10486>>20 is x/100 below 10000 (and the
	// product fits in 27 bits, within its half).
	hi := (x * 10486 >> 20) & 0x0000007f0000007f
	x = hi | (x-hi*100)<<16
	// One in each byte: x*103>>10 is x/10 below 100 (in 14 bits).
	hi = (x * 103 >> 10) & 0x000f000f000f000f
	return hi | (x-hi*10)<<8
}

// stamp is the text of a UTC time stamp up to its seconds, of the Unix
// time sec.
type stamp struct {
	sec  int64
	text [len("2006-01-02T15:04:05")]byte
}

// lastStamp is the stamp of the latest line's second, which the lines of
// the same second share: a load and a compare instead of the date's
// divisions (about 350 instructions a line).
var lastStamp atomic.Pointer[stamp]

// appendStamp appends the date and time of day of the Unix time sec, UTC,
// as RFC 3339 writes them, from 0000-01-01 to 9999-12-31.
func appendStamp(b []byte, sec int64) []byte {
	// Days from -0400-03-01, where a 400-year era starts (0000 is a leap
	// year: its March 1 is day 60): never negative, so that plain
	// division floors.
	days := (sec-minUnix)/86400 - 60 + 146097
	tod := int((sec - minUnix) % 86400)
	era := days / 146097
	doe := days - era*146097                               // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365], from March 1
	mp := (5*doy + 2) / 153                                // [0, 11], from March
	day := doy - (153*mp+2)/5 + 1                          // [1, 31]
	year, month := era*400+yoe-400, mp+3
	if month > 12 {
		year, month = year+1, month-12
	}
	b = append2(append2(b, int(year/100)), int(year%100))
	b = append2(append(b, '-'), int(month))
	b = append2(append(b, '-'), int(day))
	b = append2(append(b, 'T'), tod/3600)
	b = append2(append(b, ':'), tod/60%60)
	b = append2(append(b, ':'), tod%60)
	return b
}

// The Unix times of 0000-01-01 and 10000-01-01, UTC: MarshalJSON writes
// years between.
const (
	minUnix = -62167219200
	maxUnix = 253402300800
)

// appendCount appends n as strconv.AppendInt writes it in base 10. Below
// 1e4 (the sizes of most messages, the milliseconds of most calls) it
// writes pairs of digits, without strconv's loop (about 50 instructions
// a number less).
func appendCount(b []byte, n int64) []byte {
	switch {
	case n < 0 || n >= 1e4:
		return strconv.AppendInt(b, n, 10)
	case n < 10:
		return append(b, byte('0'+n))
	case n < 100:
		return append2(b, int(n))
	case n < 1000:
		return append2(append(b, byte('0'+n/100)), int(n%100))
	}
	return append2(append2(b, int(n/100)), int(n%100))
}

// append2 appends v, in [0, 99], as two decimal digits.
func append2(b []byte, v int) []byte {
	return append(b, byte('0'+v/10), byte('0'+v%10))
}

// appendFloat writes f as encoding/json does: ECMAScript's number to
// string, 'e' form only for tiny and huge magnitudes, exponents unpadded.
func appendFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		f = 0 // no duration is either; JSON has no such number
	}
	// A duration is a whole number of microseconds in milliseconds:
	// float64(n)/1000 is the double nearest n/1000, which has at most 15
	// significant digits below 1e15, and no other decimal of 15 digits or
	// fewer is nearest the same double (DBL_DIG): n/1000 is the shortest
	// decimal that reads back as f, what strconv would write, at a
	// fraction of the cost.
	if n := int64(math.Round(f * 1000)); !math.Signbit(f) && f < 1e12 && float64(n)/1000 == f {
		b = appendCount(b, n/1000)
		if frac := n % 1000; frac != 0 {
			b = append(b, '.', byte('0'+frac/100))
			if frac%100 != 0 {
				b = append(b, byte('0'+frac/10%10))
				if frac%10 != 0 {
					b = append(b, byte('0'+frac%10))
				}
			}
		}
		return b
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

// appendWord is appendString for the words of a line: its events, froms
// and outcomes, and the methods of calls, whose JSON strings are these
// constants (a switch of a few comparisons instead of a pass over the
// bytes: about 300 instructions a line). Other strings are
// escaped.
func appendWord(b []byte, s string) []byte {
	switch s {
	case "request":
		return append(b, `"request"`...)
	case "client":
		return append(b, `"client"`...)
	case "server":
		return append(b, `"server"`...)
	case "tools/call":
		return append(b, `"tools/call"`...)
	case "prompts/get":
		return append(b, `"prompts/get"`...)
	case "resources/read":
		return append(b, `"resources/read"`...)
	case "ok":
		return append(b, `"ok"`...)
	case "error":
		return append(b, `"error"`...)
	case "denied":
		return append(b, `"denied"`...)
	}
	return appendString(b, s)
}

const hexDigits = "0123456789abcdef"

// appendHex appends sum in lower-case hex, as encoding/hex writes it,
// eight digits at a time: a quarter of encoding/hex's instructions, which
// take one byte at a time (some 600 a line).
func appendHex(b []byte, sum *[sha256.Size]byte) []byte {
	var out [2 * sha256.Size]byte
	for i := 0; i < sha256.Size; i += 4 {
		binary.BigEndian.PutUint64(out[2*i:], hex8(binary.BigEndian.Uint32(sum[i:])))
	}
	return append(b, out[:]...)
}

// hex8 returns the eight hex digits of v, the most significant in the
// most significant byte.
func hex8(v uint32) uint64 {
	// Each nibble to a byte of its own: halves, then bytes, then nibbles.
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f
	// A byte of 10 or more (adding 6 carries into its bit 4) is a letter:
	// 'a' is '0'+10+39. No byte carries into the next.
	letters := (x + 0x0606060606060606) >> 4 & 0x0101010101010101
	return x + 0x3030303030303030 + letters*39
}

// plain holds the bytes a JSON string holds as they are (ASCII only):
// one load per byte where seven comparisons were (the strings of a line
// are mostly such bytes).
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// isPlain reports whether s holds only bytes a JSON string holds as they
// are (appendString writes s between quotes).
func isPlain(s []byte) bool {
	for _, c := range s {
		if !plain[c] {
			return false
		}
	}
	return true
}

// appendString appends s as a JSON string, escaped as encoding/json
// escapes: quotes, backslashes and control characters; <, > and & (HTML
// safety); U+2028 and U+2029 (JavaScript line terminators); and each byte
// of invalid UTF-8 replaced by U+FFFD, written as the character itself, as
// encoding/json writes it since Go 1.27 (its earlier versions wrote
// \ufffd; both decode to the same string).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; ; {
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
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
			b = append(append(b, s[done:i]...), "\uFFFD"...)
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

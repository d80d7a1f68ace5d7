package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A line is the bytes json.Marshal writes for its Record, whatever the
// strings hold (quotes, controls, HTML, JavaScript line terminators,
// invalid UTF-8), the numbers and the arguments; and it is one line. The
// reference Record has each byte of invalid UTF-8 replaced by U+FFFD
// already, which json.Marshal writes as the character in every Go version;
// for the invalid byte itself, Go 1.27's writes the character too, earlier
// versions \ufffd.
func TestEncodeAsMarshal(t *testing.T) {
	awkward := []string{
		"", "plain", `quote " and \ backslash`, "\x00\x01\b\f\n\r\t\x1f\x7f", "<script>&amp;</script>",
		"line\u2028para\u2029", "bad \xff utf-8 \xe2\x82", "ünïcödé ✓ 🙂", strings.Repeat("x", 5000),
	}
	args := []string{
		`{"text":"hello"}`, "{\n  \"a\" : [1, 2,\t3],\n  \"b\": \"<&>\"\n}", `"\u2028 \u2029"`, "[\"\u2028\"]", `null`, `12.5e3`,
	}
	var recs []Record
	for i, s := range awkward {
		recs = append(recs, Record{
			Time: time.Date(2026, 7, 28, 12, 0, i, i*1001, time.UTC), Event: "request", Server: s, Session: s, Sub: s, ClientID: s,
			From: "client", Method: s, Tool: s, Prompt: s, Resource: s, ArgsSHA256: s, Outcome: s, ErrorCode: -32000 - i,
			DeniedBy: s, Reason: s, BytesIn: i, BytesOut: i * 1000,
		})
	}
	for _, s := range awkward {
		// As a connection's lines have it: quoted once.
		recs = append(recs, Record{Event: "request", Session: s, quotedSession: quoted(s), Outcome: "ok"})
	}
	for i, a := range args {
		recs = append(recs, Record{Event: "request", Outcome: "ok", Args: json.RawMessage(a), ErrorCode: i})
	}
	durations := []float64{0, math.Copysign(0, -1), 0.001, 0.01, 0.1, 0.12, 1.5, 1234.567, 1e-7, 3e-6, 0.1 + 0.2, 123456789.125, 1e21, 2.5e22,
		-1.5, 999999999999.999, 1e12, 1e15 + 0.5, math.MaxInt64, math.Nextafter(0.001, 1), ms(time.Duration(math.MaxInt64))}
	for range 10000 {
		// As ms writes them: whole microseconds, of a duration up to days.
		durations = append(durations, ms(time.Duration(rand.Int64N(int64(1000*time.Hour)))))
	}
	for _, d := range durations {
		recs = append(recs, Record{Time: time.Now().UTC(), Event: "pin_violation", Outcome: "dropped", DurationMS: d})
	}
	// Times as MarshalJSON writes them: UTC by hand (leap days, the ends
	// of the years it writes, fractions with trailing zeros), other zones
	// by AppendFormat.
	for _, tm := range []time.Time{
		{}, time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 2, 29, 23, 59, 59, 1, time.UTC),
		time.Date(0, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1900, 2, 28, 1, 2, 3, 0, time.UTC), time.Date(1900, 3, 1, 1, 2, 3, 0, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 500000000, time.UTC), time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 2, 3, 4, 5, 6, 100000000, time.UTC), time.Date(2026, 10, 11, 12, 13, 14, 120000, time.UTC),
		time.Date(2026, 7, 28, 9, 8, 7, 123456780, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 7, 28, 9, 8, 7, 5000, time.FixedZone("", -3*3600-30*60)),
		time.Date(2026, 7, 28, 9, 8, 7, 5000, time.FixedZone("UTC", 0)),
		time.Now(), time.Now().UTC(), time.Unix(1<<37, 999).UTC(),
	} {
		recs = append(recs, Record{Time: tm, Event: "request", Outcome: "ok"})
	}
	for range 10000 {
		sec := rand.Int64N(253402300800+62167219200) - 62167219200 // years 0 to 9999
		nsec := rand.Int64N(1e9)
		nsec -= nsec % []int64{1, 10, 1000, 1e6, 1e8, 1e9}[rand.IntN(6)] // trailing zeros
		recs = append(recs, Record{Time: time.Unix(sec, nsec).UTC(), Event: "request", Outcome: "ok"})
	}
	for _, r := range recs {
		want, err := json.Marshal(withValidUTF8(r))
		if err != nil {
			t.Fatal(err)
		}
		got := r.appendJSON(nil)
		if !bytes.Equal(got, want) {
			t.Errorf("appendJSON:\n got %s\nwant %s", got, want)
		}
		if bytes.ContainsAny(got, "\n\r") {
			t.Errorf("a line break in a line: %q", got)
		}
	}

	// The digest kept as bytes is written as its hex.
	sum := sha256.Sum256([]byte(`{"a":1}`))
	r := withDigest(Record{Event: "request", Outcome: "ok"}, `{"a":1}`)
	want := r
	want.ArgsSHA256 = hex.EncodeToString(sum[:])
	w, _ := json.Marshal(&want)
	if got := r.appendJSON(nil); !bytes.Equal(got, w) {
		t.Errorf("digest:\n got %s\nwant %s", got, w)
	}
}

// appendHex writes what encoding/hex writes: every byte in every place,
// and random digests.
func TestAppendHex(t *testing.T) {
	var sums [][sha256.Size]byte
	for v := range 256 {
		var s [sha256.Size]byte
		for i := range s {
			s[i] = byte(v + i)
		}
		sums = append(sums, s)
	}
	for range 1000 {
		var s [sha256.Size]byte
		for i := range s {
			s[i] = byte(rand.Uint32())
		}
		sums = append(sums, s)
	}
	for _, s := range sums {
		if got, want := string(appendHex([]byte("x"), &s)), "x"+hex.EncodeToString(s[:]); got != want {
			t.Fatalf("appendHex(%x):\n got %s\nwant %s", s, got, want)
		}
	}
}

// Lines of the same second share its stamp, and only those: a sequence of
// times that goes back and forth between seconds, and across a day, is
// written as json.Marshal writes it.
func TestStampsShared(t *testing.T) {
	base := time.Date(2026, 12, 31, 23, 59, 58, 0, time.UTC)
	for _, off := range []time.Duration{0, 1, 999999999, 1e9, 1e9 + 5, 0, 2e9, 2e9 + 1e3, 1e9 + 7, 1e9 + 7, 0, 86400e9} {
		r := Record{Time: base.Add(off), Event: "request", Outcome: "ok"}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%v:\n got %s\nwant %s", r.Time, got, want)
		}
	}
}

// The fraction of a second is written as MarshalJSON writes it, for
// every number of digits and zeros anywhere.
func TestFraction(t *testing.T) {
	base := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	ns := []int{0, 1, 9, 10, 100, 1e8, 5e8, 1e8 + 1, 999999999, 123456789, 100000001, 12345678, 1020304, 900000000, 99999999}
	for range 100000 {
		ns = append(ns, rand.IntN(1e9))
	}
	for d := 1; d < 1e9; d *= 10 {
		ns = append(ns, d, 3*d, d*7+d/10)
	}
	for _, n := range ns {
		tm := base.Add(time.Duration(n))
		want, _ := tm.MarshalJSON()
		if got := appendTime(nil, tm); !bytes.Equal(got, want) {
			t.Fatalf("%d ns: %s, want %s", n, got, want)
		}
	}
}

// appendCount writes what strconv writes.
func TestCount(t *testing.T) {
	ns := []int64{-1, -10, math.MinInt64, math.MaxInt64, 1e4, 1e4 - 1, 1e4 + 1, 1e9}
	for n := range int64(20000) {
		ns = append(ns, n)
	}
	for range 10000 {
		ns = append(ns, rand.Int64(), -rand.Int64())
	}
	for _, n := range ns {
		if got, want := string(appendCount([]byte("x"), n)), "x"+strconv.FormatInt(n, 10); got != want {
			t.Fatalf("%d: %s, want %s", n, got, want)
		}
	}
}

// appendWord writes what appendString writes, for its words and others.
func TestWords(t *testing.T) {
	for _, s := range []string{"request", "pin_violation", "client", "server", "tools/call", "prompts/get", "resources/read",
		"initialize", "ok", "error", "denied", "cancelled", "sent", "unanswered", "dropped", "", "o<k", "tools/call\n"} {
		if got, want := appendWord([]byte("x"), s), appendString([]byte("x"), s); !bytes.Equal(got, want) {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	}
}

// withDigest is r with the digest of args kept as a request's line keeps it.
func withDigest(r Record, args string) Record {
	r.argsSum, r.hasSum = sha256.Sum256([]byte(args)), true
	return r
}

// Encoding a line allocates nothing but the buffer's growth.
func TestEncodeAllocs(t *testing.T) {
	r := Record{Time: time.Now().UTC(), Event: "request", Session: "s-1", Method: "tools/call", Tool: "echo",
		Outcome: "ok", DurationMS: 1.25, BytesIn: 100, BytesOut: 600}
	r = withDigest(r, "x")
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = r.appendJSON(buf[:0]) }); n != 0 {
		t.Errorf("%v allocations per line", n)
	}
}

// BenchmarkLine: what a line costs, encoded (appendJSON, and json.Marshal
// for comparison) and written to an O_APPEND file.
func BenchmarkLine(b *testing.B) {
	r := Record{Time: time.Now().UTC(), Event: "request", Session: "s-1f2e3d4c", Sub: "alice", ClientID: "desktop-app",
		From: "client", Method: "tools/call", Tool: "send_email", Outcome: "ok", DurationMS: 12.345, BytesIn: 140, BytesOut: 612}
	r = withDigest(r, `{"text":"hello"}`)
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		m := r
		m.ArgsSHA256 = hex.EncodeToString(r.argsSum[:])
		for b.Loop() {
			if _, err := json.Marshal(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = r.appendJSON(buf[:0])
		}
	})
	b.Run("write", func(b *testing.B) {
		l, err := Open(b.TempDir()+"/audit.log", nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.ReportAllocs()
		for b.Loop() {
			l.write(&r)
		}
	})
}

// withValidUTF8 is r with each byte of invalid UTF-8 in its string fields
// replaced by U+FFFD, as encoding/json and appendString replace them (one
// replacement per byte, where strings.ToValidUTF8 gives one per run).
func withValidUTF8(r Record) *Record {
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.String || !f.CanSet() {
			continue
		}
		var b strings.Builder
		for s := f.String(); s != ""; {
			c, size := utf8.DecodeRuneInString(s)
			b.WriteRune(c) // RuneError for an invalid byte, with size 1
			s = s[size:]
		}
		f.SetString(b.String())
	}
	return &r
}

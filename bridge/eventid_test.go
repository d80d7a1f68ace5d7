package bridge

import (
	"errors"
	"math"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/session"
)

func TestEventIDRoundTrip(t *testing.T) {
	for _, c := range []struct {
		stream int64
		seq    uint64
		id     string
	}{
		{1, 0, "1_0"},
		{1, 1, "1_1"},
		{42, 1000, "42_1000"},
		{math.MaxInt64, math.MaxUint64, "9223372036854775807_18446744073709551615"},
	} {
		if got := eventID(c.stream, c.seq); got != c.id {
			t.Errorf("eventID(%d, %d) = %q, want %q", c.stream, c.seq, got, c.id)
		}
		stream, seq, err := parseEventID(c.id)
		if err != nil || stream != c.stream || seq != c.seq {
			t.Errorf("parseEventID(%q) = %d, %d, %v; want %d, %d", c.id, stream, seq, err, c.stream, c.seq)
		}
	}
}

// TestParseEventIDRejects lists forms a client might send that are not an
// ID the bridge made: each must fail with session.ErrUnknownEvent (a 400), never be
// read as another event's ID.
func TestParseEventIDRejects(t *testing.T) {
	for _, id := range []string{
		"", "_", "1", "1_", "_1", "1__1", "1_1_1", "a_1", "1_a",
		"0_1", "-1_1", "+1_1", "1_+1", "1_-1", "01_1", "1_01", "00_0", "1_00",
		" 1_1", "1_1 ", "1 _1", "1_1\n", "0x1_1", "1_0x1", "1e3_1", "1_1.0", "1_1_",
		"١_١",                    // Arabic-Indic digits
		"9223372036854775808_1",  // stream overflows int64
		"1_18446744073709551616", // seq overflows uint64
		"1,1", "1-1", "stream_1",
	} {
		if stream, seq, err := parseEventID(id); !errors.Is(err, session.ErrUnknownEvent) {
			t.Errorf("parseEventID(%q) = %d, %d, %v; want session.ErrUnknownEvent", id, stream, seq, err)
		}
	}
}

// FuzzParseEventID: parsing never panics; whatever it accepts is exactly
// what EventID makes of the result (one event, one spelling); and every ID
// EventID makes parses back.
func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{"1_0", "1_1", "12_345", "+1_1", "01_1", "1_01", "-1_1", "0_0", "_", "",
		"9223372036854775807_18446744073709551615", "9223372036854775808_0", "1_1_1", "\x00_1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		stream, seq, err := parseEventID(id)
		if err != nil {
			if !errors.Is(err, session.ErrUnknownEvent) {
				t.Fatalf("parseEventID(%q) failed with %v, want session.ErrUnknownEvent", id, err)
			}
			if stream != 0 || seq != 0 {
				t.Fatalf("parseEventID(%q) failed but returned %d, %d", id, stream, seq)
			}
			return
		}
		if stream <= 0 {
			t.Fatalf("parseEventID(%q) accepted stream %d", id, stream)
		}
		if back := eventID(stream, seq); back != id {
			t.Fatalf("parseEventID(%q) = %d, %d, but EventID of that is %q: a non-canonical form was accepted", id, stream, seq, back)
		}
		// And the other way round, from numbers the input suggests.
		s2, q2 := int64(len(id))*7919+1, uint64(len(id))*104729
		if s, q, err := parseEventID(eventID(s2, q2)); err != nil || s != s2 || q != q2 {
			t.Fatalf("eventID(%d, %d) does not parse back: %d, %d, %v", s2, q2, s, q, err)
		}
	})
}

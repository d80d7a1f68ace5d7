package units

import (
	"errors"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Bytes
		err  error
	}{
		{"0", 0, nil},
		{"1048576", MiB, nil},
		{"-1", -1, nil},
		{"512k", 512 * KiB, nil},
		{"512K", 512 * KiB, nil},
		{"16MiB", 16 * MiB, nil},
		{"16 MiB", 16 * MiB, nil},
		{"16mb", 16 * MiB, nil},
		{"1g", GiB, nil},
		{"1.5g", GiB + GiB/2, nil},
		{"2t", 2 * TiB, nil},
		{"100b", 100, nil},
		{"", 0, ErrSize},
		{"lots", 0, ErrSize},
		{"1.5", 0, ErrSize},
		{"k", 0, ErrSize},
		{"12x", 0, ErrSize},
		{"1e3k", 0, ErrSize},
		{"9999999999999t", 0, ErrSize},
		{"9223372036854775807", 1<<63 - 1, nil},
	} {
		got, err := ParseBytes(c.in)
		if !errors.Is(err, c.err) || (err == nil && got != c.want) {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestBytesString(t *testing.T) {
	for b, want := range map[Bytes]string{0: "0", 16 * MiB: "16MiB", 512 * KiB: "512KiB", 1000: "1000", -1: "-1", 3 * GiB: "3GiB"} {
		if got := b.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(b), got, want)
		}
	}
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Duration
		err  error
	}{
		{"30s", Duration(30 * time.Second), nil},
		{"0", 0, nil},
		{"never", Never, nil},
		{"-1s", Never, nil},
		{"5", 0, ErrNeedsUnit},
		{"soon", 0, ErrDuration},
	} {
		var d Duration
		err := d.UnmarshalText([]byte(c.in))
		if !errors.Is(err, c.err) || (err == nil && d != c.want) {
			t.Errorf("%q: %v, %v; want %v, %v", c.in, d, err, c.want, c.err)
		}
	}
	if s := Never.String(); s != "never" {
		t.Errorf("Never.String() = %q", s)
	}
	if s := Duration(90 * time.Second).String(); s != "1m30s" {
		t.Errorf("90s.String() = %q", s)
	}
}

func TestInterval(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Interval
		err  error
	}{
		{"30s", Interval(30 * time.Second), nil},
		{"0", 0, nil},
		{"never", 0, nil},
		{"-1s", 0, ErrNegative},
		{"5", 0, ErrNeedsUnit},
		{"soon", 0, ErrDuration},
	} {
		var i Interval
		err := i.UnmarshalText([]byte(c.in))
		if !errors.Is(err, c.err) || (err == nil && i != c.want) {
			t.Errorf("%q: %v, %v; want %v, %v", c.in, i, err, c.want, c.err)
		}
	}
	if s := Interval(0).String(); s != "never" {
		t.Errorf("Interval(0).String() = %q", s)
	}
}

// FuzzParseBytes: no input panics, and every size read is written back as
// text that reads as the same size.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"0", "16MiB", "512k", "1.5g", "-1", "1048576", " 2 TB ", "1e3", "-0.5m", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		if err != nil {
			return
		}
		text, _ := b.MarshalText()
		var back Bytes
		if err := back.UnmarshalText(text); err != nil || back != b {
			t.Fatalf("%q read as %d, written %q, read back as %d (%v)", s, int64(b), text, int64(back), err)
		}
	})
}

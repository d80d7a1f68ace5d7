// Package units holds the typed values of options that are written as text
// on a command line, in an environment variable or in a configuration file:
// a size in bytes (Bytes), and durations that may be "never": Duration,
// whose never is negative (its zero is left to the option, often "the
// default"), and Interval, whose zero is never.
// Each implements encoding.TextUnmarshaler, so that flag.TextVar, envconfig
// and encoding/json decode it the same way, and encoding.TextMarshaler, so
// that --help shows a default as a user would write it. A value is checked
// once, where it is read: nothing downstream parses a string again.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bytes is a size in bytes. It reads a whole number of bytes ("1048576"),
// or a number with a unit: k, m, g, t (or kb, kib, mb, mib...; any case)
// are powers of 1024, as in Docker's memory limits ("512m"), and a
// fraction is allowed before a unit ("1.5g"). A negative value is read
// too ("-1"): what it means is the option's (often "no limit").
type Bytes int64

// Multiples of a byte.
const (
	KiB Bytes = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// ErrSize is what UnmarshalText returns for text that is not a size.
var ErrSize = errors.New("want a size such as 512k, 16MiB, 1g or a number of bytes")

// sizeUnits are the units a size may carry, lower-cased.
var sizeUnits = map[string]Bytes{
	"": 1, "b": 1,
	"k": KiB, "kb": KiB, "kib": KiB,
	"m": MiB, "mb": MiB, "mib": MiB,
	"g": GiB, "gb": GiB, "gib": GiB,
	"t": TiB, "tb": TiB, "tib": TiB,
}

// ParseBytes reads a size as UnmarshalText does.
func ParseBytes(s string) (Bytes, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[unit]
	if !ok || num == "" {
		return 0, ErrSize
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n > math.MaxInt64/int64(mult) || n < math.MinInt64/int64(mult) {
			return 0, fmt.Errorf("%w (this one is too large)", ErrSize)
		}
		return Bytes(n) * mult, nil
	}
	if mult == 1 {
		return 0, ErrSize // a fraction of a byte
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, ErrSize
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 || v <= math.MinInt64 {
		return 0, fmt.Errorf("%w (this one is too large)", ErrSize)
	}
	return Bytes(v), nil
}

// String writes the size in the largest binary unit that divides it
// ("16MiB"), or in bytes ("1000").
func (b Bytes) String() string {
	if b != 0 {
		for _, u := range []struct {
			name string
			n    Bytes
		}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
			if b%u.n == 0 {
				return strconv.FormatInt(int64(b/u.n), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalText writes the size as String does.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a size (see Bytes). Its error, ErrSize, says what a
// size looks like; the caller names the option and the text.
func (b *Bytes) UnmarshalText(text []byte) error {
	v, err := ParseBytes(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a time.Duration for an option that can also be "never":
// Never, or any negative duration, is written "never". Whether zero means
// a default or never is the option's to say; Duration keeps it zero.
type Duration time.Duration

// Never is the Duration that never expires.
const Never Duration = -1

// ErrNeedsUnit is what UnmarshalText returns for a bare number, such as a
// number of seconds written without its unit: "30" is not 30s.
var ErrNeedsUnit = errors.New("a duration needs a unit")

// ErrDuration is what UnmarshalText returns for other text that is not a
// duration.
var ErrDuration = errors.New("want a duration such as 30s, 5m or 1h, or never")

// IsNever reports whether d is never.
func (d Duration) IsNever() bool { return d < 0 }

func (d Duration) String() string {
	if d.IsNever() {
		return "never"
	}
	return time.Duration(d).String()
}

// MarshalText writes the duration as String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads "never" (Never) or a duration as time.ParseDuration
// does; a negative duration is read as Never. A bare number is refused
// with ErrNeedsUnit, other text with ErrDuration.
func (d *Duration) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if s == "never" {
		*d = Never
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
			return ErrNeedsUnit
		}
		return ErrDuration
	}
	if v < 0 {
		v = time.Duration(Never)
	}
	*d = Duration(v)
	return nil
}

// Interval is a time.Duration for an option whose zero means never, such as
// how often to do something: "never" and "0" read as zero, which is written
// "never". A negative duration is refused (ErrNegative).
type Interval time.Duration

// ErrNegative is what Interval.UnmarshalText returns for a negative
// duration.
var ErrNegative = errors.New("want 0 (never) or more")

// IsNever reports whether i is never (zero).
func (i Interval) IsNever() bool { return i == 0 }

func (i Interval) String() string {
	if i.IsNever() {
		return "never"
	}
	return time.Duration(i).String()
}

// MarshalText writes the interval as String does.
func (i Interval) MarshalText() ([]byte, error) { return []byte(i.String()), nil }

// UnmarshalText reads "never" or a duration of 0 (both zero) or more; a
// negative duration is refused with ErrNegative, a bare number with
// ErrNeedsUnit, other text with ErrDuration.
func (i *Interval) UnmarshalText(text []byte) error {
	if strings.TrimSpace(string(text)) == "never" {
		*i = 0
		return nil
	}
	var d Duration
	if err := d.UnmarshalText(text); err != nil {
		return err
	}
	if d.IsNever() {
		return ErrNegative
	}
	*i = Interval(d)
	return nil
}

// Package logx makes the bridge's loggers: slog on a writer (stderr), in
// the format and from the level that a command's flags or variables name.
// The words of its errors are those of the flags' help: a command adds
// the flag and the value (--log-format "xml": want text or json).
package logx

import (
	"errors"
	"io"
	"log/slog"
)

// Format is the form of each log record: Text (slog's key=value lines,
// the default) or JSON (one object per line).
type Format string

const (
	Text Format = "text"
	JSON Format = "json"
)

// UnmarshalText accepts "text" and "json", exactly.
func (f *Format) UnmarshalText(b []byte) error {
	switch v := Format(b); v {
	case Text, JSON:
		*f = v
		return nil
	}
	return errors.New("want text or json")
}

// MarshalText is the name UnmarshalText takes; the zero Format is "".
func (f Format) MarshalText() ([]byte, error) { return []byte(f), nil }

// ParseLevel reads a level as slog.Level.UnmarshalText does (debug, info,
// warn, error, in any case, with an optional offset such as info+2).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, errors.New("want debug, info, warn or error")
	}
	return l, nil
}

// New is a logger writing records of level and above to w in format f;
// any Format but JSON means Text.
func New(w io.Writer, f Format, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if f == JSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

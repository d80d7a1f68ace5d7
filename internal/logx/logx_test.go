package logx

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Format
		err  string
	}{
		{"text", Text, ""},
		{"json", JSON, ""},
		{"JSON", "", "want text or json"},
		{"", "", "want text or json"},
		{"xml", "", "want text or json"},
	} {
		var f Format
		err := f.UnmarshalText([]byte(c.in))
		if f != c.want || (err == nil) != (c.err == "") || err != nil && err.Error() != c.err {
			t.Errorf("%q: %q, %v; want %q, %q", c.in, f, err, c.want, c.err)
		}
	}
	if b, _ := JSON.MarshalText(); string(b) != "json" {
		t.Errorf("MarshalText: %q", b)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError, "info+2": slog.LevelInfo + 2} {
		if l, err := ParseLevel(in); err != nil || l != want {
			t.Errorf("%q: %v, %v; want %v", in, l, err, want)
		}
	}
	for _, in := range []string{"", "loud", "info+"} {
		if _, err := ParseLevel(in); err == nil || err.Error() != "want debug, info, warn or error" {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// New writes records of its level and above, in its format.
func TestNew(t *testing.T) {
	var b bytes.Buffer
	l := New(&b, JSON, slog.LevelWarn)
	l.Info("dropped")
	l.Warn("kept", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["msg"] != "kept" || rec["level"] != "WARN" || rec["k"] != 1.0 {
		t.Errorf("JSON: %q (%v)", b.String(), err)
	}
	b.Reset()
	New(&b, Text, slog.LevelDebug).Debug("shown", "k", "v")
	if s := b.String(); !strings.Contains(s, "level=DEBUG msg=shown k=v\n") {
		t.Errorf("text: %q", s)
	}
}

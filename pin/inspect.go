package pin

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Inspection is what inspect checks in the strings of an item.
type Inspection struct {
	// MaxDescriptionBytes bounds the description of an item. Zero means
	// DefaultMaxDescriptionBytes; negative means no limit.
	MaxDescriptionBytes int
	// AllowHiddenUnicode accepts strings holding invisible or
	// direction-changing characters. False (the default) refuses them.
	AllowHiddenUnicode bool
}

func (in Inspection) maxDescription() int {
	if in.MaxDescriptionBytes == 0 {
		return DefaultMaxDescriptionBytes
	}
	return in.MaxDescriptionBytes
}

// hidden names the class of a character that a human reviewing a
// description does not see, or that reorders what they see, or "".
func hidden(r rune) string {
	switch {
	case r >= 0xE0000 && r <= 0xE007F:
		// Tag characters: invisible, and read by models as ASCII (the
		// "ASCII smuggling" of hidden instructions).
		return "a Unicode tag character, invisible"
	case r == 0x200B || r == 0x200C || r == 0x200D || r == 0x2060 || r == 0xFEFF || r == 0x180E || (r >= 0x2061 && r <= 0x2064):
		return "a zero-width character"
	case r == 0x200E || r == 0x200F || r == 0x061C || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069):
		return "a bidirectional control, which reorders the text shown"
	}
	return ""
}

// inspect returns the problems of an item of kind k, "" if none: the first
// hidden character in any string of the digested members (a description
// inside an input schema is read by the model too), and a description over
// the limit.
func (in Inspection) inspect(k *Kind, item []byte) string {
	sel, err := selectMembers(k, item)
	if err != nil {
		return err.Error()
	}
	if max := in.maxDescription(); max > 0 {
		if raw, ok := sel["description"]; ok {
			var d string
			if json.Unmarshal(raw, &d) == nil && len(d) > max {
				return fmt.Sprintf("its description is %d bytes, over the limit of %d (--max-description-bytes)", len(d), max)
			}
		}
	}
	if in.AllowHiddenUnicode {
		return ""
	}
	for _, m := range k.Members {
		raw, ok := sel[m]
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Sprintf("its %s is not valid JSON: %v", m, err)
		}
		if p := hiddenIn(v); p != "" {
			return fmt.Sprintf("its %s holds %s", m, p)
		}
	}
	return ""
}

// hiddenIn finds the first hidden character in the strings (and member
// names) of a decoded JSON value.
func hiddenIn(v any) string {
	switch v := v.(type) {
	case string:
		for i, r := range v {
			if what := hidden(r); what != "" {
				return fmt.Sprintf("U+%04X (%s) at byte %d of \"%s\"", r, what, i, visible(v))
			}
		}
	case []any:
		for _, e := range v {
			if p := hiddenIn(e); p != "" {
				return p
			}
		}
	case map[string]any:
		for k, e := range v {
			if p := hiddenIn(k); p != "" {
				return p
			}
			if p := hiddenIn(e); p != "" {
				return p
			}
		}
	}
	return ""
}

// visible shows a string for a log with its hidden characters escaped,
// cut to 80 bytes.
func visible(s string) string {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if len(out) > 80 {
			return string(out) + "…"
		}
		if hidden(r) != "" {
			out = fmt.Appendf(out, `\u{%X}`, r)
			continue
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

package bridge

import (
	"strconv"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/session"
)

// SSE event IDs name a position in a session's event log: "<stream>_<seq>",
// where seq counts the events of the stream from 1 and "<stream>_0" (the
// priming event's ID) names the position before its first event. So
// Last-Event-ID alone says what to replay.

// appendEventID appends the ID of event seq of a stream to b.
func appendEventID(b []byte, stream int64, seq uint64) []byte {
	b = strconv.AppendInt(b, stream, 10)
	b = append(b, '_')
	return strconv.AppendUint(b, seq, 10)
}

// eventID formats the ID of event seq of a stream.
func eventID(stream int64, seq uint64) string {
	var b [41]byte // two 20-digit numbers and "_": one allocation, the string
	return string(appendEventID(b[:0], stream, seq))
}

// parseEventID parses an ID made by eventID. It accepts only the canonical
// form eventID makes (decimal digits, no sign, no leading zero, a stream
// above zero), so that one event has one ID: any other string fails with
// session.ErrUnknownEvent.
func parseEventID(id string) (stream int64, seq uint64, err error) {
	a, b, ok := strings.Cut(id, "_")
	// strconv accepts a sign ("+1"); digits alone make the form canonical.
	if !ok || !canonicalDigits(a) || !canonicalDigits(b) {
		return 0, 0, session.ErrUnknownEvent
	}
	stream, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || stream <= 0 {
		return 0, 0, session.ErrUnknownEvent
	}
	return stream, seq, nil
}

// canonicalDigits reports whether s is a decimal number without sign or
// leading zero.
func canonicalDigits(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

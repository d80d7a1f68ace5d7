package jsonrpc

import "unicode/utf8"

// The members of params that the bridge reads, and the rule that guards
// them.
//
// An envelope member given twice or in another case makes a message
// invalid (scanObject), because a server that decodes names
// case-insensitively (Go's encoding/json: last key wins, "Name" is "name")
// or keeps the first of duplicates would read another message than the
// bridge routed. The same holds one level down: the bridge reads
// params.name and params.uri for its policy, pinning, audit and the
// Mcp-Name header of revision 2026-07-28, params.arguments for audit and
// the Mcp-Param headers, params._meta for progress and the stateless front
// end, and a few more. {"name":"echo","Name":"admin_delete"} was checked,
// audited and pinned as echo and ran admin_delete. So
// Parse refuses a request or notification whose params give one of the
// members listed in guardedParams twice, or under a name equal to one
// under encoding/json's folding but not the same; and the same for the
// members of params._meta it reads (progressToken, and ParseMeta's names)
// and of the nested objects a guard reads (guardedNested). Members the
// bridge does not read are the server's business: an arguments object may
// well hold "Name" and "name".

// guardedNested are the objects inside params whose members a guard reads,
// with those members: policy reads ref.type, ref.name and ref.uri of a
// completion/complete, and notifications.resourceSubscriptions of a
// subscriptions/listen.
var (
	refMembers           = []string{"type", "name", "uri"}
	notificationsMembers = []string{"resourceSubscriptions"}
	progressTokenOnly    = []string{"progressToken"}
)

// maxFolded bounds the folded names compared: a longer one equals no name
// the bridge reads (the longest, io.modelcontextprotocol/clientCapabilities,
// has 42 bytes).
const maxFolded = 64

// foldKey writes into buf the member name raw (as written, escaped or not)
// as encoding/json compares names (bytes.EqualFold: Unicode simple
// folding, so "ſ" is an "s" and "K" (Kelvin) a "k"), every rune replaced by
// the smallest of its folding orbit and ASCII letters in lower case. It
// fails when the result is longer than buf, or holds a rune that does not
// fold to ASCII: such a name equals no name the bridge reads, all ASCII.
func foldKey(buf *[maxFolded]byte, raw []byte, escaped bool) (int, bool) {
	if !escaped && len(raw) <= maxFolded {
		// Names as written in ASCII, the usual kind: lower-case them.
		for i, c := range raw {
			if c >= 0x80 {
				return foldSlow(buf, raw, escaped)
			}
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		return len(raw), true
	}
	return foldSlow(buf, raw, escaped)
}

// foldSlow is foldKey for names with escapes or bytes from 0x80 up.
func foldSlow(buf *[maxFolded]byte, raw []byte, escaped bool) (int, bool) {
	if len(raw) > 6*maxFolded { // 6: the length of \uXXXX
		return 0, false
	}
	n := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		var r rune
		switch {
		case c == '\\' && escaped: // an escape the scanner has checked
			switch raw[i+1] {
			case 'u':
				r = hexValue(raw[i+2])<<12 | hexValue(raw[i+3])<<8 | hexValue(raw[i+4])<<4 | hexValue(raw[i+5])
				i += 6
			case 'b':
				r, i = '\b', i+2
			case 'f':
				r, i = '\f', i+2
			case 'n':
				r, i = '\n', i+2
			case 'r':
				r, i = '\r', i+2
			case 't':
				r, i = '\t', i+2
			default: // '"', '\\' or '/': itself
				r, i = rune(raw[i+1]), i+2
			}
		case c < 0x80:
			r = rune(c)
			i++
		default:
			var size int
			r, size = utf8.DecodeRune(raw[i:])
			i += size
		}
		if r >= 0x80 {
			if r = smallestFold(r); r >= 0x80 {
				return 0, false
			}
		}
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		if n == len(buf) {
			return 0, false
		}
		buf[n] = byte(r)
		n++
	}
	return n, true
}

// foldedMember returns the name the bridge knows that a folded name (see
// foldKey) equals, or nameOther.
func foldedMember(f []byte) name {
	switch string(f) {
	case "jsonrpc":
		return nameJSONRPC
	case "id":
		return nameID
	case "method":
		return nameMethod
	case "params":
		return nameParams
	case "result":
		return nameResult
	case "error":
		return nameError
	case "_meta":
		return nameMeta
	case "progresstoken":
		return nameProgressToken
	case "requestid":
		return nameRequestID
	case "name":
		return nameName
	case "arguments":
		return nameArguments
	case "uri":
		return nameURI
	case "ref":
		return nameRef
	case "cursor":
		return nameCursor
	case "requeststate":
		return nameRequestState
	case "inputresponses":
		return nameInputResponses
	case "notifications":
		return nameNotifications
	case "protocolversion":
		return nameProtocolVersion
	}
	return nameOther
}

// foldedByLen lists, by length, the names foldedMember knows, in lower
// case: foldedASCII compares a name with the few of its length, most
// often only its first byte.
var foldedByLen = func() (t [len("protocolversion") + 1][]struct {
	lower string
	n     name
}) {
	for _, s := range []string{"jsonrpc", "id", "method", "params", "result", "error", "_meta", "progresstoken",
		"requestid", "name", "arguments", "uri", "ref", "cursor", "requeststate", "inputresponses", "notifications", "protocolversion"} {
		t[len(s)] = append(t[len(s)], struct {
			lower string
			n     name
		}{s, foldedMember([]byte(s))})
	}
	return t
}()

// nameStarts marks the ASCII bytes a name foldedMember knows may start
// with, in either case.
var nameStarts = func() (t [0x80]bool) {
	for _, cs := range foldedByLen {
		for _, c := range cs {
			b := c.lower[0]
			t[b] = true
			if 'a' <= b && b <= 'z' {
				t[b-('a'-'A')] = true
			}
		}
	}
	return t
}()

// foldedASCII is foldedName for a name written in ASCII without escapes,
// the usual kind, without folding it into a buffer first: this runs for
// every member of params the bridge does not read.
func foldedASCII(raw []byte) name {
	if len(raw) >= len(foldedByLen) {
		return nameOther
	}
next:
	for _, c := range foldedByLen[len(raw)] {
		for i := 0; i < len(raw); i++ {
			b := raw[i]
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			if b != c.lower[i] {
				continue next
			}
		}
		return c.n
	}
	return nameOther
}

// guardedParam reports whether n is a member of params the bridge reads:
// given twice, or in another case, it makes a request ambiguous.
func guardedParam(n name) bool { return n >= nameMeta }

// guardFolded reports whether the member name key (as written; f is its
// folded form) makes an object ambiguous for a reader of names: it is
// names[i] given again (seen has bit i for each names[i] met before; only
// the first 64 names are counted), or equals one of names under
// encoding/json's folding without being it. Names that are not ASCII are
// not guarded.
func guardFolded(f, key []byte, escaped bool, names []string, seen *uint64) bool {
	for i, name := range names {
		if !equalFolded(f, name) {
			continue
		}
		// Unescaped, the bytes are the name (ASCII) or another one.
		if exact := !escaped && string(key) == name || escaped && keyIs(key, escaped, name); !exact {
			return true
		}
		if i < 64 {
			bit := uint64(1) << i
			if *seen&bit != 0 {
				return true
			}
			*seen |= bit
		}
	}
	return false
}

// equalFolded reports whether the folded name f (see foldKey) is the ASCII
// name under ASCII case folding.
func equalFolded(f []byte, name string) bool {
	if len(f) != len(name) {
		return false
	}
	for i := 0; i < len(f); i++ {
		c := name[i]
		if c >= 0x80 {
			return false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if f[i] != c {
			return false
		}
	}
	return true
}

// guardedObject walks the object at pos, a member of params whose members
// names a guard reads, marking the message ambiguous where one of them is
// given twice or in another case. Anything else at pos is skipped.
func (m *members) guardedObject(s *scanner, names []string) bool {
	if s.peek() != '{' {
		return s.skipValue()
	}
	var seen uint64
	more, ok := s.openObject()
	for ok && more {
		key, escaped, valid := s.key()
		if !valid {
			return false
		}
		var buf [maxFolded]byte
		if n, foldable := foldKey(&buf, key, escaped); foldable && guardFolded(buf[:n], key, escaped, names, &seen) {
			m.paramsAmbiguous = true
		}
		if ok = s.skipValue(); ok {
			more, ok = s.nextMember()
		}
	}
	return ok
}

// LookupUnique is Lookup for a reader that decides on the value: it also
// reports ambiguous when obj gives name twice, or under a name equal to it
// under encoding/json's folding (which many servers decode names with)
// but not the same; the caller must then refuse the message rather than
// act on one of the values. name must be ASCII. It is for the members a
// guard reads that Parse does not know of, such as the arguments of a tool
// an Mcp-Param header mirrors.
func LookupUnique(obj []byte, name string) (value []byte, ok, ambiguous bool) {
	s := scanner{data: obj}
	if s.peek() != '{' {
		return nil, false, false
	}
	names := [1]string{name}
	var seen uint64
	more, valid := s.openObject()
	for valid && more {
		key, escaped, good := s.key()
		if !good {
			return nil, false, false
		}
		var v []byte
		if !s.valueInto(&v) {
			return nil, false, false
		}
		var buf [maxFolded]byte
		if n, foldable := foldKey(&buf, key, escaped); foldable && equalFolded(buf[:n], name) {
			if guardFolded(buf[:n], key, escaped, names[:], &seen) {
				ambiguous = true
			}
			if keyIs(key, escaped, name) {
				value = v // the last, as Lookup reads it
			}
		}
		more, valid = s.nextMember()
	}
	if !valid {
		return nil, false, false
	}
	return value, value != nil, ambiguous
}

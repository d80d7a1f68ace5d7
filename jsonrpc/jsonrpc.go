// Package jsonrpc is the bridge's wire layer: the envelope of a JSON-RPC 2.0
// message (its kind, id, method and the few params members that routing,
// ID rewriting and policy need), batches, error responses and the error
// codes, shared by every package above it.
//
// The bridge forwards messages; it never decodes more of one than its
// envelope. Parse reads a message once, validating all of it as
// encoding/json would, and reports where the members it found sit in the
// input (Span), so that a caller can rewrite an id or a progress token
// with one copy of the message (Rewrite) and read a member such as
// params.name or one of params._meta without decoding the rest.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Kind is the kind of a JSON-RPC message.
type Kind uint8

const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// ID is a JSON-RPC id in a canonical form usable as a map key: "s" followed
// by the string for string ids, "n" followed by the number for numeric ids.
// The zero ID means "no id". IDs are only ever used to route; the bytes sent
// on either side are always the peer's own, unchanged.
type ID string

// Span locates a value in the message an Envelope was parsed from: its
// bytes are data[Start:End], exactly as written. The zero Span means the
// member is absent.
type Span struct{ Start, End int32 }

// In returns the bytes of s in data (capped, so appending to them cannot
// overwrite what follows), or nil for the zero Span.
func (s Span) In(data []byte) []byte {
	if s.End == 0 {
		return nil
	}
	return data[s.Start:s.End:s.End]
}

// IsZero reports whether s locates nothing.
func (s Span) IsZero() bool { return s.End == 0 }

// MaxMessageBytes is the size from which Parse refuses a message: Spans
// hold 32-bit positions. The bridge's own bound (--max-message-bytes) is
// far lower.
const MaxMessageBytes = 1<<31 - 1

// Envelope is what the bridge needs to know of a JSON-RPC message to route it.
// Parsing it never copies the message's params or result.
type Envelope struct {
	Kind   Kind
	ID     ID     // requests and responses
	Method string // requests and notifications
	// ProgressToken is params._meta.progressToken of a request, or
	// params.progressToken of a notifications/progress.
	ProgressToken ID
	// RequestID is params.requestId of a notifications/cancelled.
	RequestID ID
	// IsError reports a response carrying "error" rather than "result".
	IsError bool

	// Where the values above, and a few more that policy reads, are in the
	// message. IDAt locates the id whenever there is one, null included.
	// ProgressTokenAt and RequestIDAt locate the members ProgressToken and
	// RequestID were read from, exactly when those are set.
	IDAt, ProgressTokenAt, RequestIDAt Span
	// NameAt is params.name of a request or notification, when it is a
	// string (the tool of a tools/call, the prompt of a prompts/get): see
	// Name. MetaAt is params._meta when it is an object: see Lookup.
	// ArgumentsAt is params.arguments of a request or notification (of a
	// tools/call or prompts/get), the last one if given twice, as Lookup
	// finds it.
	NameAt, MetaAt, ArgumentsAt Span
	// ResultAt is the result of a response that has one (not an error).
	ResultAt Span
}

// Message is one JSON-RPC message with its envelope.
type Message struct {
	Data []byte
	Env  Envelope
}

// Name decodes params.name of the message data, whose Envelope e is, or
// returns "" if it has none. Names of tools are short: this costs one
// small allocation, and only when called.
func (e *Envelope) Name(data []byte) string {
	if e.NameAt.IsZero() {
		return ""
	}
	return stringValue(e.NameAt.In(data))
}

// Errors of Parse. All wrap ErrInvalidMessage.
var (
	ErrInvalidMessage = errors.New("invalid JSON-RPC message")
	errParse          = &parseError{"not valid JSON"}
	errAmbiguous      = &parseError{`a member among "jsonrpc", "id", "method", "params", "result" and "error" is given twice, or in another case`}
	// A server reading names case-insensitively would act on another
	// value than the bridge's guards checked.
	errAmbiguousParams = &parseError{`a member of "params" that the bridge reads (such as "name", "uri", "arguments", "_meta", or a member of "_meta") is given twice, or in another case`}
)

type parseError struct{ what string }

func (e *parseError) Error() string { return "invalid JSON-RPC message: " + e.what }
func (e *parseError) Unwrap() error { return ErrInvalidMessage }

// IsParseError reports whether err means the input was not JSON at all
// (JSON-RPC -32700), as opposed to JSON that is not a valid message (-32600).
func IsParseError(err error) bool { return err == errParse }

// members holds the members of a message that routing needs, each as the
// bytes of its value (nil when absent). Scanning fills it; the rules of
// JSON-RPC are applied only once the whole input is known to be JSON, so
// that broken JSON anywhere is always a parse error. Names are matched
// exactly (JSON-RPC member names are case-sensitive), and a name given
// twice counts as given last, as in a Go map; but an envelope member given
// twice or in another case makes the message ambiguous, and so invalid.
type members struct {
	jsonrpc, id, method []byte
	result, error       bool
	ambiguous           bool
	// paramsAmbiguous: a member of params the bridge reads is given twice
	// or in another case (see guard.go).
	paramsAmbiguous bool
	// From params, if it is an object; from params._meta for metaToken.
	metaToken, progressToken, requestID, name, meta, arguments []byte
	// Where id, result and the members of params are in the input.
	idAt, resultAt, metaTokenAt, progressTokenAt, requestIDAt, nameAt, metaAt, argumentsAt Span
}

// scanMessage validates data as exactly one JSON value and, if it is an
// object, fills m from its members, and values from the members of
// params._meta named names (ParseMeta; they are parameters rather than
// members of m, which would put the caller's values on the heap).
func (m *members) scanMessage(data []byte, names []string, values [][]byte) (valid, object bool) {
	s := scanner{data: data}
	if s.peek() == '{' {
		object = true
		valid = m.scanObject(&s, names, values)
	} else {
		valid = s.skipValue()
	}
	s.skipSpace()
	return valid && s.pos == len(data), object
}

// scanObject reads the message object at s.pos. It marks the message
// ambiguous when an envelope member is given twice, or under a name that
// differs from it only in case: a server that decodes names
// case-insensitively, or keeps the first of duplicates, would read another
// message than the bridge routed.
func (m *members) scanObject(s *scanner, names []string, values [][]byte) bool {
	var seen uint8 // bit n: the envelope member n was given
	more, ok := s.openObject()
	for ok && more {
		key, escaped, valid := s.key()
		if !valid {
			return false
		}
		n := memberName(key, escaped)
		switch {
		case n == nameOther:
			if k := foldedName(key, escaped); k != nameOther && k <= nameError {
				m.ambiguous = true
			}
		case n <= nameError:
			if seen&(1<<n) != 0 {
				m.ambiguous = true
			}
			seen |= 1 << n
		}
		if ok = m.member(s, n, names, values); ok {
			more, ok = s.nextMember()
		}
	}
	return ok
}

// member reads the value of the message's member n at s.pos.
func (m *members) member(s *scanner, n name, names []string, values [][]byte) bool {
	switch n {
	case nameJSONRPC:
		return s.valueInto(&m.jsonrpc)
	case nameID:
		return s.valueAt(&m.id, &m.idAt)
	case nameMethod:
		return s.valueInto(&m.method)
	case nameResult:
		m.result = true
		var v []byte
		return s.valueAt(&v, &m.resultAt)
	case nameError:
		m.error = true
		return s.skipValue()
	case nameParams:
		m.metaToken, m.progressToken, m.requestID, m.name, m.meta, m.arguments = nil, nil, nil, nil, nil, nil
		m.paramsAmbiguous = false
		clear(values)
		if s.peek() != '{' {
			return s.skipValue() // by-position params: nothing to route on
		}
		return m.params(s, names, values)
	}
	return s.skipValue()
}

// params walks the params object whose '{' is at pos, for the members
// routing needs. (A loop of its own rather than a function per member: a
// call through a func value for each member of every request.)
func (m *members) params(s *scanner, names []string, values [][]byte) bool {
	var seen uint32 // bit n: the guarded member n was given
	more, ok := s.openObject()
	for ok && more {
		key, escaped, valid := s.key()
		if !valid {
			return false
		}
		n := memberName(key, escaped)
		switch {
		case guardedParam(n):
			if seen&(1<<n) != 0 {
				m.paramsAmbiguous = true
			}
			seen |= 1 << n
		case n == nameOther:
			if guardedParam(foldedName(key, escaped)) {
				m.paramsAmbiguous = true
			}
		}
		switch n {
		case nameRef:
			ok = m.guardedObject(s, refMembers)
		case nameNotifications:
			ok = m.guardedObject(s, notificationsMembers)
		case nameProgressToken:
			ok = s.valueAt(&m.progressToken, &m.progressTokenAt)
		case nameRequestID:
			ok = s.valueAt(&m.requestID, &m.requestIDAt)
		case nameName:
			ok = s.valueAt(&m.name, &m.nameAt)
		case nameArguments:
			ok = s.valueAt(&m.arguments, &m.argumentsAt)
		case nameMeta:
			m.metaToken, m.meta = nil, nil
			clear(values)
			if s.peek() != '{' {
				ok = s.skipValue()
				break
			}
			start := s.pos
			ok = m.metaMembers(s, names, values)
			m.meta, m.metaAt = s.data[start:s.pos], Span{int32(start), int32(s.pos)}
		default:
			ok = s.skipValue()
		}
		if ok {
			more, ok = s.nextMember()
		}
	}
	return ok
}

// metaMembers walks the _meta object whose '{' is at pos, for its
// progressToken and ParseMeta's names.
func (m *members) metaMembers(s *scanner, names []string, values [][]byte) bool {
	var seenToken, seenNames uint64
	more, ok := s.openObject()
	for ok && more {
		key, escaped, valid := s.key()
		if !valid {
			return false
		}
		isToken := memberName(key, escaped) == nameProgressToken
		if isToken { // exact, the usual case: no folding to compare
			if seenToken != 0 {
				m.paramsAmbiguous = true
			}
			seenToken = 1
		}
		// Unescaped ASCII, the usual kind, folds to a name of its own
		// length; when it is exactly one of names, it equals no other
		// name under folding (ParseMeta's names are distinct under
		// folding, and none a variant of progressToken): no folding to
		// compare then.
		plain := !escaped && isASCII(key)
		if exact := plainMember(key, plain, isToken, names); exact >= 0 {
			if exact < 64 {
				if seenNames&(1<<exact) != 0 {
					m.paramsAmbiguous = true
				}
				seenNames |= 1 << exact
			}
		} else if (!isToken || len(names) > 0) && (!plain || foldsLike(len(key), names)) {
			var buf [maxFolded]byte
			if n, foldable := foldKey(&buf, key, escaped); foldable &&
				(!isToken && guardFolded(buf[:n], key, escaped, progressTokenOnly, &seenToken) || guardFolded(buf[:n], key, escaped, names, &seenNames)) {
				m.paramsAmbiguous = true
			}
		}
		switch {
		case isToken:
			ok = s.valueAt(&m.metaToken, &m.metaTokenAt)
			matchNames(key, escaped, m.metaToken, names, values)
		case len(names) == 0:
			ok = s.skipValue()
		default:
			var v []byte
			ok = s.valueInto(&v)
			matchNames(key, escaped, v, names, values)
		}
		if ok {
			more, ok = s.nextMember()
		}
	}
	return ok
}

// plainMember is the index of the name a plain (unescaped ASCII) key of
// _meta is, or -1 (also for the progressToken, and for keys not plain).
func plainMember(key []byte, plain, isToken bool, names []string) int {
	if !plain || isToken {
		return -1
	}
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	return -1
}

// foldsLike reports whether a plain key n bytes long may equal
// progressToken or one of names under folding: it has their length.
func foldsLike(n int, names []string) bool {
	if n == len("progressToken") {
		return true
	}
	for _, name := range names {
		if n == len(name) {
			return true
		}
	}
	return false
}

// valueInto scans a value into *dst, reporting whether it was valid.
func (s *scanner) valueInto(dst *[]byte) bool {
	var ok bool
	*dst, ok = s.value()
	return ok
}

// valueAt is valueInto that also records where the value is.
func (s *scanner) valueAt(dst *[]byte, at *Span) bool {
	s.skipSpace()
	start := s.pos
	ok := s.skipValue()
	*dst, *at = s.data[start:s.pos], Span{int32(start), int32(s.pos)}
	return ok
}

// name is a member name the bridge looks for.
type name uint8

const (
	nameOther name = iota
	nameJSONRPC
	nameID
	nameMethod
	nameParams
	nameResult
	nameError
	nameMeta
	nameProgressToken
	nameRequestID
	nameName
	nameArguments
	nameURI
	nameRef
	nameCursor
	nameRequestState
	nameInputResponses
	nameNotifications
	nameProtocolVersion
)

// memberName returns the member name the bridge knows that raw (as
// written, escaped or not) stands for, or nameOther. Every known name is
// ASCII, so a name whose unescaped form is not ASCII is another name,
// whatever encoding/json would replace its bytes with.
func memberName(raw []byte, escaped bool) name {
	if escaped {
		var buf [len("protocolVersion")]byte
		n, ok := unescapeASCII(buf[:], raw)
		if !ok {
			return nameOther
		}
		raw = buf[:n]
	}
	switch string(raw) {
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
	case "progressToken":
		return nameProgressToken
	case "requestId":
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
	case "requestState":
		return nameRequestState
	case "inputResponses":
		return nameInputResponses
	case "notifications":
		return nameNotifications
	case "protocolVersion":
		return nameProtocolVersion
	}
	return nameOther
}

// unescapeASCII unescapes the contents of a valid JSON string into buf. It
// fails when the result does not fit in buf or is not ASCII.
func unescapeASCII(buf, s []byte) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			i++
			switch s[i] {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'u':
				r := hexValue(s[i+1])<<12 | hexValue(s[i+2])<<8 | hexValue(s[i+3])<<4 | hexValue(s[i+4])
				if r >= utf8.RuneSelf {
					return 0, false
				}
				c = byte(r)
				i += 4
			default: // '"', '\\' or '/': itself
				c = s[i]
			}
		}
		if c >= utf8.RuneSelf || n == len(buf) {
			return 0, false
		}
		buf[n] = c
		n++
	}
	return n, true
}

// hexValue is the value of a hex digit the scanner has checked.
func hexValue(c byte) rune {
	switch {
	case c <= '9':
		return rune(c - '0')
	case c >= 'a':
		return rune(c - 'a' + 10)
	}
	return rune(c - 'A' + 10)
}

// Parse reads the routing envelope of one JSON-RPC message. It reads the
// input once, validating all of it as encoding/json would, and copies
// nothing of it but the strings of the Envelope; it neither keeps nor
// modifies data.
func Parse(data []byte) (Envelope, error) {
	var m members
	return m.parse(data, nil, nil)
}

// ParseMeta is Parse that also looks up members of params._meta in the
// same reading of data: values[i] is set to the value of names[i] as
// LookupEach of the Envelope's MetaAt would set it, or nil (always, when
// the Envelope has no MetaAt, or on error). values must be as long as
// names. A request's _meta is otherwise read twice, by Parse and by
// LookupEach. names must be distinct under case folding, and none a case
// variant of progressToken.
func ParseMeta(data []byte, names []string, values [][]byte) (Envelope, error) {
	values = values[:len(names)]
	clear(values)
	var m members
	env, err := m.parse(data, names, values)
	if err != nil || env.MetaAt.IsZero() {
		clear(values)
	}
	return env, err
}

func (m *members) parse(data []byte, names []string, values [][]byte) (Envelope, error) {
	if len(data) > MaxMessageBytes {
		return Envelope{}, &parseError{"a message must be smaller than 2 GiB"}
	}
	switch valid, object := m.scanMessage(data, names, values); {
	case !valid:
		return Envelope{}, errParse
	case !object:
		return Envelope{}, &parseError{"a message must be a JSON object"}
	}
	return m.envelope()
}

// envelope applies the rules of JSON-RPC to the members of a message.
func (m *members) envelope() (Envelope, error) {
	if m.ambiguous {
		return Envelope{}, errAmbiguous
	}
	if !isString(m.jsonrpc, "2.0") {
		return Envelope{}, &parseError{`"jsonrpc" must be "2.0"`}
	}
	var env Envelope
	if m.id != nil {
		id, err := canonicalID(m.id)
		if err != nil {
			return Envelope{}, err
		}
		env.ID, env.IDAt = id, m.idAt
	}
	method := m.method
	if method != nil && method[0] == 'n' {
		method = nil // a null method is no method, as it was with encoding/json
	}
	switch {
	case method != nil:
		if m.paramsAmbiguous {
			return Envelope{}, errAmbiguousParams
		}
		if method[0] != '"' {
			return Envelope{}, &parseError{`"method" must be a string`}
		}
		if m.result || m.error {
			return Envelope{}, &parseError{`a message cannot have both "method" and "result" or "error"`}
		}
		if len(method) == len(`""`) {
			return Envelope{}, &parseError{`"method" must not be empty`}
		}
		env.Method = methodName(method)
		env.Kind = KindRequest
		if m.id == nil {
			env.Kind = KindNotification
		} else if env.ID == "" {
			return Envelope{}, &parseError{`a request's "id" must not be null`}
		}
		// Tokens that are not valid ids route nowhere; they do not make
		// the message invalid.
		switch {
		case env.Kind == KindRequest && m.metaToken != nil:
			if env.ProgressToken, _ = canonicalID(m.metaToken); env.ProgressToken != "" {
				env.ProgressTokenAt = m.metaTokenAt
			}
		case env.Method == "notifications/progress" && m.progressToken != nil:
			if env.ProgressToken, _ = canonicalID(m.progressToken); env.ProgressToken != "" {
				env.ProgressTokenAt = m.progressTokenAt
			}
		case env.Method == "notifications/cancelled" && m.requestID != nil:
			if env.RequestID, _ = canonicalID(m.requestID); env.RequestID != "" {
				env.RequestIDAt = m.requestIDAt
			}
		}
		if m.name != nil && m.name[0] == '"' {
			env.NameAt = m.nameAt
		}
		if m.meta != nil {
			env.MetaAt = m.metaAt
		}
		if m.arguments != nil {
			env.ArgumentsAt = m.argumentsAt
		}
	case m.result || m.error:
		if m.result && m.error {
			return Envelope{}, &parseError{`a response cannot have both "result" and "error"`}
		}
		if m.id == nil {
			return Envelope{}, &parseError{`a response needs an "id"`}
		}
		env.Kind = KindResponse
		env.IsError = m.error
		if m.result {
			env.ResultAt = m.resultAt
		}
	default:
		return Envelope{}, &parseError{`a message needs "method", "result" or "error"`}
	}
	return env, nil
}

// IsString reports whether the JSON value raw (a value Lookup returned, or
// the bytes of a Span) is the string want, as encoding/json would decode
// it; without allocating unless raw has escapes.
func IsString(raw []byte, want string) bool { return isString(raw, want) }

// isString reports whether the JSON value raw is the string want.
func isString(raw []byte, want string) bool {
	if len(raw) == 0 || raw[0] != '"' {
		return false
	}
	if inner := raw[1 : len(raw)-1]; string(inner) == want {
		// Bytes as written decode to themselves if valid UTF-8; invalid
		// ones become U+FFFD, and so differ from want.
		return isASCII(inner) || utf8.Valid(inner)
	}
	// Escapes, or invalid UTF-8 that decodes to U+FFFD, may still make want.
	return (bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw)) && stringValue(raw) == want
}

// stringValue decodes a valid JSON string token as encoding/json does,
// invalid UTF-8 becoming U+FFFD. Strings without escapes, the usual kind,
// are copied without encoding/json's help.
func stringValue(raw []byte) string {
	if s := raw[1 : len(raw)-1]; bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s)
	}
	var s string
	_ = json.Unmarshal(raw, &s) // cannot fail: the scanner checked raw
	return s
}

// methodName decodes a method string, sharing the strings of the methods
// of MCP rather than allocating one per message.
func methodName(raw []byte) string {
	switch s := raw[1 : len(raw)-1]; string(s) {
	case "initialize":
		return "initialize"
	case "ping":
		return "ping"
	case "tools/list":
		return "tools/list"
	case "tools/call":
		return "tools/call"
	case "resources/list":
		return "resources/list"
	case "resources/templates/list":
		return "resources/templates/list"
	case "resources/read":
		return "resources/read"
	case "resources/subscribe":
		return "resources/subscribe"
	case "resources/unsubscribe":
		return "resources/unsubscribe"
	case "prompts/list":
		return "prompts/list"
	case "prompts/get":
		return "prompts/get"
	case "completion/complete":
		return "completion/complete"
	case "logging/setLevel":
		return "logging/setLevel"
	case "sampling/createMessage":
		return "sampling/createMessage"
	case "elicitation/create":
		return "elicitation/create"
	case "roots/list":
		return "roots/list"
	case "notifications/initialized":
		return "notifications/initialized"
	case "notifications/progress":
		return "notifications/progress"
	case "notifications/cancelled":
		return "notifications/cancelled"
	case "notifications/message":
		return "notifications/message"
	case "notifications/resources/updated":
		return "notifications/resources/updated"
	case "notifications/resources/list_changed":
		return "notifications/resources/list_changed"
	case "notifications/tools/list_changed":
		return "notifications/tools/list_changed"
	case "notifications/prompts/list_changed":
		return "notifications/prompts/list_changed"
	case "notifications/roots/list_changed":
		return "notifications/roots/list_changed"
	}
	return stringValue(raw)
}

// canonicalID turns a raw JSON id into its map key. Strings and numbers are
// accepted; null is accepted only on error responses by the caller's choice
// (it yields the zero ID). raw is one JSON value, as the scanner found it.
func canonicalID(raw []byte) (ID, error) {
	if len(raw) == 0 {
		return "", &parseError{"empty id"}
	}
	switch raw[0] {
	case '"':
		if s := raw[1 : len(raw)-1]; bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
			return ID("s" + string(s)), nil // one allocation, not two
		}
		return ID("s" + stringValue(raw)), nil
	case 'n':
		return "", nil // null: only meaningful for error responses
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return canonicalNumber(raw)
	}
	return "", &parseError{"id must be a string or a number"}
}

// canonicalNumber is canonicalID for a number: "n" and the number as
// strconv formats an int64 if it is one, else as it formats a float64.
func canonicalNumber(raw []byte) (ID, error) {
	// An integer of at most 18 digits is an int64 and, JSON having no
	// leading zeros, already in canonical form but for "-0".
	if len(raw) <= 18 && isInteger(raw) {
		if raw[0] == '-' {
			if len(raw) == 2 && raw[1] == '0' {
				return smallIDs[0], nil
			}
			return ID("n" + string(raw)), nil
		}
		if len(raw) <= 4 {
			n := 0
			for _, c := range raw {
				n = n*10 + int(c-'0')
			}
			if n < len(smallIDs) {
				return smallIDs[n], nil
			}
		}
		return ID("n" + string(raw)), nil
	}
	s := string(raw)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ID("n" + strconv.FormatInt(i, 10)), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return "", &parseError{"id is not a valid number"}
	}
	return ID("n" + strconv.FormatFloat(f, 'g', -1, 64)), nil
}

// isInteger reports whether the JSON number raw has neither a fraction nor
// an exponent.
func isInteger(raw []byte) bool {
	for _, c := range raw {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// smallIDs are the IDs of the numbers 0 to 1023, which clients count their
// requests from: a message with such an id needs no allocation for it.
// They share one string.
var smallIDs = func() (ids [1024]ID) {
	var b []byte
	ends := make([]int, len(ids))
	for i := range ids {
		b = append(b, 'n')
		b = strconv.AppendInt(b, int64(i), 10)
		ends[i] = len(b)
	}
	all, start := string(b), 0
	for i, end := range ends {
		ids[i] = ID(all[start:end])
		start = end
	}
	return ids
}()

// SplitBatch splits a JSON array of messages into its elements, which are
// sub-slices of data (capped, so appending to one cannot overwrite the
// next). It reports ok=false when data is not an array (after leading white
// space), without reading further.
func SplitBatch(data []byte) (msgs []json.RawMessage, ok bool, err error) {
	s := scanner{data: data}
	if s.peek() != '[' {
		return nil, false, nil
	}
	s.pos++
	s.depth = 1
	if s.peek() == ']' {
		s.pos++
	} else {
		for {
			s.skipSpace()
			start := s.pos
			if !s.skipValue() {
				return nil, true, errParse
			}
			msgs = append(msgs, data[start:s.pos:s.pos])
			c := s.peek()
			if c != ',' && c != ']' {
				return nil, true, errParse
			}
			s.pos++
			if c == ']' {
				break
			}
		}
	}
	if s.skipSpace(); s.pos != len(data) {
		return nil, true, errParse
	}
	if len(msgs) == 0 {
		return nil, true, &parseError{"empty batch"}
	}
	return msgs, true, nil
}

// Error is a JSON-RPC error object. As an error, it is what a request
// answered with an error fails with, and what the interception point
// refuses a request with.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return "JSON-RPC error " + strconv.Itoa(e.Code) + ": " + e.Message
}

// Response renders the error response to the request whose raw id is rawID.
func (e *Error) Response(rawID []byte) []byte {
	return ErrorResponse(rawID, e.Code, e.Message, e.Data)
}

// ErrorResponse renders a JSON-RPC error response. rawID is the id exactly as
// the peer sent it (nil renders "id":null).
func ErrorResponse(rawID []byte, code int, message string, data any) []byte {
	id := json.RawMessage("null")
	if len(rawID) > 0 {
		id = rawID
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   Error           `json:"error"`
	}{"2.0", id, Error{code, message, data}})
	return b
}

// DecodeResponse splits a response into its result and its error: exactly
// one of result and rpcErr is set for a valid response. It decodes the
// error object, but returns the result as written, for responses the bridge
// reads itself (its own requests); forwarded responses are never decoded.
func DecodeResponse(data []byte) (result json.RawMessage, rpcErr *Error, err error) {
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, nil, &parseError{"response: " + err.Error()}
	}
	if r.Error != nil {
		return nil, r.Error, nil
	}
	if r.Result == nil {
		return nil, nil, &parseError{`a response needs "result" or "error"`}
	}
	return r.Result, nil, nil
}

// MaxEchoedNumberIDBytes bounds a numeric id that error answers echo: a
// longer one is answered with a null id (no client counts its requests
// with 33-digit numbers, and a 100,000-digit id must not be echoed whole).
const MaxEchoedNumberIDBytes = 32

// RawID extracts the raw bytes of a message's id, for ErrorResponse: a
// copy of the "id" member's value, or nil, which renders null, where "it
// cannot be determined" (JSON-RPC 2.0, section 5): data is not a JSON
// object, gives the id ambiguously (twice, or in another case), or the id
// is not one to echo, which is a string of valid UTF-8 or a number of at
// most MaxEchoedNumberIDBytes (an echoed id of invalid
// UTF-8 made the whole answer invalid).
func RawID(data []byte) []byte {
	if id := WrittenID(data); Echoable(id) {
		return id
	}
	return nil
}

// WrittenID is RawID without the test of Echoable: the id as the peer
// wrote it, for messages to that peer.
func WrittenID(data []byte) []byte {
	var m members
	if valid, object := m.scanMessage(data, nil, nil); !valid || !object || m.ambiguous {
		return nil
	}
	return bytes.Clone(m.id)
}

// Echoable reports whether the JSON value raw is an id to echo in an
// answer of the bridge's own (see RawID).
func Echoable(raw []byte) bool {
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '"':
		return utf8.Valid(raw)
	case raw[0] == '-' || isDigit(raw[0]):
		return len(raw) <= MaxEchoedNumberIDBytes
	}
	return false // null (which renders as null anyway), or not an id at all
}

// Standard JSON-RPC error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeServerError is what the bridge answers when the session or its
	// server ends before a request was answered (implementation-defined range).
	CodeServerError = -32000
)

package jsonrpc

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// An Edit replaces the bytes of a Span of a message with Raw, a JSON value.
type Edit struct {
	At  Span
	Raw []byte
}

// Rewrite returns a copy of data with its edits applied, in one allocation
// of the result's exact size. Edits with a zero Span are skipped; the
// others may come in any order (a message may give its id after its
// params) but must not overlap. data is not modified.
//
// It is how an id or a progress token changes on the way through the
// bridge: the Envelope says where they are, so the rest of the message is
// copied without being read again.
func Rewrite(data []byte, edits ...Edit) []byte {
	return AppendRewrite(nil, data, edits...)
}

// AppendRewrite is Rewrite into dst: it appends data with its edits
// applied to dst, growing it at most once, to the exact size needed. It
// keeps no reference to edits, so that their bytes may live on the
// caller's stack.
func AppendRewrite(dst, data []byte, edits ...Edit) []byte {
	var inline [4]int
	order := editOrder(edits, inline[:0])
	n := len(data)
	for _, i := range order {
		e := &edits[i]
		n += len(e.Raw) - int(e.At.End-e.At.Start)
	}
	out := dst
	if cap(out)-len(out) < n {
		out = make([]byte, len(dst), len(dst)+n)
		copy(out, dst)
	}
	prev := 0
	for _, i := range order {
		e := &edits[i]
		out = append(out, data[prev:e.At.Start]...)
		out = append(out, e.Raw...)
		prev = int(e.At.End)
	}
	return append(out, data[prev:]...)
}

// editOrder appends to order the indexes of the edits with a Span, by
// position. (Indexes rather than a sorted copy of the edits: a copy on the
// heap would take their Raw bytes there too.)
func editOrder(edits []Edit, order []int) []int {
	for i := range edits {
		at := edits[i].At
		if at.IsZero() {
			continue
		}
		j := len(order)
		order = append(order, i)
		for ; j > 0 && edits[order[j-1]].At.Start > at.Start; j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	return order
}

// Rewrite is the package's Rewrite for the message e was parsed from: it
// also updates e to describe the result, moving its Spans and re-reading
// ID, ProgressToken and RequestID where an edit replaced them. An edit
// must replace whole values, and one that replaces one of those three
// must give a valid id.
func (e *Envelope) Rewrite(data []byte, edits ...Edit) []byte {
	out := Rewrite(data, edits...)
	move := func(p int32) int32 {
		q := p
		for _, ed := range edits {
			if !ed.At.IsZero() && ed.At.End <= p {
				q += int32(len(ed.Raw)) - (ed.At.End - ed.At.Start)
			}
		}
		return q
	}
	for _, ed := range edits {
		if ed.At.IsZero() {
			continue
		}
		switch ed.At {
		case e.IDAt:
			e.ID, _ = canonicalID(ed.Raw)
		case e.ProgressTokenAt:
			e.ProgressToken, _ = canonicalID(ed.Raw)
		case e.RequestIDAt:
			e.RequestID, _ = canonicalID(ed.Raw)
		}
	}
	for _, sp := range []*Span{&e.IDAt, &e.ProgressTokenAt, &e.RequestIDAt, &e.NameAt, &e.MetaAt, &e.ArgumentsAt, &e.ResultAt} {
		if !sp.IsZero() {
			*sp = Span{move(sp.Start), move(sp.End)}
		}
	}
	return out
}

// Lookup finds the member name of the JSON object obj and returns its
// value as written, a sub-slice of obj. obj must be valid JSON (a message
// Parse accepted, or a Span of one, such as Envelope.MetaAt). A name given
// twice counts as given last, as in Parse. It reads obj up to its end, and
// costs no allocation unless a member name contains escapes.
func Lookup(obj []byte, name string) (value []byte, ok bool) {
	var v [1][]byte
	if !LookupEach(obj, []string{name}, v[:]) || v[0] == nil {
		return nil, false
	}
	return v[0], true
}

// LookupEach is Lookup of several names in one reading of obj: values[i]
// is set to the value of names[i] as written, or nil when obj has no such
// member (a value as written is never empty). It reports false, with every
// value nil, when obj is not an object. values must be as long as names.
// Reading the _meta of every stateless request once, rather than once per
// member, was worth about 1k instructions a request.
func LookupEach(obj []byte, names []string, values [][]byte) bool {
	values = values[:len(names)]
	clear(values)
	s := scanner{data: obj}
	if s.peek() != '{' {
		return false
	}
	more, valid := s.openObject()
	for valid && more {
		key, escaped, good := s.key()
		if !good {
			valid = false
			break
		}
		var v []byte
		if !s.valueInto(&v) {
			valid = false
			break
		}
		matchNames(key, escaped, v, names, values)
		more, valid = s.nextMember()
	}
	if !valid {
		clear(values)
	}
	return valid
}

// matchNames sets values[i] to v where the member name key (as written,
// escaped or not) is names[i].
func matchNames(key []byte, escaped bool, v []byte, names []string, values [][]byte) {
	if !escaped && isASCII(key) {
		// ASCII as written is the name itself: compare the bytes, without
		// decoding.
		for i, n := range names {
			if string(key) == n {
				values[i] = v
			}
		}
		return
	}
	for i, n := range names {
		if keyIs(key, escaped, n) {
			values[i] = v
		}
	}
}

// isASCII reports whether b has no byte from 0x80 up, 8 bytes at a time:
// the last 8 (which may overlap the ones before) rather than byte by byte.
func isASCII(b []byte) bool {
	if n := len(b); n >= 8 {
		if binary.LittleEndian.Uint64(b[n-8:])&msbs != 0 {
			return false
		}
		for ; len(b) > 8; b = b[8:] {
			if binary.LittleEndian.Uint64(b)&msbs != 0 {
				return false
			}
		}
		return true
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// keyIs reports whether a member name as written (escaped or not) is name.
func keyIs(raw []byte, escaped bool, name string) bool {
	if !escaped && utf8.Valid(raw) {
		return string(raw) == name
	}
	// Escapes, or invalid UTF-8 that decodes to U+FFFD as in encoding/json.
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	return stringValue(quoted) == name
}

// StringValue decodes a JSON string as written (a value Lookup returned,
// or the bytes of a Span), as encoding/json would. It reports false if raw
// is not a string.
func StringValue(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	return stringValue(raw), true
}

// NumberID is the ID of the JSON number n.
func NumberID(n int64) ID {
	if 0 <= n && n < int64(len(smallIDs)) {
		return smallIDs[n]
	}
	return ID("n" + strconv.FormatInt(n, 10))
}

// AppendJSON appends id as a JSON value: the number or the string it
// stands for. The zero ID appends null.
func (id ID) AppendJSON(b []byte) []byte {
	switch {
	case id == "":
		return append(b, "null"...)
	case id[0] == 'n':
		return append(b, id[1:]...)
	}
	s := string(id[1:])
	if isPlainString(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // cannot fail: a string
	return append(b, q...)
}

// isPlainString reports whether s can be written between quotes as it is:
// ASCII without quotes, backslashes, control characters, or the <, > and &
// that encoding/json escapes.
func isPlainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// IsNumber reports whether id is a number.
func (id ID) IsNumber() bool { return len(id) > 0 && id[0] == 'n' }

// WithoutMembers returns the JSON object obj without the members whose
// (decoded) names drop reports, the others kept as written and in order,
// and whether any was dropped; when none was, obj itself. obj must be
// valid JSON (a message Parse accepted, or a Span of one, such as
// Envelope.MetaAt); it is not modified. drop must not keep the name it is
// given, which may be obj's own bytes. When a member is dropped it costs
// one allocation for the result (and two per escaped name read).
func WithoutMembers(obj []byte, drop func(name []byte) bool) ([]byte, bool) {
	var inline [8]Span
	kept, dropped := keptMembers(obj, drop, inline[:0])
	if !dropped {
		return obj, false
	}
	return appendMembers(make([]byte, 0, membersSize(kept)), obj, kept), true
}

// keptMembers appends to kept where each member of the object obj that
// drop keeps is, from its name's opening quote to its value's end, and
// reports whether drop dropped any (false as well when obj is not a valid
// object: nothing is dropped then).
func keptMembers(obj []byte, drop func(name []byte) bool, kept []Span) ([]Span, bool) {
	s := scanner{data: obj}
	if s.peek() != '{' {
		return kept, false
	}
	dropped := false
	more, valid := s.openObject()
	for valid && more {
		s.skipSpace()
		start := s.pos
		key, escaped, good := s.key()
		if !good {
			return kept, false
		}
		var v []byte
		if !s.valueInto(&v) {
			return kept, false
		}
		name := key // unescaped ASCII: the name itself, without a copy
		if escaped || !isASCII(key) {
			quoted := append(append(append(make([]byte, 0, len(key)+2), '"'), key...), '"')
			name = []byte(stringValue(quoted))
		}
		if drop(name) {
			dropped = true
		} else {
			kept = append(kept, Span{int32(start), int32(s.pos)})
		}
		more, valid = s.nextMember()
	}
	return kept, valid && dropped
}

// membersSize is the size of the object of the kept members (keptMembers),
// written by appendMembers.
func membersSize(kept []Span) int {
	n := 2 + max(len(kept)-1, 0) // braces and commas
	for _, sp := range kept {
		n += int(sp.End - sp.Start)
	}
	return n
}

// appendMembers appends to out the object of the members of obj at kept:
// each as written, separated by commas.
func appendMembers(out, obj []byte, kept []Span) []byte {
	out = append(out, '{')
	for i, sp := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, sp.In(obj)...)
	}
	return append(out, '}')
}

// WithoutMetaMembers is m without the members of its params._meta whose
// (decoded) names drop reports (see WithoutMembers), and whether any was
// dropped; when none was, m itself. The result is one copy of m.Data, and
// its Envelope is m's with its Spans moved, exactly as Parse would read
// the result (a member left out of an object neither makes a valid
// message invalid nor changes what routes it), except that a progress
// token among the dropped members is gone: the message is not read again.
// m.Data is not modified.
func (m Message) WithoutMetaMembers(drop func(name []byte) bool) (Message, bool) {
	at := m.Env.MetaAt
	meta := at.In(m.Data)
	if meta == nil {
		return m, false
	}
	var inline [8]Span
	kept, dropped := keptMembers(meta, drop, inline[:0])
	if !dropped {
		return m, false
	}
	size := membersSize(kept)
	data := make([]byte, 0, len(m.Data)-len(meta)+size)
	data = append(data, m.Data[:at.Start]...)
	data = appendMembers(data, meta, kept)
	data = append(data, m.Data[at.End:]...)

	// Where a position of m.Data is in data: unmoved before _meta, moved
	// by the bytes left out after it, and within a kept member by the
	// bytes left out before that member; -1 within a dropped member.
	delta := int32(size) - (at.End - at.Start)
	move := func(p int32) int32 {
		switch {
		case p <= at.Start:
			return p
		case p >= at.End:
			return p + delta
		}
		p -= at.Start     // kept is in _meta's own positions
		q := at.Start + 1 // past the '{'
		for _, sp := range kept {
			if p >= sp.Start && p <= sp.End {
				return q + p - sp.Start
			}
			q += sp.End - sp.Start + 1 // and a comma
		}
		return -1
	}
	env := m.Env
	env.MetaAt = Span{at.Start, at.Start + int32(size)}
	for _, sp := range []*Span{&env.IDAt, &env.ProgressTokenAt, &env.RequestIDAt, &env.NameAt, &env.ArgumentsAt, &env.ResultAt} {
		if sp.IsZero() {
			continue
		}
		start, end := move(sp.Start), move(sp.End)
		if start < 0 || end < 0 {
			// Only params._meta.progressToken lies in _meta.
			*sp = Span{}
			env.ProgressToken = ""
			continue
		}
		*sp = Span{start, end}
	}
	return Message{Data: data, Env: env}, true
}

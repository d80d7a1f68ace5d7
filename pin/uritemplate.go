package pin

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// matcher compiles an RFC 6570 URI template into a regular expression that
// matches exactly the URIs the template can expand to, whole: literals as
// written; each expression as its operator expands it, each variable
// defined or not, in order; values of the characters the operator leaves
// unencoded, or percent-encoded triplets; the names of named operators
// (";", "?", "&") as written; a list or map value as its items joined by
// ",". Level 4 modifiers are matched as the RFC
// expands them: a prefix ":n" as at most n characters, an explode "*" as a
// list joined by the operator's separator (or, for named operators, a map
// of any keys: what an exploded map produces).
//
// Go's regexp runs in time linear in the URI, whatever the template.
func matcher(template string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^`)
	rest := template
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return nil, errors.New("a '}' without '{'")
			}
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		if strings.IndexByte(rest[:open], '}') >= 0 {
			return nil, errors.New("a '}' without '{'")
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]))
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, errors.New("a '{' without '}'")
		}
		expr, err := expression(rest[open+1 : open+end])
		if err != nil {
			return nil, fmt.Errorf("expression %q: %w", rest[open:open+end+1], err)
		}
		b.WriteString(expr)
		rest = rest[open+end+1:]
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}

// Characters a value may hold unencoded: unreserved ones, and for the
// operators "+" and "#" reserved ones too; any character percent-encoded.
const (
	unreservedChar = `(?:[A-Za-z0-9\-._~]|%[0-9A-Fa-f]{2})`
	reservedChar   = `(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})`
)

// operators: what each prefixes an expansion with, separates variables
// with, whether it names them, and which characters a value keeps.
var operators = map[byte]struct {
	first, sep string
	named      bool
	empty      string // a named variable with an empty value: "name" + empty
	char       string
}{
	0:   {"", ",", false, "", unreservedChar},
	'+': {"", ",", false, "", reservedChar},
	'#': {"#", ",", false, "", reservedChar},
	'.': {".", ".", false, "", unreservedChar},
	'/': {"/", "/", false, "", unreservedChar},
	';': {";", ";", true, "", unreservedChar},
	'?': {"?", "&", true, "=", unreservedChar},
	'&': {"&", "&", true, "=", unreservedChar},
}

var varname = regexp.MustCompile(`^(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+(?:\.(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+)*$`)

// expression returns the regular expression of one expression's body.
func expression(body string) (string, error) {
	var op byte
	if body != "" && strings.IndexByte("+#./;?&", body[0]) >= 0 {
		op, body = body[0], body[1:]
	} else if body != "" && strings.IndexByte("=,!@|", body[0]) >= 0 {
		return "", fmt.Errorf("operator %q is reserved", body[0])
	}
	o := operators[op]
	var pieces []string
	for _, spec := range strings.Split(body, ",") {
		name, explode := strings.CutSuffix(spec, "*")
		// A string, or a list or map not exploded: items joined by ",".
		value := o.char + `*(?:,` + o.char + `*)*`
		if n, p, ok := strings.Cut(name, ":"); ok && !explode {
			max, err := strconv.Atoi(p)
			if err != nil || max < 1 || max > 9999 || len(p) > 4 {
				return "", fmt.Errorf("prefix %q is not 1 to 9999", p)
			}
			name, value = n, o.char+`{0,`+strconv.Itoa(max)+`}`
		}
		if !varname.MatchString(name) {
			return "", fmt.Errorf("variable name %q", name)
		}
		sep := regexp.QuoteMeta(o.sep)
		var piece string
		switch {
		case explode && o.named:
			// A list: name=v1&name=v2; a map: k1=v1&k2=v2 (any keys).
			one := unreservedChar + `+(?:=` + value + `)?`
			piece = one + `(?:` + sep + one + `)*`
		case explode:
			piece = value + `(?:` + sep + value + `)*`
		case o.named && o.empty == "":
			piece = regexp.QuoteMeta(name) + `(?:=` + value + `)?`
		case o.named:
			piece = regexp.QuoteMeta(name) + `=` + value
		default:
			piece = value
		}
		pieces = append(pieces, `(?:`+piece+`)`)
	}
	// Any variables may be undefined, and skipped; the operator's prefix
	// comes only before a defined one.
	var alts []string
	for i := range pieces {
		alt := pieces[i]
		for _, p := range pieces[i+1:] {
			alt += `(?:` + regexp.QuoteMeta(o.sep) + p + `)?`
		}
		alts = append(alts, alt)
	}
	return `(?:` + regexp.QuoteMeta(o.first) + `(?:` + strings.Join(alts, `|`) + `))?`, nil
}

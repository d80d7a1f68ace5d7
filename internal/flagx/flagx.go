// Package flagx holds the flag machinery of the bridge's commands that is
// about no command in particular: flag values for lists (List, Repeat),
// parsing whose errors name the flag as the documentation does and never
// read the flag package's texts (Parse, ValueError, Problem), the values
// of a flag given as JSON (JSONValues, for a config file whose keys are
// flags), a --help grouped by sections (help.go), and the command line of
// a subcommand, NOUN VERB [flags] [-- COMMAND ARGS...] (subcommand.go).
package flagx

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/units"
)

// List is a flag that may be repeated or given comma-separated values.
// The first value given replaces what *Dst held (the environment's).
type List struct {
	Dst *[]string
	set bool
}

func (l *List) String() string {
	if l.Dst == nil {
		return ""
	}
	return strings.Join(*l.Dst, ",")
}

func (l *List) Set(v string) error {
	if !l.set {
		*l.Dst = nil // flags replace what the environment said
		l.set = true
	}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.Dst = append(*l.Dst, p)
		}
	}
	return nil
}

// Repeat is a flag that may be repeated; unlike List, a value is never
// split at commas (an environment value may hold them).
type Repeat struct {
	Dst *[]string
	set bool
}

func (l *Repeat) String() string {
	if l.Dst == nil {
		return ""
	}
	return strings.Join(*l.Dst, " ")
}

func (l *Repeat) Set(v string) error {
	if !l.set {
		*l.Dst = nil // flags replace what the environment said
		l.set = true
	}
	*l.Dst = append(*l.Dst, v)
	return nil
}

// Pairs is a flag that may be repeated, each value KEY=VALUE, into a map
// (made on the first value); a KEY given again takes the later VALUE.
// Form names KEY=VALUE in the error of a value without "=".
type Pairs struct {
	Dst  *map[string]string
	Form string
}

func (p *Pairs) String() string {
	if p.Dst == nil {
		return ""
	}
	var kv []string
	for k, v := range *p.Dst {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

func (p *Pairs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want %s, got %q", p.Form, s)
	}
	if *p.Dst == nil {
		*p.Dst = map[string]string{}
	}
	(*p.Dst)[k] = v
	return nil
}

// Given is the set of the names of the flags that fs's Parse set.
func Given(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

// Vars names the environment variable of each flag of fs that sets a
// field of *cfg, a struct (its embedded structs included): the envconfig
// tag of that field, so that the tags are the one list of the variables.
// A List or Repeat sets the field its Dst points to.
func Vars(cfg any, fs *flag.FlagSet) map[string]string {
	tags := map[uintptr]string{} // by the field's address
	var fields func(v reflect.Value)
	fields = func(v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.Anonymous {
				fields(v.Field(i))
			} else if tag := f.Tag.Get("envconfig"); tag != "" {
				tags[v.Field(i).Addr().Pointer()] = tag
			}
		}
	}
	fields(reflect.ValueOf(cfg).Elem())
	vars := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		var p any = Unwrap(f.Value) // flag's own Values point at the field
		switch v := p.(type) {
		case *List:
			p = v.Dst
		case *Repeat:
			p = v.Dst
		}
		if rv := reflect.ValueOf(p); rv.Kind() == reflect.Pointer {
			if tag, ok := tags[rv.Pointer()]; ok {
				vars[f.Name] = tag
			}
		}
	})
	return vars
}

// A ValueError is a value a flag (or a key of a config file) refused.
type ValueError struct {
	Flag  *flag.Flag
	Value string
	Err   error // the Value's own
}

// Error names the flag as the documentation does (--max-sessions), its
// value, and what was wrong with it.
func (e *ValueError) Error() string {
	v := e.Value
	if !numeric(e.Flag.Value) {
		v = strconv.Quote(v) // a word: show where it starts and ends
	}
	return fmt.Sprintf("--%s %s: %s", e.Flag.Name, v, Problem(e.Flag.Value, e.Value, e.Err))
}

func (e *ValueError) Unwrap() error { return e.Err }

// namedValue is a flag's Value whose Set errors are ValueErrors: Parse
// reads them there, never in the text of flag's own message.
type namedValue struct {
	flag.Value
	f    *flag.Flag
	last **ValueError // where the latest refusal is kept (Parse)
}

func (v *namedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		e := &ValueError{Flag: &flag.Flag{Name: v.f.Name, Value: v.Value}, Value: s, Err: err}
		if v.last != nil {
			*v.last = e
		}
		return e
	}
	return nil
}

// Get is the wrapped Value's.
func (v *namedValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// namedBool is a namedValue of a boolean flag, which takes no argument.
type namedBool struct{ namedValue }

func (v *namedBool) IsBoolFlag() bool { return true }

// IsBool reports whether a flag takes no argument (--json-response).
func IsBool(v flag.Value) bool {
	b, ok := v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// IsList reports whether a flag is a List.
func IsList(f *flag.Flag) bool {
	_, ok := Unwrap(f.Value).(*List)
	return ok
}

// Unwrap is the Value that Parse wrapped, or v.
func Unwrap(v flag.Value) flag.Value {
	switch n := v.(type) {
	case *namedValue:
		return n.Value
	case *namedBool:
		return n.Value
	}
	return v
}

// nameValues wraps each Value of fs (once) so that its Set errors name the
// flag; a refusal is also kept in *last.
func nameValues(fs *flag.FlagSet, last **ValueError) {
	fs.VisitAll(func(f *flag.Flag) {
		nv := namedValue{Value: Unwrap(f.Value), f: f, last: last}
		if IsBool(f.Value) {
			f.Value = &namedBool{nv}
		} else {
			f.Value = &nv
		}
	})
}

// Parse parses args with fs and returns one line that names the flag as
// the documentation does (--max-sessions) and says what was wrong, or
// flag.ErrHelp for -h and --help. It reads no text of the flag package's:
// an unknown flag and a missing value are found by looking the names up
// first, as Parse will (unknown makes the error of a flag that does not
// exist), and a refused value by the Value's own error.
func Parse(fs *flag.FlagSet, args []string, unknown func(name string) error) error {
	if err := checkArgs(fs, args, unknown); err != nil {
		return err
	}
	var last *ValueError
	nameValues(fs, &last)
	err := fs.Parse(args)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return err
	case last != nil:
		return last
	}
	return err // the syntax of an argument, such as ---x, in flag's words
}

// checkArgs reports the first unknown flag of args, or one without its
// value, reading them as flag.FlagSet.Parse does: flags end at the first
// argument that is not one, or after --.
func checkArgs(fs *flag.FlagSet, args []string, unknown func(name string) error) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return nil
		}
		name := strings.TrimPrefix(a[1:], "-")
		if name == "" || name[0] == '-' || name[0] == '=' {
			return nil // bad syntax: Parse says so
		}
		name, _, hasValue := strings.Cut(name, "=")
		f := fs.Lookup(name)
		switch {
		case f == nil && (name == "h" || name == "help"):
			return nil // Parse returns flag.ErrHelp
		case f == nil:
			return unknown(name)
		case hasValue || IsBool(f.Value):
		case i+1 == len(args):
			return fmt.Errorf("--%s needs a value", name)
		default:
			i++ // its value
		}
	}
	return nil
}

// numeric reports whether a flag's value is a number, a duration or a
// boolean: shown bare in messages, where a word is quoted.
func numeric(v flag.Value) bool {
	g, ok := Unwrap(v).(flag.Getter)
	if !ok {
		return false
	}
	switch g.Get().(type) {
	case bool, int, int64, uint, uint64, float64, time.Duration, *units.Duration, *units.Interval, *units.Bytes:
		return true
	}
	return false
}

// Problem says what a value of a flag (or of its variable, or of its key
// in a config file) should have been, from the type of the flag's Value
// and the error it returned.
func Problem(v flag.Value, value string, err error) string {
	var ve *ValueError
	if errors.As(err, &ve) {
		err = ve.Err
	}
	if g, ok := Unwrap(v).(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			if _, perr := strconv.ParseFloat(value, 64); perr == nil {
				return "a duration needs a unit, e.g. " + value + "s"
			}
			return "want a duration such as 30s, 5m or 1h"
		case bool:
			return "want true or false"
		case int, int64, uint, uint64:
			return "want a whole number"
		case float64:
			return "want a number"
		}
	}
	if errors.Is(err, units.ErrNeedsUnit) {
		return "a duration needs a unit, e.g. " + value + "s"
	}
	return err.Error()
}

// JSONValues are the flag values of a JSON value: a string, a number,
// true or false, or for a List (list) an array of strings, of which an
// empty one is one empty value (it replaces the list the flag held).
func JSONValues(raw json.RawMessage, list bool) ([]string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case json.Number:
		return []string{x.String()}, nil
	case bool:
		return []string{strconv.FormatBool(x)}, nil
	case []any:
		if !list {
			return nil, errors.New("want one value, not an array")
		}
		out := []string{}
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, errors.New("want an array of strings")
			}
			out = append(out, s)
		}
		if len(out) == 0 {
			out = append(out, "") // an empty list replaces the global one
		}
		return out, nil
	}
	return nil, errors.New("want a string, a number, true or false")
}

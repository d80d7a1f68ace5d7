package flagx

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/units"
)

type testFlags struct {
	list, repeat []string
	n            int
	d            time.Duration
	size         units.Bytes
	word         string
	on           bool
}

func newTestSet(v *testFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&List{Dst: &v.list}, "list", "")
	fs.Var(&Repeat{Dst: &v.repeat}, "repeat", "")
	fs.IntVar(&v.n, "n", 0, "")
	fs.DurationVar(&v.d, "d", 0, "")
	fs.TextVar(&v.size, "size", units.Bytes(0), "")
	fs.StringVar(&v.word, "word", "", "")
	fs.BoolVar(&v.on, "on", false, "")
	return fs
}

func unknown(name string) error { return fmt.Errorf("no such flag %s", name) }

// The first value of a list flag replaces what it held (the
// environment's); List splits at commas, Repeat never does.
func TestListAndRepeat(t *testing.T) {
	v := &testFlags{list: []string{"from-env"}, repeat: []string{"from-env"}}
	if err := Parse(newTestSet(v), []string{"--list", "a, b", "--list", "c", "--repeat", "A=1,2", "--repeat", "B"}, unknown); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.list, []string{"a", "b", "c"}) || !slices.Equal(v.repeat, []string{"A=1,2", "B"}) {
		t.Fatalf("list %q, repeat %q", v.list, v.repeat)
	}
}

// Parse's errors name the flag as the documentation does and say what
// was wrong, from the Value's type and error, never from flag's texts.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "no such flag nope"},
		{[]string{"-x=1"}, "no such flag x"},
		{[]string{"--n"}, "--n needs a value"},
		{[]string{"--n", "many"}, "--n many: want a whole number"},
		{[]string{"--d", "10"}, "--d 10: a duration needs a unit, e.g. 10s"},
		{[]string{"--d", "soon"}, `--d soon: want a duration such as 30s, 5m or 1h`},
		{[]string{"--size", "lots"}, `--size lots: ` + units.ErrSize.Error()},
		{[]string{"--on=maybe"}, "--on maybe: want true or false"},
	} {
		err := Parse(newTestSet(&testFlags{}), c.args, unknown)
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: %v, want %s", c.args, err, c.want)
		}
	}
	// Flags end at the first argument that is not one, or after --.
	if err := Parse(newTestSet(&testFlags{}), []string{"--n", "1", "--", "--nope"}, unknown); err != nil {
		t.Errorf("after --: %v", err)
	}
	if err := Parse(newTestSet(&testFlags{}), []string{"--help"}, unknown); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	var ve *ValueError
	if err := Parse(newTestSet(&testFlags{}), []string{"--n", "x"}, unknown); !errors.As(err, &ve) || ve.Flag.Name != "n" || ve.Value != "x" {
		t.Errorf("a refused value: %#v, want a ValueError naming n and x", err)
	}
}

func TestJSONValues(t *testing.T) {
	for _, c := range []struct {
		raw  string
		list bool
		want []string
		err  string
	}{
		{`"a"`, false, []string{"a"}, ""},
		{`12`, false, []string{"12"}, ""},
		{`1.5`, false, []string{"1.5"}, ""},
		{`true`, false, []string{"true"}, ""},
		{`["a", "b"]`, true, []string{"a", "b"}, ""},
		{`[]`, true, []string{""}, ""},
		{`["a"]`, false, nil, "want one value, not an array"},
		{`[1]`, true, nil, "want an array of strings"},
		{`{}`, false, nil, "want a string, a number, true or false"},
	} {
		got, err := JSONValues(json.RawMessage(c.raw), c.list)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: %v, want %s", c.raw, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
}

// A grouped help lists each flag under its group with its variable, its
// default and the star; a variable without a flag after the group's
// flags; a flag of no group under Other, without a variable.
func TestHelp(t *testing.T) {
	one := &Group{ID: "one", Title: "One", EnvOnly: [][2]string{{"T_SECRET", "a secret"}}}
	two := &Group{ID: "two", Title: "Two"}
	h := &Help{Groups: []*Group{one, two}, Env: func(n string) string { return "T_" + strings.ToUpper(n) },
		Star: func(n string) bool { return n == "size" }}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("word", "hi", one.In("a `word` to say"))
	fs.TextVar(new(units.Bytes), "size", units.Bytes(1024), two.In("how big"))
	fs.Int("loose", 0, "in no group")
	if err := Parse(fs, nil, unknown); err != nil { // wrapped Values print as before
		t.Fatal(err)
	}
	var out bytes.Buffer
	h.Grouped(&out, fs)
	want := `
One:
  --word word
        a word to say
        env T_WORD   default hi
  env T_SECRET
        a secret

Two:
  --size size *
        how big
        env T_SIZE   default 1KiB

Other:
  --loose int
        in no group
`
	if out.String() != want {
		t.Fatalf("Grouped:\n%s\nwant\n%s", out.String(), want)
	}
	if g, text := h.GroupOf(fs.Lookup("size")); g != two || text != "how big" {
		t.Fatalf("GroupOf: %v %q", g, text)
	}
	out.Reset()
	h.Subcommand(&out, "Usage: t\n", fs, []string{"loose"}, one)
	if !strings.HasPrefix(out.String(), "Usage: t\n\nFlags") || !strings.Contains(out.String(), "  --loose int\n") ||
		!strings.Contains(out.String(), "\nOne:\n  --word word\n") || strings.Contains(out.String(), "--size") {
		t.Fatalf("Subcommand:\n%s", out.String())
	}
	out.Reset()
	PrintDefaults(&out, fs)
	if !strings.Contains(out.String(), "  --loose int\n        in no group\n") {
		t.Fatalf("PrintDefaults:\n%s", out.String())
	}
}

type subFlags struct {
	tag string
	on  bool
}

func newSubFlags(out io.Writer, f *subFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("n v", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.tag, "tag", "", "a `tag`")
	fs.BoolVar(&f.on, "on", false, "turn it on")
	return fs
}

// ParseSubcommand runs VERB's flags and the command after --; it answers
// help on stdout with 0 and a mistake on stderr with 2, in one line naming
// the flag, or after the help for a word that is not VERB.
func TestParseSubcommand(t *testing.T) {
	const help = "Usage: n v\n  --on \n        turn it on\n  --tag tag\n        a tag\n"
	s := &Subcommand{Noun: "n", Verb: "v", What: "verb", Usage: "Usage: n v\n", Unknown: unknown}
	for _, c := range []struct {
		args           []string
		code           int
		ok             bool
		stdout, stderr string
		command        []string
	}{
		{nil, 2, false, "", help, nil},
		{[]string{"--help"}, 0, false, help, "", nil},
		{[]string{"help"}, 0, false, help, "", nil},
		{[]string{"w"}, 2, false, "", help + "\nn: unknown verb \"w\"\n", nil},
		{[]string{"v", "-h"}, 0, false, help, "", nil},
		{[]string{"v", "--nope"}, 2, false, "", "n v: no such flag nope\nRun 'n v --help' for usage.\n", nil},
		{[]string{"v", "--on=maybe"}, 2, false, "", "n v: --on maybe: want true or false\nRun 'n v --help' for usage.\n", nil},
		{[]string{"v", "--tag", "t", "stray"}, 2, false, "", "n v: unexpected argument \"stray\"; put the server command after --\n", nil},
		{[]string{"v", "--tag", "t", "--"}, 2, false, "", "n v: nothing after --: give the server COMMAND [ARGS...]\n", nil},
		{[]string{"v", "--on", "--tag", "t", "--", "srv", "--tag", "x"}, 0, true, "", "", []string{"srv", "--tag", "x"}},
		{[]string{"v"}, 0, true, "", "", nil},
	} {
		var stdout, stderr bytes.Buffer
		f, command, code, ok := ParseSubcommand(s, c.args, &stdout, &stderr, newSubFlags)
		if code != c.code || ok != c.ok || stdout.String() != c.stdout || stderr.String() != c.stderr || !slices.Equal(command, c.command) {
			t.Errorf("%q: code %d, ok %v, command %q, stdout %q, stderr %q; want %d, %v, %q, %q, %q",
				c.args, code, ok, command, stdout.String(), stderr.String(), c.code, c.ok, c.command, c.stdout, c.stderr)
		}
		if ok && len(c.args) > 1 && (f.tag != "t" || !f.on) {
			t.Errorf("%q: flags %+v", c.args, *f)
		}
	}
}

type varsInner struct {
	Word string `envconfig:"T_WORD"`
}

type varsConfig struct {
	varsInner
	N      int      `envconfig:"T_N"`
	List   []string `envconfig:"T_LIST"`
	Hidden string   `ignored:"true"`
}

// Vars finds the field each flag sets, in an embedded struct too and
// behind a List or a wrapped Value, and names its variable.
func TestVars(t *testing.T) {
	c := &varsConfig{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.StringVar(&c.Word, "word", "", "")
	fs.IntVar(&c.N, "n", 0, "")
	fs.Var(&List{Dst: &c.List}, "list", "")
	fs.StringVar(&c.Hidden, "hidden", "", "")
	fs.Bool("loose", false, "")
	if err := Parse(fs, nil, unknown); err != nil { // wraps the Values
		t.Fatal(err)
	}
	got := Vars(c, fs)
	if want := map[string]string{"word": "T_WORD", "n": "T_N", "list": "T_LIST"}; !maps.Equal(got, want) {
		t.Errorf("Vars: %v, want %v", got, want)
	}
}

// Pairs makes its map on the first value; a key given again takes the
// later value; a value without "=" is refused in the words of Form.
func TestPairs(t *testing.T) {
	var m map[string]string
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&Pairs{Dst: &m, Form: "KEY=VALUE"}, "p", "")
	if err := Parse(fs, []string{"--p", "a=1", "--p", "b=x=y", "--p", "a=2", "--p", "c="}, unknown); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "2", "b": "x=y", "c": ""}; !maps.Equal(m, want) || fs.Lookup("p").Value.String() != "a=2,b=x=y,c=" {
		t.Errorf("%v (%s), want %v", m, fs.Lookup("p").Value, want)
	}
	err := Parse(fs, []string{"--p", "novalue"}, unknown)
	if want := `--p "novalue": want KEY=VALUE, got "novalue"`; err == nil || err.Error() != want {
		t.Errorf("%v, want %s", err, want)
	}
}

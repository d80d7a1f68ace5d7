package flagx

import (
	"encoding"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/internal/units"
)

// A Group is a section of a grouped --help. A flag's group is declared
// where the flag is, by wrapping its usage: fs.StringVar(&c.Listen,
// "listen", c.Listen, edge.In("...")).
type Group struct {
	ID    string // what In marks a usage with
	Title string
	// EnvOnly are variables of the group without a flag (secrets: a
	// command line is visible to every local user), with their text.
	EnvOnly [][2]string
}

// groupMark brackets a group's ID at the start of a flag's usage; Help
// takes it off.
const groupMark = "\x1f"

// In marks usage as that of a flag of group g.
func (g *Group) In(usage string) string { return groupMark + g.ID + groupMark + usage }

// Help renders a grouped --help.
type Help struct {
	// Groups, in the order shown.
	Groups []*Group
	// Env names the environment variable of a flag of a group.
	Env func(flagName string) string
	// Star reports whether a flag of a group gets a * after its value
	// (a mark the help's introduction explains). Nil: none does.
	Star func(flagName string) bool
}

// GroupOf is a flag's group (nil if it has none) and its usage unmarked.
func (h *Help) GroupOf(f *flag.Flag) (*Group, string) {
	rest, ok := strings.CutPrefix(f.Usage, groupMark)
	if !ok {
		return nil, f.Usage
	}
	id, text, ok := strings.Cut(rest, groupMark)
	if !ok {
		return nil, f.Usage
	}
	for _, g := range h.Groups {
		if g.ID == id {
			return g, text
		}
	}
	return nil, text
}

// Grouped prints every flag of fs under its group's title, each group's
// variables without a flag after its flags, and those of no group last,
// under "Other".
func (h *Help) Grouped(out io.Writer, fs *flag.FlagSet) {
	byGroup := map[*Group][]*flag.Flag{}
	var ungrouped []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { // in name order
		g, _ := h.GroupOf(f)
		if g == nil {
			ungrouped = append(ungrouped, f)
			return
		}
		byGroup[g] = append(byGroup[g], f)
	})
	for _, g := range h.Groups {
		fmt.Fprintf(out, "\n%s:\n", g.Title)
		for _, f := range byGroup[g] {
			h.Flag(out, f)
		}
		for _, e := range g.EnvOnly {
			fmt.Fprintf(out, "  env %s\n        %s\n", e[0], e[1])
		}
	}
	if len(ungrouped) > 0 {
		fmt.Fprint(out, "\nOther:\n")
		for _, f := range ungrouped {
			h.Flag(out, f)
		}
	}
}

// Flag prints one flag: name, text, variable, default, and the star. A
// flag of no group (a subcommand's own) has no variable.
func (h *Help) Flag(out io.Writer, f *flag.Flag) {
	g, text := h.GroupOf(f)
	name, text := flag.UnquoteUsage(&flag.Flag{Name: f.Name, Usage: text, Value: Unwrap(f.Value), DefValue: f.DefValue})
	if name == "value" {
		name = placeholder(f.Value)
	}
	star := ""
	if g != nil && h.Star != nil && h.Star(f.Name) {
		star = " *"
	}
	fmt.Fprintf(out, "  --%s %s%s\n", f.Name, name, star)
	fmt.Fprintf(out, "        %s\n", text)
	var last []string
	if g != nil {
		last = append(last, "env "+h.Env(f.Name))
	}
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
		last = append(last, "default "+f.DefValue)
	}
	if len(last) > 0 {
		fmt.Fprintf(out, "        %s\n", strings.Join(last, "   "))
	}
}

// Subcommand prints a subcommand's help: intro, then the flags named
// (its own, then of fs), then the groups whose flags apply too.
func (h *Help) Subcommand(out io.Writer, intro string, fs *flag.FlagSet, names []string, groups ...*Group) {
	fmt.Fprint(out, intro)
	fmt.Fprint(out, "\nFlags (each of bridge's own also read from the environment variable shown;\nflags win):\n")
	for _, n := range names {
		if f := fs.Lookup(n); f != nil {
			h.Flag(out, f)
		}
	}
	for _, g := range groups {
		fmt.Fprintf(out, "\n%s:\n", g.Title)
		fs.VisitAll(func(f *flag.Flag) {
			if fg, _ := h.GroupOf(f); fg == g && !slices.Contains(names, f.Name) {
				h.Flag(out, f)
			}
		})
	}
}

// PrintDefaults is flag.PrintDefaults in the style of every help of the
// bridge: --name, never -name.
func PrintDefaults(out io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(&flag.Flag{Name: f.Name, Usage: f.Usage, Value: Unwrap(f.Value), DefValue: f.DefValue})
		fmt.Fprintf(out, "  --%s %s\n        %s", f.Name, name, text)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			fmt.Fprintf(out, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(out)
	})
}

// placeholder names the value of a flag of a typed value (flag.TextVar),
// for which flag.UnquoteUsage says only "value".
func placeholder(v flag.Value) string {
	g, ok := Unwrap(v).(flag.Getter)
	if !ok {
		return "value"
	}
	switch g.Get().(type) {
	case *units.Duration, *units.Interval:
		return "duration"
	case *units.Bytes:
		return "size"
	case encoding.TextUnmarshaler:
		return "string"
	}
	return "value"
}

package flagx

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// A Subcommand is a command line of the form
// "NOUN VERB [flags] [-- COMMAND ARGS...]", such as bridge image build:
// NOUN has one VERB, whose flags may be followed by a server command.
type Subcommand struct {
	Noun  string // the words before VERB: "bridge image"
	Verb  string // "build"
	What  string // what VERB is, for the error of another word: "subcommand"
	Usage string // the help's text before the flags
	// Unknown makes the error of a flag that does not exist (Parse's).
	Unknown func(name string) error
}

// ParseSubcommand parses args, which follow NOUN, into a new F whose flags
// newFlags binds (writing its usage to the io.Writer it is given). When
// there is nothing to run (help, a mistake) it has written the help or
// the error and returns ok=false with the exit status: 0 for help asked
// for (on stdout), 2 for a mistake (on stderr). Otherwise command is what
// follows "--", if anything.
func ParseSubcommand[F any](s *Subcommand, args []string, stdout, stderr io.Writer,
	newFlags func(io.Writer, *F) *flag.FlagSet) (f *F, command []string, code int, ok bool) {
	// Help that was asked for goes to stdout (bridge image --help | less);
	// help printed because of a mistake goes to stderr.
	help := func(w io.Writer) {
		fmt.Fprint(w, s.Usage)
		PrintDefaults(w, newFlags(w, new(F)))
	}
	if len(args) == 0 || args[0] != s.Verb {
		switch {
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
			help(stdout)
			return nil, nil, 0, false
		case len(args) == 0:
			help(stderr)
			return nil, nil, 2, false
		}
		help(stderr)
		fmt.Fprintf(stderr, "\n%s: unknown %s %q\n", s.Noun, s.What, args[0])
		return nil, nil, 2, false
	}
	f = new(F)
	fs := newFlags(io.Discard, f)
	fs.Usage = func() {} // the error line is enough; the usage is one --help away
	if err := Parse(fs, args[1:], s.Unknown); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help(stdout)
			return nil, nil, 0, false
		}
		// One line naming the flag as the help does (--name).
		fmt.Fprintf(stderr, "%s %s: %v\nRun '%s %s --help' for usage.\n", s.Noun, s.Verb, err, s.Noun, s.Verb)
		return nil, nil, 2, false
	}
	command, err := TrailingCommand(fs, args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", s.Noun, s.Verb, err)
		return nil, nil, 2, false
	}
	return f, command, 0, true
}

// TrailingCommand returns what follows "--" in args, which fs has parsed,
// and refuses stray positional arguments before it.
func TrailingCommand(fs *flag.FlagSet, args []string) ([]string, error) {
	rest := fs.Args()
	// flag stops at "--" and drops it, or at the first non-flag argument.
	consumed := len(args) - len(rest)
	if consumed > 0 && args[consumed-1] == "--" {
		if len(rest) == 0 {
			return nil, errors.New("nothing after --: give the server COMMAND [ARGS...]")
		}
		return rest, nil
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("unexpected argument %q; put the server command after --", rest[0])
	}
	return nil, nil
}

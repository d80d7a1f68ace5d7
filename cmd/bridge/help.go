package main

import (
	"encoding"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/internal/units"
)

// bridge --help is grouped (75 flags in one alphabetical list).
// A flag's group is declared in its own line of newFlagSet, by wrapping its
// usage: fs.StringVar(&c.Listen, "listen", c.Listen, gEdge.in("...")).
// TestEveryFlagInOneGroup fails for a flag without one.

// helpGroup is a section of bridge --help.
type helpGroup struct {
	id    string // what in() marks a usage with
	title string // says which era its limits apply to
	// envOnly are variables of the group without a flag (secrets: a
	// command line is visible to every local user), with their text.
	envOnly [][2]string
}

// The groups, in the order --help shows them.
var (
	gEdge = &helpGroup{id: "edge", title: "Listening and HTTP edge (every era)"}
	gAuth = &helpGroup{id: "auth", title: "Authentication (every era; a non-loopback --listen needs one of them, or --insecure-no-auth)",
		envOnly: [][2]string{
			{envPrefix + "_AUTH_TOKENS", "accepted bearer tokens, comma-separated (no flag: tokens on a command line are visible to every local user)"},
			{envPrefix + "_OAUTH_CLIENT_SECRET", "the bridge's client secret at the introspection endpoint (no flag, for the same reason)"},
		}}
	gProcs     = &helpGroup{id: "procs", title: "Server processes (every era)"}
	gDocker    = &helpGroup{id: "docker", title: "Docker sandbox (--sandbox docker; refused with --sandbox local)"}
	gSessions  = &helpGroup{id: "sessions", title: "2025 sessions (revisions 2025-03-26 to 2025-11-25, and 2024-11-05 over HTTP+SSE; these limits do not apply to 2026-07-28 clients)"}
	gLog       = &helpGroup{id: "log", title: "Resumption log (2025 sessions)"}
	gStateless = &helpGroup{id: "stateless", title: "2026-07-28 clients (stateless: served by a pool of servers, not by sessions)"}
	gGuards    = &helpGroup{id: "guards", title: "Guards (every era: what servers offer and what callers may use)"}
	gObs       = &helpGroup{id: "obs", title: "Observability"}
	gMulti     = &helpGroup{id: "multi", title: "Several servers and instances",
		envOnly: [][2]string{
			{envPrefix + "_AFFINITY_SECRET", "the session-affinity secret (no flag: a command line is visible to every local user)"},
		}}

	helpGroups = []*helpGroup{gEdge, gAuth, gProcs, gDocker, gSessions, gLog, gStateless, gGuards, gObs, gMulti}
)

// groupMark brackets a group's id at the start of a flag's usage; usage and
// flagUsage take it off.
const groupMark = "\x1f"

// in marks usage as that of a flag of group g.
func (g *helpGroup) in(usage string) string { return groupMark + g.id + groupMark + usage }

// flagUsage is a flag's group (nil if it has none) and its usage unmarked.
func flagUsage(f *flag.Flag) (*helpGroup, string) {
	rest, ok := strings.CutPrefix(f.Usage, groupMark)
	if !ok {
		return nil, f.Usage
	}
	id, text, ok := strings.Cut(rest, groupMark)
	if !ok {
		return nil, f.Usage
	}
	for _, g := range helpGroups {
		if g.id == id {
			return g, text
		}
	}
	return nil, text
}

// helpIntro opens bridge --help: the subcommands, three examples and the
// five flags a newcomer needs.
const helpIntro = `Usage:
  bridge [flags] -- COMMAND [ARGS...]     serve MCP Streamable HTTP in front of a stdio MCP server
  bridge [flags] --config FILE            serve each server of an mcpServers JSON file at /servers/NAME/mcp
  bridge check -- COMMAND [ARGS...]       start the server once and say what is wrong with it (see bridge check --help)
  bridge image build --from SPEC [...]    build an image bundling the bridge and a server
  bridge deploy aws --stack NAME [...]    deploy to AWS ECS behind a load balancer
  bridge --version                        the version and revision of this build
  bridge connect URL [flags]              the reverse: a stdio MCP server forwarding to a remote one (see bridge connect --help)
  bridge pin --output FILE -- COMMAND     record the server's tools, prompts and templates in a lock file (see bridge pin --help)
  bridge pin --check --pin-file FILE -- COMMAND   report how the server drifted from it, exit 1 if it did

Examples:
  bridge -- npx -y @modelcontextprotocol/server-everything
        serve it at http://127.0.0.1:8080/mcp, one server process per session
  bridge --listen 0.0.0.0:8080 --auth-token-file tokens.txt --env GITHUB_TOKEN -- python3 -u server.py
        on every interface, for clients sending a token of tokens.txt; the server gets $GITHUB_TOKEN
  bridge --config servers.json
        each server of a desktop client's mcpServers file, at /servers/NAME/mcp

Start with these:
  --listen HOST:PORT        where clients connect (default 127.0.0.1:8080, this host only)
  --auth-token-file FILE    bearer tokens clients must send; needed to listen beyond loopback
  --env NAME[=VALUE]        give the server a variable: it gets only PATH, HOME, USER and the locale
  --sandbox docker          run each server in a locked-down container (with --image)
  --config FILE             serve several servers from one file

Each session gets its own server: COMMAND runs once per session.

Flags, by group. Each is also read from the environment variable shown; flags
win. * marks a key a server of a --config file may set for itself. A size is
a number of bytes or has a unit (512k, 16MiB, 1g: powers of 1024); a duration
has a unit (30s, 5m, 1h), and may be never where its flag says so.
`

func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, helpIntro)
	byGroup := map[*helpGroup][]*flag.Flag{}
	var ungrouped []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { // in name order
		g, _ := flagUsage(f)
		if g == nil {
			ungrouped = append(ungrouped, f)
			return
		}
		byGroup[g] = append(byGroup[g], f)
	})
	for _, g := range helpGroups {
		fmt.Fprintf(out, "\n%s:\n", g.title)
		for _, f := range byGroup[g] {
			printFlag(out, f)
		}
		for _, e := range g.envOnly {
			fmt.Fprintf(out, "  env %s\n        %s\n", e[0], e[1])
		}
	}
	if len(ungrouped) > 0 {
		// Never in a release: TestEveryFlagInOneGroup fails first.
		fmt.Fprint(out, "\nOther:\n")
		for _, f := range ungrouped {
			printFlag(out, f)
		}
	}
	fmt.Fprint(out, `
Go runtime:
  env GOMAXPROCS
        unset: the bridge runs on one processor while at most one request is in flight,
        and on all of them (Go's default) from the moment a second one is, back to one
        after a second without (not with session affinity, whose forwarded requests
        it would not see); set it to fix the number and turn that off
  env GOGC
        unset: the garbage collector waits for the heap to reach 16 MiB while the
        live heap is under half of that, and runs as with GOGC=100 beyond; set it
        to choose (GOMEMLIMIT applies either way)
`)
}

// printFlag prints one flag of a help: name, text, variable, default, and
// * for a --config server's key. A flag of no group (a subcommand's own)
// has no variable.
func printFlag(out io.Writer, f *flag.Flag) {
	g, text := flagUsage(f)
	name, text := flag.UnquoteUsage(&flag.Flag{Name: f.Name, Usage: text, Value: unwrap(f.Value), DefValue: f.DefValue})
	if name == "value" {
		name = placeholder(f.Value)
	}
	star := ""
	if g != nil && slices.Contains(serverKeys, f.Name) {
		star = " *"
	}
	fmt.Fprintf(out, "  --%s %s%s\n", f.Name, name, star)
	fmt.Fprintf(out, "        %s\n", text)
	var last []string
	if g != nil {
		last = append(last, "env "+envName(f.Name))
	}
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
		last = append(last, "default "+f.DefValue)
	}
	if len(last) > 0 {
		fmt.Fprintf(out, "        %s\n", strings.Join(last, "   "))
	}
}

// subcommandHelp prints the help of bridge pin or bridge check: intro, then
// the flags named (own, then of fs), then the groups whose flags apply too.
func subcommandHelp(out io.Writer, intro string, fs *flag.FlagSet, names []string, groups ...*helpGroup) {
	fmt.Fprint(out, intro)
	fmt.Fprint(out, "\nFlags (each of bridge's own also read from the environment variable shown;\nflags win):\n")
	for _, n := range names {
		if f := fs.Lookup(n); f != nil {
			printFlag(out, f)
		}
	}
	for _, g := range groups {
		fmt.Fprintf(out, "\n%s:\n", g.title)
		fs.VisitAll(func(f *flag.Flag) {
			if fg, _ := flagUsage(f); fg == g && !slices.Contains(names, f.Name) {
				printFlag(out, f)
			}
		})
	}
}

// printFlagDefaults is flag.PrintDefaults in the style of every help of
// the bridge: --name, never -name.
func printFlagDefaults(out io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(&flag.Flag{Name: f.Name, Usage: f.Usage, Value: unwrap(f.Value), DefValue: f.DefValue})
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
	g, ok := unwrap(v).(flag.Getter)
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

package main

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
)

// bridge --help is grouped (75 flags in one alphabetical list).
// A flag's group is declared in its own line of newFlagSet, by wrapping its
// usage: fs.StringVar(&c.Listen, "listen", c.Listen, gEdge.In("...")).
// TestEveryFlagInOneGroup fails for a flag without one.

// The groups, in the order --help shows them. A title says which era its
// limits apply to.
var (
	gEdge = &flagx.Group{ID: "edge", Title: "Listening and HTTP edge (every era)"}
	gAuth = &flagx.Group{ID: "auth", Title: "Authentication (every era; a non-loopback --listen needs one of them, or --insecure-no-auth)",
		EnvOnly: [][2]string{
			{envPrefix + "_AUTH_TOKENS", "accepted bearer tokens, comma-separated (no flag: tokens on a command line are visible to every local user)"},
			{envPrefix + "_OAUTH_CLIENT_SECRET", "the bridge's client secret at the introspection endpoint (no flag, for the same reason)"},
		}}
	gProcs     = &flagx.Group{ID: "procs", Title: "Server processes (every era)"}
	gDocker    = &flagx.Group{ID: "docker", Title: "Docker sandbox (--sandbox docker; refused with --sandbox local)"}
	gSessions  = &flagx.Group{ID: "sessions", Title: "2025 sessions (revisions 2025-03-26 to 2025-11-25, and 2024-11-05 over HTTP+SSE; these limits do not apply to 2026-07-28 clients)"}
	gLog       = &flagx.Group{ID: "log", Title: "Resumption log (2025 sessions)"}
	gStateless = &flagx.Group{ID: "stateless", Title: "2026-07-28 clients (stateless: served by a pool of servers, not by sessions)"}
	gGuards    = &flagx.Group{ID: "guards", Title: "Guards (every era: what servers offer and what callers may use)"}
	gObs       = &flagx.Group{ID: "obs", Title: "Observability"}
	gMulti     = &flagx.Group{ID: "multi", Title: "Several servers and instances",
		EnvOnly: [][2]string{
			{envPrefix + "_AFFINITY_SECRET", "the session-affinity secret (no flag: a command line is visible to every local user)"},
		}}

	helpGroups = []*flagx.Group{gEdge, gAuth, gProcs, gDocker, gSessions, gLog, gStateless, gGuards, gObs, gMulti}
)

// flagHelp renders bridge's helps: a flag of a group shows its variable, and
// * marks a key a server of a --config file may set for itself.
var flagHelp = &flagx.Help{
	Groups: helpGroups,
	Env:    envName,
	Star:   func(name string) bool { return slices.Contains(configfile.ServerKeys, name) },
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
	flagHelp.Grouped(out, fs) // "Other" never in a release: TestEveryFlagInOneGroup fails first
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

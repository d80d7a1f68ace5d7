package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
)

const pinUsage = `Usage:
  bridge pin --output mcp-lock.json [sandbox flags] -- COMMAND [ARGS...]
  bridge pin --check --pin-file mcp-lock.json [sandbox flags] -- COMMAND [ARGS...]

Starts the server once, as bridge would for a session (--sandbox, --image and
the other sandbox flags apply), and records each tool, prompt, resource and
resource template it offers: its digest, and beside it the members the digest
is of, for reviewers (a git diff of the file shows what changed); with
--sandbox docker also the image's digest. bridge --pin-file then hides and
refuses whatever is new or changed, and starts no container from an image of
another digest. Items whose descriptions hold hidden Unicode or exceed
--max-description-bytes are not pinned: bridge pin lists them and fails.
--check prints what was added, removed or changed, with a diff of each changed
item, and exits 1 if anything was.

Run 'bridge --help' for every flag.
`

// pinTimeout bounds how long bridge pin waits for the server to start,
// initialize and list everything.
const pinTimeout = 2 * time.Minute

// runPin is "bridge pin": it starts the server once, in the sandbox the
// flags describe, and writes what it offers to a lock file (--output), or
// compares that with a lock file (--check) and exits 1 on drift.
func runPin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultConfig()
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "bridge pin: %s\nRun 'bridge pin --help' for usage.\n", msg)
		return 2
	}
	if err := envconfig.Process("", cfg); err != nil {
		return usageErr(envError(err).Error())
	}
	fs := newFlagSet(cfg)
	var output string
	var check bool
	fs.StringVar(&output, "output", "", "write the lock to this `file`")
	fs.BoolVar(&check, "check", false, "compare the server with --pin-file instead: list what was added, removed or changed, exit 1 if anything was")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			subcommandHelp(stdout, pinUsage, fs, []string{"output", "check", "pin-file", "max-description-bytes", "allow-hidden-unicode"}, gProcs, gDocker)
			return 0
		}
		return usageErr(err.Error())
	}
	cfg.command = fs.Args()
	switch {
	case check && cfg.PinFile == "":
		return usageErr("--check needs --pin-file, the lock file to compare with")
	case !check && output == "":
		return usageErr("give --output FILE to write a lock file, or --check --pin-file FILE to compare with one")
	case check && output != "":
		return usageErr("--check writes nothing: drop --output")
	}
	if err := cfg.finish(); err != nil {
		return usageErr(err.Error())
	}
	logger := newLogger(cfg, stderr)

	ctx, cancel := context.WithTimeout(ctx, pinTimeout)
	defer cancel()
	// The lock is what to compare with here, not a pin to enforce: the
	// container must start from whatever the image now is.
	pinned := cfg.lock
	cfg.lock = nil
	launcher, closeLauncher, err := newInnerLauncher(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "bridge pin: %v\n", err)
		return 1
	}
	defer closeLauncher()
	proc, err := launcher.Launch(ctx, "pin")
	if err != nil {
		fmt.Fprintf(stderr, "bridge pin: starting the MCP server: %v\n", err)
		return 1
	}
	conn := peer.New(proc, pinRouter{}, &peer.Options{MaxMessageBytes: int(cfg.MaxMessageBytes), Logger: logger})
	lock, problems, err := pin.Capture(ctx, conn, cfg.inspection())
	if err == nil {
		// The image of a Docker-sandboxed server is pinned too.
		if im, ok := launcher.(interface {
			ImageDigest(context.Context) (string, error)
		}); ok {
			lock.ImageDigest, err = im.ImageDigest(ctx)
		}
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 2*cfg.StopGrace+30*time.Second)
	defer cancelStop()
	if cerr := conn.Close(stopCtx); cerr != nil {
		logger.Warn("stopping the MCP server", "err", cerr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge pin: %v\n", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "refused: %s\n", p)
	}
	if check {
		drift := pin.Compare(pinned, lock)
		for _, d := range drift {
			fmt.Fprintln(stdout, d)
			// How it changed: the diff of its pinned members and the
			// server's ("changed" alone gave a reviewer nothing).
			switch diff := d.Diff(); {
			case diff != "":
				fmt.Fprint(stdout, indentLines(diff, "    "))
			case d.Change == "changed" && d.Was == nil:
				fmt.Fprintf(stdout, "    (%s holds only its digest: write it again with bridge pin to see what changed next time)\n", cfg.PinFile)
			}
		}
		if was := pinned.ImageDigest; was != "" && was != lock.ImageDigest {
			fmt.Fprintf(stdout, "image %q changed: digest %s, pinned %s\n", cfg.Image, lock.ImageDigest, was)
			drift = append(drift, pin.Drift{Kind: "image", Name: cfg.Image, Change: "changed"})
		}
		if len(drift) > 0 || len(problems) > 0 {
			fmt.Fprintf(stderr, "bridge pin: the MCP server drifted from %s: %s, %s\n", cfg.PinFile,
				count(len(drift), "change", "changes"), count(len(problems), "refused item", "refused items"))
			return 1
		}
		fmt.Fprintf(stdout, "no drift: %s match %s\n", lockCounts(lock), cfg.PinFile)
		return 0
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "bridge pin: not writing %s: %s refused (see above); fix the server, or loosen with --allow-hidden-unicode or --max-description-bytes\n",
			output, count(len(problems), "item is", "items are"))
		return 1
	}
	if err := lock.WriteFile(output); err != nil {
		fmt.Fprintf(stderr, "bridge pin: writing the lock file: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "pinned %s in %s\n", lockCounts(lock), output)
	return 0
}

// lockCounts says what a lock holds: "3 tools, 1 prompt, 0 resources and
// 0 resource templates".
func lockCounts(l *pin.Lock) string {
	return count(len(l.Tools), "tool", "tools") + ", " + count(len(l.Prompts), "prompt", "prompts") + ", " +
		count(len(l.Resources), "resource", "resources") + " and " + count(len(l.ResourceTemplates), "resource template", "resource templates")
}

// count writes n with the noun that agrees with it.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// indentLines prefixes each line of s.
func indentLines(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			b.WriteString(prefix + line)
		}
	}
	return b.String()
}

// pinRouter ignores what the server sends besides the answers bridge pin
// waits for (its notifications; it has no client to ask anything of).
type pinRouter struct{}

func (pinRouter) Route(*peer.Message) {}
func (pinRouter) Ended(error)         {}

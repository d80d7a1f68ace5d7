package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
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

// runPin is "bridge pin": it starts the server once, in the sandbox the
// flags describe, and writes what it offers to a lock file (--output), or
// compares that with a lock file (--check) and exits 1 on drift.
func runPin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var output string
	var check bool
	cfg, usageErr, code := parseOneServer("pin", args, stdout, stderr, pinUsage, func(fs *flag.FlagSet) {
		fs.StringVar(&output, "output", "", "write the lock to this `file`")
		fs.BoolVar(&check, "check", false, "compare the server with --pin-file instead: list what was added, removed or changed, exit 1 if anything was")
	}, "output", "check", "pin-file", "max-description-bytes", "allow-hidden-unicode")
	if cfg == nil {
		return code
	}
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
	// The lock is what to compare with here, not a pin to enforce: the
	// container must start from whatever the image now is.
	pinned := cfg.lock
	cfg.lock = nil
	logger := newLogger(cfg, stderr)
	cmd := &pin.Command{
		NewLauncher: func(ctx context.Context) (sandbox.Launcher, func(), error) {
			return endpoint.NewLauncher(ctx, endpointOptions(cfg), logger)
		},
		MaxMessageBytes: int(cfg.MaxMessageBytes),
		Inspection:      cfg.inspection(),
		StopGrace:       cfg.StopGrace,
		Logger:          logger,
		Stdout:          stdout,
		Stderr:          stderr,
	}
	var err error
	if check {
		err = cmd.Check(ctx, pinned, cfg.PinFile, cfg.Image)
	} else {
		err = cmd.Write(ctx, output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bridge pin: %v\n", err)
		return 1
	}
	return 0
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mcp-bridge/mcp-bridge/deploy"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
)

const imageUsage = `Usage:
  bridge image build [--from SPEC] [--tag TAG] [--bridge-binary PATH] [--dockerfile-only] [-- COMMAND ARGS...]

Builds an image with the bridge as entrypoint, through the Docker Engine API
(DOCKER_HOST, else the local socket). With --from, the image also holds a
stdio MCP server installed at build time from a pinned package, which the
bridge runs for each session:

  npx:@scope/pkg@1.2.3     an npm package, run with npx
  uvx:pkg==1.2.3           a Python package, installed with uv
  go:example.com/cmd@v1.2.3  a Go program, built with go install

Without --from the image holds the bridge alone, on an empty (scratch) base.
-- COMMAND ARGS... replaces the server command the image runs by default.
No secret goes into the image: give tokens at run time (BRIDGE_AUTH_TOKENS).
It prints TAG DIGEST: DIGEST is the image ID (sha256:...), the digest bridge
pin records for an image run with --sandbox docker.

Flags:
`

// runImage implements `bridge image ...`; args follow "image".
func runImage(args []string, stdout, stderr io.Writer) int {
	f, command, code, ok := parseSubcommand(args, "build", "bridge image", "subcommand", imageUsage, stdout, stderr, newImageFlags)
	if !ok {
		return code
	}
	var err error
	var spec *deploy.Spec
	if f.from != "" {
		if spec, err = deploy.ParseSpec(f.from); err != nil {
			fmt.Fprintf(stderr, "bridge image build: %v\n", err)
			return 2
		}
	}
	df, err := deploy.RenderDockerfile(spec, command)
	if err != nil {
		fmt.Fprintf(stderr, "bridge image build: %v\n", err)
		return 2
	}
	if f.dockerfileOnly {
		stdout.Write(df)
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	id, tag, err := deploy.BuildImage(ctx, &deploy.ImageOptions{
		Spec: spec, Dockerfile: df, Tag: f.tag, BridgeBinary: f.bridgeBinary, BuildArgs: f.buildArgs, Progress: stderr,
	})
	if err != nil {
		fmt.Fprintf(stderr, "bridge image build: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s\n", tag, id)
	fmt.Fprint(stderr, deploy.RunHint(tag, spec != nil || len(command) > 0))
	return 0
}

type imageFlags struct {
	from, tag, bridgeBinary string
	dockerfileOnly          bool
	buildArgs               []string
}

func newImageFlags(out io.Writer, f *imageFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge image build", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.from, "from", "", "pinned package `SPEC` of the stdio MCP server to bundle (npx:, uvx: or go:)")
	fs.StringVar(&f.tag, "tag", "", "image `name:tag` (default mcp-bridge-<server>:<version>, or mcp-bridge:<content hash> for the bridge alone)")
	fs.StringVar(&f.bridgeBinary, "bridge-binary", "", "bridge executable to put in the image: static, Linux, amd64 or arm64 (default: this executable)")
	fs.BoolVar(&f.dockerfileOnly, "dockerfile-only", false, "print the Dockerfile instead of building")
	fs.Func("build-arg", "set an ARG of the Dockerfile, `NAME=VALUE` (repeatable), e.g. another base image: RUNTIME_IMAGE=registry.example.com/distroless/static:nonroot (--dockerfile-only lists them)", func(s string) error {
		if !strings.Contains(s, "=") {
			return fmt.Errorf("want NAME=VALUE, got %q", s)
		}
		f.buildArgs = append(f.buildArgs, s)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprint(out, imageUsage)
		flagx.PrintDefaults(out, fs)
	}
	return fs
}

// parseSubcommand parses "bridge NOUN VERB [flags] [-- COMMAND ARGS...]"
// (args follow NOUN). When there is nothing to run (usage, help, a bad
// flag) it returns ok=false and the exit status.
func parseSubcommand[F any](args []string, verb, noun, what, usage string, stdout, stderr io.Writer,
	newFlags func(io.Writer, *F) *flag.FlagSet) (f *F, command []string, code int, ok bool) {
	// Help that was asked for goes to stdout (bridge image --help | less);
	// help printed because of a mistake goes to stderr.
	help := func(w io.Writer) {
		fmt.Fprint(w, usage)
		flagx.PrintDefaults(w, newFlags(w, new(F)))
	}
	if len(args) == 0 || args[0] != verb {
		switch {
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
			help(stdout)
			return nil, nil, 0, false
		case len(args) == 0:
			help(stderr)
			return nil, nil, 2, false
		}
		help(stderr)
		fmt.Fprintf(stderr, "\n%s: unknown %s %q\n", noun, what, args[0])
		return nil, nil, 2, false
	}
	f = new(F)
	fs := newFlags(io.Discard, f)
	fs.Usage = func() {} // the error line is enough; the usage is one --help away
	if err := parseFlags(fs, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help(stdout)
			return nil, nil, 0, false
		}
		// One line naming the flag as the help does (--name).
		fmt.Fprintf(stderr, "%s %s: %v\nRun '%s %s --help' for usage.\n", noun, verb, err, noun, verb)
		return nil, nil, 2, false
	}
	command, err := trailingCommand(fs, args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", noun, verb, err)
		return nil, nil, 2, false
	}
	return f, command, 0, true
}

// trailingCommand returns what follows "--" in args, and refuses stray
// positional arguments before it.
func trailingCommand(fs *flag.FlagSet, args []string) ([]string, error) {
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

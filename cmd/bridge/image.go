package main

import (
	"context"
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
	cmd := &flagx.Subcommand{Noun: "bridge image", Verb: "build", What: "subcommand", Usage: imageUsage, Unknown: unknownFlag}
	f, command, code, ok := flagx.ParseSubcommand(cmd, args, stdout, stderr, newImageFlags)
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

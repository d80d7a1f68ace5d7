package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/mcp-bridge/mcp-bridge/deploy"
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
	id, tag, err := buildImage(ctx, spec, df, f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bridge image build: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s\n", tag, id)
	fmt.Fprint(stderr, runHint(tag, spec != nil || len(command) > 0))
	return 0
}

// runHint is how to run an image that `bridge image build` made. The bridge
// refuses to listen on all interfaces without tokens, hence the variable. An
// image of the bridge alone holds no server: the hint brings one.
func runHint(tag string, hasServer bool) string {
	if hasServer {
		return fmt.Sprintf("\nRun it (the bridge refuses to listen on all interfaces without tokens):\n  docker run --rm -p 8080:8080 -e BRIDGE_AUTH_TOKENS=\"$TOKEN\" %s\n", tag)
	}
	return fmt.Sprintf(`
This image holds the bridge alone (its entrypoint) and no MCP server. Run it
with a server mounted into it, e.g. a static Linux executable ./server (the
bridge refuses to listen on all interfaces without tokens):
  docker run --rm -p 8080:8080 -e BRIDGE_AUTH_TOKENS="$TOKEN" -v "$PWD/server:/server:ro" %s -- /server
or build FROM it (COPY server /server, CMD ["--", "/server"]), or bundle a
package with: bridge image build --from SPEC
`, tag)
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
		printFlagDefaults(out, fs)
	}
	return fs
}

// buildImage builds df with the bridge binary and returns the image ID and
// its tag. Build output goes to progress.
func buildImage(ctx context.Context, spec *deploy.Spec, df []byte, f *imageFlags, progress io.Writer) (id, tag string, err error) {
	path, err := bridgeBinaryPath(f.bridgeBinary)
	if err != nil {
		return "", "", err
	}
	bin, err := deploy.ReadBinary(path)
	if err != nil {
		return "", "", err
	}
	bctx, err := deploy.BuildContext(df, bin.Data)
	if err != nil {
		return "", "", err
	}
	tag = f.tag
	if tag == "" {
		if spec != nil {
			tag = "mcp-bridge-" + spec.Name() + ":" + spec.ImageTag()
		} else {
			tag = "mcp-bridge:" + deploy.ContentTag(bctx)
		}
	}
	args, err := buildArgs(df, f.buildArgs)
	if err != nil {
		return "", "", err
	}
	eng, err := deploy.NewEngine(ctx)
	if err != nil {
		return "", "", err
	}
	defer eng.Close()
	eng.BuildArgs = args
	id, err = eng.Build(ctx, bctx, []string{tag}, bin.Arch, progress)
	if err != nil {
		// The usual failure without a registry: a base image that is not
		// here and cannot be pulled. Name it and say how to bring it.
		var missing []string
		for _, img := range baseImages(df, args) {
			if _, ierr := eng.Client().ImageInspect(ctx, img); ierr != nil {
				missing = append(missing, img)
			}
		}
		if len(missing) > 0 {
			return "", "", fmt.Errorf("%w\nbase images not on the Docker host, which the build could not pull: %s; bring them there (docker save IMAGE where it is, then docker load -i FILE here), or name others with --build-arg (this Dockerfile's ARGs: %s)",
				err, strings.Join(missing, ", "), strings.Join(dockerfileArgs(df), ", "))
		}
	}
	return id, tag, err
}

var (
	reArg  = regexp.MustCompile(`(?m)^ARG ([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$`)
	reFrom = regexp.MustCompile(`(?m)^FROM (\S+)`)
)

// dockerfileArgs are the ARG names a Dockerfile declares.
func dockerfileArgs(df []byte) []string {
	var names []string
	for _, m := range reArg.FindAllSubmatch(df, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// buildArgs checks --build-arg values against the ARGs of df.
func buildArgs(df []byte, given []string) (map[string]*string, error) {
	if len(given) == 0 {
		return nil, nil
	}
	declared := dockerfileArgs(df)
	args := map[string]*string{}
	for _, kv := range given {
		k, v, _ := strings.Cut(kv, "=")
		if !slices.Contains(declared, k) {
			if len(declared) == 0 {
				return nil, fmt.Errorf("--build-arg %s: this Dockerfile has no ARG", k)
			}
			return nil, fmt.Errorf("--build-arg %s: the Dockerfile has no such ARG (it has %s)", k, strings.Join(declared, ", "))
		}
		args[k] = &v
	}
	return args, nil
}

// baseImages are the images df's FROM lines name, with ${ARG}s replaced by
// their values (given, else the default), build stages and scratch left out.
func baseImages(df []byte, given map[string]*string) []string {
	vals := map[string]string{}
	for _, m := range reArg.FindAllSubmatch(df, -1) {
		vals[string(m[1])] = string(m[2])
	}
	for k, v := range given {
		vals[k] = *v
	}
	var out []string
	for _, m := range reFrom.FindAllSubmatch(df, -1) {
		img := os.Expand(string(m[1]), func(k string) string { return vals[k] })
		if img != "scratch" && !slices.Contains(out, img) {
			out = append(out, img)
		}
	}
	return out
}

// bridgeBinaryPath is the flag's value, or this executable.
func bridgeBinaryPath(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find this executable to put in the image (%v); pass --bridge-binary", err)
	}
	return p, nil
}

// trailingCommand returns what follows "--" in args, and refuses stray
// positional arguments before it.
// parseSubcommand parses "bridge NOUN VERB [flags] [-- COMMAND ARGS...]"
// (args follow NOUN). When there is nothing to run (usage, help, a bad
// flag) it returns ok=false and the exit status.
func parseSubcommand[F any](args []string, verb, noun, what, usage string, stdout, stderr io.Writer,
	newFlags func(io.Writer, *F) *flag.FlagSet) (f *F, command []string, code int, ok bool) {
	// Help that was asked for goes to stdout (bridge image --help | less);
	// help printed because of a mistake goes to stderr.
	help := func(w io.Writer) {
		fmt.Fprint(w, usage)
		printFlagDefaults(w, newFlags(w, new(F)))
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

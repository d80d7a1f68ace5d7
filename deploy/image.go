package deploy

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// ImageOptions are what `bridge image build` builds. Every zero value is
// documented.
type ImageOptions struct {
	// Spec is the package of the server to bundle (nil: the bridge alone).
	Spec *Spec
	// Dockerfile is the Dockerfile to build, from RenderDockerfile.
	Dockerfile []byte
	// Tag names the image (empty: mcp-bridge-<server>:<version>, or
	// mcp-bridge:<content hash> for the bridge alone).
	Tag string
	// BridgeBinary is the bridge executable to put in the image, a static
	// Linux amd64 or arm64 one (empty: this executable).
	BridgeBinary string
	// BuildArgs set ARGs of the Dockerfile, each NAME=VALUE; a name the
	// Dockerfile does not declare is refused.
	BuildArgs []string
	// Progress receives the builder's output (nil: discarded).
	Progress io.Writer
}

// BuildImage builds an image of the bridge (and the server of o.Spec)
// through the Docker Engine API and returns its ID and tag. When the build
// fails for want of a base image the engine cannot pull, the error names
// those images and how to bring them.
func BuildImage(ctx context.Context, o *ImageOptions) (id, tag string, err error) {
	path, err := ExecutablePath(o.BridgeBinary)
	if err != nil {
		return "", "", err
	}
	bin, err := ReadBinary(path)
	if err != nil {
		return "", "", err
	}
	df := o.Dockerfile
	bctx, err := BuildContext(df, bin.Data)
	if err != nil {
		return "", "", err
	}
	tag = o.Tag
	if tag == "" {
		if o.Spec != nil {
			tag = "mcp-bridge-" + o.Spec.Name() + ":" + o.Spec.ImageTag()
		} else {
			tag = "mcp-bridge:" + ContentTag(bctx)
		}
	}
	args, err := buildArgs(df, o.BuildArgs)
	if err != nil {
		return "", "", err
	}
	eng, err := NewEngine(ctx)
	if err != nil {
		return "", "", err
	}
	defer eng.Close()
	eng.BuildArgs = args
	id, err = eng.Build(ctx, bctx, []string{tag}, bin.Arch, o.Progress)
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

// RunHint is how to run an image that BuildImage made. The bridge refuses
// to listen on all interfaces without tokens, hence the variable. An image
// of the bridge alone (hasServer false) holds no server: the hint brings
// one.
func RunHint(tag string, hasServer bool) string {
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

// ExecutablePath is the bridge executable to put in an image: given, or
// this executable if given is empty.
func ExecutablePath(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find this executable to put in the image (%v); pass --bridge-binary", err)
	}
	return p, nil
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

// SetBridgeBinary sets the bridge executable that a deployment with Spec
// ships: given, or this executable if given is empty. A real run checks it
// when it builds. A dry run calls nothing, but it checks a binary it was
// given (a static Linux executable of an architecture the target runs),
// which a real run would refuse only after its first steps; without one it
// shows the plan whatever this executable is (an AgentCore dry run on an
// amd64 machine was refused once, though it builds nothing) and returns as
// note what the real run would refuse.
func (c *AWSConfig) SetBridgeBinary(given string, dryRun bool) (note string, err error) {
	switch {
	case !dryRun:
		p, err := ExecutablePath(given)
		if err != nil {
			return "", err
		}
		c.BridgeBinary = p
	case given != "":
		if err := c.CheckBinary(given); err != nil {
			return "", err
		}
		c.BridgeBinary = given
	default:
		c.BridgeBinary = "<this executable>"
		if p, err := ExecutablePath(""); err != nil {
			note = err.Error()
		} else if err := c.CheckBinary(p); err != nil {
			note = "the real run would refuse this executable: " + err.Error()
		}
	}
	return note, nil
}

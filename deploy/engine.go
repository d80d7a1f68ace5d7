package deploy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ErrEngine wraps every failure to reach or use the Docker Engine.
var ErrEngine = errors.New("docker engine")

// An Engine builds, tags and pushes images through the Docker Engine API.
// No docker CLI is needed.
type Engine struct {
	cli *client.Client
	// BuildArgs are the ARG values of every Build (docker build --build-arg),
	// e.g. another base image; nil: the Dockerfile's defaults.
	BuildArgs map[string]*string
}

// NewEngine connects to the Docker Engine named by the environment
// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH; the local socket if
// unset) and checks that it answers.
func NewEngine(ctx context.Context) (*Engine, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("%w: bad Docker settings in the environment: %v", ErrEngine, err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: cannot reach the Docker Engine at %s: %v; start Docker, or set DOCKER_HOST to where it listens", ErrEngine, cli.DaemonHost(), err)
	}
	return &Engine{cli: cli}, nil
}

// Close releases the connection to the engine.
func (e *Engine) Close() error { return e.cli.Close() }

// Client is the underlying Engine API client, for callers that need more
// than building and pushing (tests run the image they built).
func (e *Engine) Client() *client.Client { return e.cli }

// Build builds an image from a context made by BuildContext, for linux/arch,
// tags it with tags, and returns its ID. The builder's output goes to
// progress line by line. The classic builder is asked for explicitly:
// BuildKit through the API needs a session this client does not open.
func (e *Engine) Build(ctx context.Context, buildContext []byte, tags []string, arch string, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	res, err := e.cli.ImageBuild(ctx, bytes.NewReader(buildContext), client.ImageBuildOptions{
		Tags:        tags,
		Remove:      true,
		ForceRemove: true,
		Platforms:   []ocispec.Platform{{OS: "linux", Architecture: arch}},
		Version:     build.BuilderV1,
		BuildArgs:   e.BuildArgs,
	})
	if err != nil {
		return "", fmt.Errorf("%w: the build request failed: %v", ErrEngine, err)
	}
	defer res.Body.Close()
	var id string
	var tail []string // the last output lines, for the error
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", fmt.Errorf("%w: reading the build output: %v", ErrEngine, err)
		}
		if m.Error != nil {
			return "", fmt.Errorf("%w: the image build failed: %s (last output: %s)", ErrEngine, m.Error.Message, strings.Join(tail, " | "))
		}
		if m.Stream != "" {
			io.WriteString(progress, m.Stream)
			for _, l := range strings.Split(strings.TrimSpace(m.Stream), "\n") {
				if l = strings.TrimSpace(l); l != "" {
					tail = append(tail, l)
				}
			}
			if len(tail) > 5 {
				tail = tail[len(tail)-5:]
			}
		}
		if m.Aux != nil {
			var aux struct{ ID string }
			if json.Unmarshal(*m.Aux, &aux) == nil && aux.ID != "" {
				id = aux.ID
			}
		}
	}
	if id == "" {
		return "", fmt.Errorf("%w: the build ended without an image ID (last output: %s)", ErrEngine, strings.Join(tail, " | "))
	}
	return id, nil
}

// Tag adds the reference target to the image source.
func (e *Engine) Tag(ctx context.Context, source, target string) error {
	if _, err := e.cli.ImageTag(ctx, client.ImageTagOptions{Source: source, Target: target}); err != nil {
		return fmt.Errorf("%w: tagging %s as %s: %v", ErrEngine, source, target, err)
	}
	return nil
}

// Push pushes ref to its registry with the given credentials. The password
// travels only in the X-Registry-Auth header to the engine; it is never
// written anywhere.
func (e *Engine) Push(ctx context.Context, ref string, auth registry.AuthConfig, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	buf, err := json.Marshal(auth)
	if err != nil {
		return err
	}
	res, err := e.cli.ImagePush(ctx, ref, client.ImagePushOptions{RegistryAuth: base64.URLEncoding.EncodeToString(buf)})
	if err != nil {
		return fmt.Errorf("%w: pushing %s: %v", ErrEngine, ref, err)
	}
	defer res.Close()
	for m, err := range res.JSONMessages(ctx) {
		if err != nil {
			return fmt.Errorf("%w: pushing %s: %v", ErrEngine, ref, err)
		}
		if m.Error != nil {
			return fmt.Errorf("%w: pushing %s: %s", ErrEngine, ref, m.Error.Message)
		}
		if m.Status != "" && m.Progress == nil {
			if m.ID != "" {
				fmt.Fprintf(progress, "%s: %s\n", m.ID, m.Status)
			} else {
				fmt.Fprintln(progress, m.Status)
			}
		}
	}
	return nil
}

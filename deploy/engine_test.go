package deploy

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
)

// TestBuildScratchImage builds the bridge-alone image (scratch.Dockerfile)
// through the Docker Engine API of this machine, from a static binary the
// test compiles, then runs it: the image must start the binary as the
// non-root user with nothing else in its root but what the runtime adds.
// No base image is pulled, so this runs without a registry.
func TestBuildScratchImage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	eng, err := NewEngine(ctx)
	if err != nil {
		t.Fatalf("this test needs the Docker Engine: %v", err)
	}
	// Cleanups run last-registered first: the engine closes (and its idle
	// connections with it) after the container and image are removed.
	t.Cleanup(func() { eng.Close() })
	cli := eng.Client()

	bin, err := ReadBinary(goBuild(t, "testdata/hello", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"))
	if err != nil {
		t.Fatal(err)
	}
	df, err := RenderDockerfile(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bctx, err := BuildContext(df, bin.Data)
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("mcp-bridge-test/scratch:%s-%d", ContentTag(bctx), time.Now().UnixNano())
	var progress bytes.Buffer
	id, err := eng.Build(ctx, bctx, []string{tag}, bin.Arch, &progress)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), id, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	if !strings.Contains(progress.String(), "FROM scratch") {
		t.Errorf("the build output does not show the Dockerfile's steps:\n%s", progress.String())
	}

	insp, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg := insp.Config
	if cfg.User != "65532:65532" || !slices.Equal(cfg.Entrypoint, []string{"/bridge"}) || insp.Architecture != "amd64" || insp.Os != "linux" {
		t.Fatalf("image config: user %q, entrypoint %q, platform %s/%s", cfg.User, cfg.Entrypoint, insp.Os, insp.Architecture)
	}
	if !slices.Contains(cfg.Env, "BRIDGE_LISTEN=0.0.0.0:8080") {
		t.Errorf("image environment %q lacks BRIDGE_LISTEN=0.0.0.0:8080", cfg.Env)
	}
	if _, ok := cfg.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("port 8080 not exposed: %v", cfg.ExposedPorts)
	}

	// Run it; the binary reports its uid, arguments and root directory.
	status, stdout, stderr := dockertest.Run(t, cli, tag, []string{"--", "a", "b"})
	if status != 0 {
		t.Fatalf("exit status %d: %s", status, stderr)
	}
	got := strings.TrimSpace(stdout)
	if !strings.HasPrefix(got, "uid=65532 gid=65532 args=--,a,b root=") {
		t.Fatalf("container output %q (stderr %q)", got, stderr)
	}
	root := strings.Split(strings.TrimPrefix(got, "uid=65532 gid=65532 args=--,a,b root="), ",")
	if !slices.Contains(root, "bridge") || slices.Contains(root, "bin") || slices.Contains(root, "usr") {
		t.Errorf("root directory %q; want the bridge and no distribution", root)
	}
}

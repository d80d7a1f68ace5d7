package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"

	"github.com/mcp-bridge/mcp-bridge/deploy"
)

func TestImageDockerfileOnlyGolden(t *testing.T) {
	for _, c := range []struct{ name, from string }{
		{"image-npx.Dockerfile.golden", "npx:@modelcontextprotocol/server-everything@2025.1.14"},
		{"image-uvx.Dockerfile.golden", "uvx:mcp-server-fetch==2025.4.7"},
		{"image-go.Dockerfile.golden", "go:github.com/acme/tools/cmd/mcp-server@v1.4.2"},
		{"image-bridge.Dockerfile.golden", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"build", "--dockerfile-only"}
			if c.from != "" {
				args = append(args, "--from", c.from)
			}
			var out, errb bytes.Buffer
			if code := runImage(args, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			golden(t, c.name, out.Bytes())
		})
	}
}

func TestImageUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push"}, `unknown subcommand "push"`},
		{[]string{"build", "--from", "uvx:pkg"}, "no version"},
		{[]string{"build", "--dockerfile-only", "--", "srv"}, "needs --from"},
		{[]string{"build", "--bridge-binary", "/nonexistent/bridge"}, "unusable bridge binary"},
	} {
		var out, errb bytes.Buffer
		code := runImage(c.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want an error containing %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestImageBuildRunsBridge builds the bridge-alone image with `bridge image
// build` through the Docker Engine API, from this very command compiled
// static, and runs `bridge image build --dockerfile-only` inside it: the
// scratch image starts the real bridge as a non-root user.
func TestImageBuildRunsBridge(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	eng, err := deploy.NewEngine(ctx)
	if err != nil {
		t.Fatalf("this test needs the Docker Engine: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	cli := eng.Client()

	bin, _ := sharedBinaries(t) // static

	tag := "mcp-bridge-test/bridge:" + strings.ReplaceAll(time.Now().Format("20060102-150405.000000000"), ".", "-")
	var out, errb bytes.Buffer
	if code := runImage([]string{"build", "--bridge-binary", bin, "--tag", tag}, &out, &errb); code != 0 {
		t.Fatalf("bridge image build: exit %d\n%s", code, errb.String())
	}
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	if fields := strings.Fields(out.String()); len(fields) != 2 || fields[0] != tag || !strings.HasPrefix(fields[1], "sha256:") {
		t.Fatalf("stdout %q; want %q and the image ID", out.String(), tag)
	}

	status, stdout, stderr := dockertest.Run(t, cli, tag, []string{"image", "build", "--dockerfile-only", "--from", "npx:pkg@1.0.0"})
	if status != 0 {
		t.Fatalf("the bridge in the image exited %d: %s", status, stderr)
	}
	want, _ := deploy.RenderDockerfile(&deploy.Spec{Kind: deploy.KindNPX, Package: "pkg", Version: "1.0.0"}, nil)
	if stdout != string(want) {
		t.Fatalf("the bridge in the image printed\n%s\nwant\n%s", stdout, want)
	}
	insp, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if insp.Config.User != "65532:65532" {
		t.Errorf("image user %q", insp.Config.User)
	}
}

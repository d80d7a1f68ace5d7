package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	if !strings.HasSuffix(errb.String(), deploy.RunHint(tag, false)) || !strings.Contains(deploy.RunHint(tag, false), "-v \"$PWD/server:/server:ro\" "+tag+" -- /server\n") {
		t.Errorf("the hint for the bridge-alone image does not bring a server:\n%s", errb.String())
	}
	if fields := strings.Fields(out.String()); len(fields) != 2 || fields[0] != tag || !strings.HasPrefix(fields[1], "sha256:") {
		t.Fatalf("stdout %q; want %q and the image ID", out.String(), tag)
	}

	runHintedCommand(t, ctx, deploy.RunHint(tag, false))

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

// A base image that is not on the Docker host and cannot be pulled (no
// registry here) is named, with what to do; --build-arg is checked against
// the Dockerfile's ARGs.
func TestImageBuildNamesMissingBaseImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bridge")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../../examples/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out, errb bytes.Buffer
	code := runImage([]string{"build", "--from", "go:example.com/x/cmd@v1.0.0", "--bridge-binary", bin,
		"--build-arg", "GO_IMAGE=mcp-bridge-test-missing:1", "--build-arg", "RUNTIME_IMAGE=mcp-bridge-test-missing:2"}, &out, &errb)
	lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	want := "base images not on the Docker host, which the build could not pull: mcp-bridge-test-missing:1, mcp-bridge-test-missing:2; " +
		"bring them there (docker save IMAGE where it is, then docker load -i FILE here), or name others with --build-arg (this Dockerfile's ARGs: GO_IMAGE, RUNTIME_IMAGE)"
	if code != 1 || lines[len(lines)-1] != want {
		t.Errorf("exit %d, stderr:\n%s\nwant its last line:\n%s", code, errb.String(), want)
	}

	errb.Reset()
	code = runImage([]string{"build", "--from", "npx:pkg@1.0.0", "--bridge-binary", bin, "--build-arg", "GO_IMAGE=x"}, &out, &errb)
	if want := "bridge image build: --build-arg GO_IMAGE: the Dockerfile has no such ARG (it has NODE_IMAGE)\n"; code != 1 || errb.String() != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errb.String(), want)
	}
}

// runHintedCommand runs the docker run line of a hint as a user would, with
// ./server the example server built static, $TOKEN set, and the port
// published on a free loopback port instead of 8080; then calls a tool
// through it with the token.
func runHintedCommand(t *testing.T, ctx context.Context, hint string) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker command to run the hint with")
	}
	var line string
	for _, l := range strings.Split(hint, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "docker run ") {
			line = l
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "server"), dockertest.StaticBinary(t, "../../examples/hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	const token = "hint-token"
	// What the shell would do to the line, and -d to run it in the background.
	line = strings.NewReplacer(`"$TOKEN"`, token, `"$PWD/server:/server:ro"`, dir+"/server:/server:ro",
		"-p 8080:8080", "-d -p 127.0.0.1::8080").Replace(line)
	out, err := exec.CommandContext(ctx, "sh", "-c", line).Output()
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
	// Ready once the bridge says it listens.
	logs := exec.CommandContext(ctx, "docker", "logs", "-f", id)
	pipe, _ := logs.StderrPipe()
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { logs.Process.Kill(); logs.Wait() }()
	sc := bufio.NewScanner(pipe)
	for !strings.Contains(sc.Text(), "bridge listening") {
		if !sc.Scan() {
			t.Fatalf("the container of %q never listened", line)
		}
	}
	port, err := exec.CommandContext(ctx, "docker", "port", id, "8080/tcp").Output()
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + strings.TrimSpace(strings.Split(string(port), "\n")[0]) + "/mcp"
	httpClient := &http.Client{Transport: bearer{token}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "hint", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient}, nil)
	if err != nil {
		t.Fatalf("connecting to the hinted container at %s: %v", url, err)
	}
	defer cs.Close()
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hinted"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "hinted" {
		t.Fatalf("echo through the hinted container: %v %v", res, err)
	}
}

// bearer adds a bearer token to each request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

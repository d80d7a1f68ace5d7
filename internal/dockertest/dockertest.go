// Package dockertest holds what the tests of several packages need from the
// real Docker Engine: a client (or a skip where no engine is reachable),
// images built from files the test supplies (no registry is reachable, so
// images are FROM scratch plus binaries the test compiled), and one-shot
// containers whose exit status and output the test reads.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Timeout bounds each engine operation of these helpers.
const Timeout = 5 * time.Minute

// Client connects to the engine from the environment, or skips tb with the
// reason when none is reachable. The client is closed when tb ends.
func Client(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		tb.Fatalf("Docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		tb.Skipf("no Docker Engine reachable at %s (%v): these tests need one (set DOCKER_HOST); CI has one", cli.DaemonHost(), err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// File is one file of a build context.
type File struct {
	Name string
	Mode int64
	Data []byte
}

// RandomSuffix is 12 hex characters, for unique tags and names.
func RandomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// BuildImage builds an image tagged name:<random> from a Dockerfile and
// files, removes it when tb ends, and returns its tag.
func BuildImage(tb testing.TB, cli *client.Client, name, dockerfile string, files ...File) string {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range append([]File{{"Dockerfile", 0o644, []byte(dockerfile)}}, files...) {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data))}); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	tag := name + ":" + RandomSuffix()
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true,
		Labels: map[string]string{"io.mcp-bridge.test": name},
	})
	if err != nil {
		tb.Fatalf("building the test image %s: %v", tag, err)
	}
	out, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		tb.Fatalf("building the test image %s: %v", tag, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
			tb.Errorf("removing the test image %s: %v", tag, err)
		}
	})
	if bytes.Contains(out, []byte(`"errorDetail"`)) {
		tb.Fatalf("building the test image %s: %s", tag, out)
	}
	return tag
}

// Run runs image with cmd in a container without network, waits for it to
// exit and returns its exit status and output. The container is removed
// when tb ends.
func Run(tb testing.TB, cli *client.Client, image string, cmd []string) (status int64, stdout, stderr string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Image:      image,
		Config:     &container.Config{Cmd: cmd},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cli.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	wait := cli.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		tb.Fatal(err)
	}
	select {
	case res := <-wait.Result:
		status = res.StatusCode
	case err := <-wait.Error:
		tb.Fatal(err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer logs.Close()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, logs); err != nil && !errors.Is(err, io.EOF) {
		tb.Fatal(err)
	}
	return status, out.String(), errb.String()
}

// StaticBinary compiles the Go package at dir (relative to the test's
// directory) as a static Linux binary for this machine's architecture, the
// only kind a FROM scratch image can run, and returns its bytes.
func StaticBinary(tb testing.TB, dir string) []byte {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "bin")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, dir)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("compiling %s as a static binary: %v\n%s", dir, err, msg)
	}
	exe, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return exe
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dockerE2E is the Docker Engine and an image holding the example server,
// FROM scratch with a static binary (no registry is reachable: nothing can
// be pulled).
type dockerE2E struct {
	cli    *client.Client
	image  string
	bridge string
}

func setupDockerE2E(t testing.TB) *dockerE2E {
	t.Helper()
	bridgeBin, helloBin := buildBinaries(t)
	cli := dockertest.Client(t)
	exe, err := os.ReadFile(helloBin) // static: fit for FROM scratch
	if err != nil {
		t.Fatal(err)
	}
	tag := dockertest.BuildImage(t, cli, "mcp-bridge-e2e-hello", "FROM scratch\nCOPY hello /hello\nENTRYPOINT [\"/hello\"]\n",
		dockertest.File{Name: "hello", Mode: 0o755, Data: exe})
	return &dockerE2E{cli: cli, image: tag, bridge: bridgeBin}
}

// containers lists the containers of a bridge instance, running or not.
func (d *dockerE2E) containers(t *testing.T, instance string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", "io.mcp-bridge.instance="+instance),
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Items)
}

// destroyed returns a channel that receives once per container of the
// instance the engine destroys. Subscribed before the action that should
// cause it, so no event is missed.
func (d *dockerE2E) destroyed(t *testing.T, instance string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ev := d.cli.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).
		Add("type", "container").Add("event", "destroy").Add("label", "io.mcp-bridge.instance="+instance)})
	out := make(chan struct{}, 16)
	go func() {
		for {
			select {
			case <-ev.Messages:
				out <- struct{}{}
			case <-ev.Err:
				return
			}
		}
	}()
	return out
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(2 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A whole session through a container, and no container left after DELETE,
// after the idle timeout, at shutdown, and after kill -9 of the bridge
// followed by a restart.
func TestDockerSandboxEndToEnd(t *testing.T) {
	t.Parallel()
	d := setupDockerE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	connect := func(url string) *mcp.ClientSession {
		t.Helper()
		// Sessions (a container each) are a 2025 notion: the SDK v1.8
		// client speaks 2026-07-28 by default, and then gets the pool.
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("connecting through a Docker sandbox: %v", err)
		}
		return cs
	}
	count := func(cs *mcp.ClientSession) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "count"})
		if err != nil || res.IsError {
			t.Fatalf("count through a container: %v %v", res, err)
		}
	}
	dockerArgs := func(instance string, extra ...string) []string {
		return append([]string{"--sandbox", "docker", "--image", d.image, "--pull", "never",
			"--instance", instance, "--stop-grace", "2s"}, extra...)
	}

	t.Run("delete and shutdown", func(t *testing.T) {
		inst := "e2e-" + dockertest.RandomSuffix()
		gone := d.destroyed(t, inst)
		p := startBridgeBinary(t, d.bridge, dockerArgs(inst)...)
		a, b := connect(p.url), connect(p.url)
		count(a)
		count(b)
		if n := d.containers(t, inst); n != 2 {
			t.Fatalf("%d containers for two sessions", n)
		}
		a.Close() // DELETE
		waitFor(t, gone, "the container of a deleted session to be removed")
		if n := d.containers(t, inst); n != 1 {
			t.Fatalf("%d containers after DELETE of one of two sessions", n)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("bridge exit: %v", err)
		}
		b.Close()
		if n := d.containers(t, inst); n != 0 {
			t.Fatalf("%d containers left after shutdown", n)
		}
	})

	t.Run("idle timeout", func(t *testing.T) {
		inst := "e2e-" + dockertest.RandomSuffix()
		gone := d.destroyed(t, inst)
		p := startBridgeBinary(t, d.bridge, dockerArgs(inst, "--session-idle-timeout", "3s")...)
		cs := connect(p.url)
		defer cs.Close()
		count(cs)
		waitFor(t, gone, "the container of an idle session to be removed")
		if n := d.containers(t, inst); n != 0 {
			t.Fatalf("%d containers after the idle timeout", n)
		}
	})

	t.Run("kill -9 then restart", func(t *testing.T) {
		// Without --instance: the restarted bridge finds the containers of
		// a bridge process that no longer exists.
		p := startBridgeBinary(t, d.bridge, "--sandbox", "docker", "--image", d.image, "--pull", "never")
		cs := connect(p.url)
		defer cs.Close()
		count(cs)
		p.cmd.Process.Kill()
		p.cmd.Wait()
		lines := <-p.done
		var inst string
		for _, l := range lines {
			if i := bytes.Index([]byte(l), []byte(`"instance":"`)); i >= 0 {
				rest := l[i+len(`"instance":"`):]
				inst = rest[:bytes.IndexByte([]byte(rest), '"')]
				break
			}
		}
		if inst == "" {
			t.Fatalf("the bridge did not log its instance:\n%v", lines)
		}
		if n := d.containers(t, inst); n != 1 {
			t.Fatalf("%d containers after kill -9, want the orphan", n)
		}
		p2 := startBridgeBinary(t, d.bridge, "--sandbox", "docker", "--image", d.image, "--pull", "never")
		if n := d.containers(t, inst); n != 0 {
			t.Fatalf("%d containers of the killed bridge after a restart", n)
		}
		p2.cmd.Process.Signal(syscall.SIGTERM)
		p2.cmd.Wait()
	})
}

// BenchmarkSessionStart times the initialize round trip through the bridge
// binary (POST initialize until its answer is read), with the example
// server as a local process and in a Docker container, with and without a
// warm pool. Reported as p50/p99 in milliseconds:
//
//	go test -run '^$' -bench SessionStart -benchtime 50x ./cmd/bridge/
func BenchmarkSessionStart(b *testing.B) {
	d := setupDockerE2E(b)
	_, helloBin := buildBinaries(b)
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"local", []string{"--", helloBin}},
		{"local-warm", []string{"--warm", "4", "--", helloBin}},
		{"docker", []string{"--sandbox", "docker", "--image", d.image, "--pull", "never", "--instance", "bench-" + dockertest.RandomSuffix()}},
		{"docker-warm", []string{"--sandbox", "docker", "--image", d.image, "--pull", "never", "--warm", "4", "--instance", "bench-" + dockertest.RandomSuffix()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := startBridgeBinary(b, d.bridge, bc.args...)
			defer func() { p.cmd.Process.Signal(syscall.SIGTERM); p.cmd.Wait() }()
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				req, _ := http.NewRequest("POST", p.url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if !strings.Contains(string(out), `"result"`) {
					b.Fatalf("initialize: %d %s", resp.StatusCode, out)
				}
				b.StopTimer()
				del, _ := http.NewRequest("DELETE", p.url, nil)
				del.Header.Set("Mcp-Session-Id", resp.Header.Get("Mcp-Session-Id"))
				if r, err := http.DefaultClient.Do(del); err == nil {
					r.Body.Close()
				}
				b.StartTimer()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// With --pull never, a missing image is refused at start-up, not at the
// first session; each loosening of the Docker sandbox is logged as a WARN
// with its risk.
func TestDockerStartupChecksAndWarnings(t *testing.T) {
	d := setupDockerE2E(t)
	const missing = "mcp-bridge-e2e-no-such-image:404"
	_, stderr, code := runBinary(t, d.bridge, nil, "--listen", "127.0.0.1:0", "--sandbox", "docker", "--image", missing, "--pull", "never")
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	want := "bridge: --pull: image " + missing + " is not on the Docker host and the pull policy is never; build or load it there (docker build -t " + missing +
		", docker load -i FILE), or let the bridge pull missing images"
	if code != 1 || lines[len(lines)-1] != want {
		t.Errorf("--pull never with a missing image: exit %d, stderr:\n%s\nwant its last line:\n%s", code, stderr, want)
	}

	p := startBridgeBinary(t, d.bridge, "--sandbox", "docker", "--image", d.image, "--pull", "never",
		"--instance", "e2e-"+dockertest.RandomSuffix(), "--sandbox-user", "0:0", "--sandbox-network", "bridge",
		"--sandbox-mount", t.TempDir()+":/data:rw", "--sandbox-env", "API_KEY=s3cret", "--sandbox-memory", "1g",
		"--sandbox-cpus", "1.5", "--sandbox-pids", "512")
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	var warned []string
	for _, l := range <-p.done {
		if strings.Contains(l, "s3cret") {
			t.Errorf("the log holds a --sandbox-env value: %s", l)
		}
		var rec struct{ Level, Msg, Flag, Value string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Level == "WARN" {
			if rec.Flag == "--sandbox-mount" {
				rec.Value = "DIR:/data:rw"
			}
			warned = append(warned, rec.Flag+" "+rec.Value+": "+rec.Msg)
		}
	}
	wantWarn := []string{
		"--sandbox-network bridge: loosened: the server can reach your network and the internet: exfiltration, lateral movement",
		"--sandbox-mount DIR:/data:rw: loosened: the server reads and writes those host files",
		"--sandbox-env API_KEY: loosened: the server can read every value given",
		"--sandbox-user 0:0: loosened: the server runs as root: an escape from the container lands as root",
		"--sandbox-memory 1GiB: loosened: a server can take 1GiB of host memory",
		"--sandbox-cpus 1.5: loosened: a server can take that much CPU time",
		"--sandbox-pids 512: loosened: more processes on the host",
	}
	if strings.Join(warned, "\n") != strings.Join(wantWarn, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(warned, "\n"), strings.Join(wantWarn, "\n"))
	}
}

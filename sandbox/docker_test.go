package sandbox

// Tests of the Docker launcher against the real Docker Engine of the
// machine (skipped, saying why, when none is reachable). No registry is
// needed: the test image is FROM scratch plus testdata/dockerchild, a static
// Go program compiled here and built into an image through the Engine API,
// under a tag unique to this run and removed at the end.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/goleak"
)

// dockerTestTimeout bounds each test's API calls and Stops; it never paces them.
const dockerTestTimeout = 2 * time.Minute

// dockerEnv is the engine and the test image.
type dockerEnv struct {
	cli   *client.Client
	image string
}

// setupDocker connects to the engine (or skips tb), compiles the test child
// and builds the test image, removed when tb ends.
func setupDocker(tb testing.TB) *dockerEnv {
	tb.Helper()
	cli := dockertest.Client(tb)

	exe := dockertest.StaticBinary(tb, "./testdata/dockerchild")
	tag := dockertest.BuildImage(tb, cli, "mcp-bridge-test-child", "FROM scratch\nCOPY dockerchild /dockerchild\nENTRYPOINT [\"/dockerchild\"]\n",
		dockertest.File{Name: "dockerchild", Mode: 0o755, Data: exe})
	return &dockerEnv{cli: cli, image: tag}
}

// containers lists the containers (running or not) carrying label=value.
func (e *dockerEnv) containers(t testing.TB, label, value string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", label+"="+value),
	})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, shortID(c.ID)+" ("+string(c.State)+")")
	}
	return ids
}

// networks lists the networks of a bridge instance.
func (e *dockerEnv) networks(t testing.TB, instance string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	res, err := e.cli.NetworkList(ctx, client.NetworkListOptions{
		Filters: make(client.Filters).Add("label", labelInstance+"="+instance),
	})
	if err != nil {
		t.Fatalf("listing networks: %v", err)
	}
	var names []string
	for _, n := range res.Items {
		names = append(names, n.Name)
	}
	return names
}

// exists reports whether the container id (short or long) is still there.
func (e *dockerEnv) exists(t testing.TB, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	_, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("inspecting container %s: %v", id, err)
	}
	return true
}

// waitRemoved waits until the engine has removed the container id.
func (e *dockerEnv) waitRemoved(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	w := e.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	select {
	case <-w.Result:
	case err := <-w.Error:
		if !cerrdefs.IsNotFound(err) { // already gone
			t.Errorf("waiting for the removal of container %s: %v", id, err)
		}
	}
}

// newDocker returns a launcher for the test image (pull never: there is no
// registry), changed by edit, its log recorder, and closes it at the end of
// t, checking that no container of its instance is left.
func (e *dockerEnv) newDocker(t testing.TB, edit func(*DockerOptions)) (*Docker, *logRecorder) {
	t.Helper()
	rec := newLogRecorder()
	opts := &DockerOptions{Image: e.image, Pull: PullNever, Logger: slog.New(rec)}
	if edit != nil {
		edit(opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	d, err := NewDocker(ctx, opts)
	if err != nil {
		t.Fatalf("NewDocker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left := e.containers(t, labelInstance, d.Instance()); len(left) > 0 {
			t.Errorf("containers left after Close: %v", left)
		}
		if left := e.networks(t, d.Instance()); len(left) > 0 {
			t.Errorf("networks left after Close: %v", left)
		}
	})
	return d, rec
}

// dockerChild is a launched test child with a line reader on its stdout.
type dockerChild struct {
	Process
	out *bufio.Reader
}

func launchDocker(t testing.TB, d *Docker, session string) *dockerChild {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	p, err := d.Launch(ctx, session)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return &dockerChild{Process: p, out: bufio.NewReader(p.Stdout())}
}

// ask sends one command line and returns the answer line.
func (c *dockerChild) ask(t testing.TB, cmd string) string {
	t.Helper()
	if _, err := io.WriteString(c.Stdin(), cmd+"\n"); err != nil {
		t.Fatalf("%s: writing %q: %v", c.ID(), cmd, err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: reading the answer to %q: %v (got %q)", c.ID(), cmd, err, line)
	}
	return strings.TrimSuffix(line, "\n")
}

// expect asks cmd and checks that the answer contains every one of want.
func (c *dockerChild) expect(t testing.TB, cmd string, want ...string) string {
	t.Helper()
	got := c.ask(t, cmd)
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %s = %q, want it to contain %q", c.ID(), cmd, got, w)
		}
	}
	return got
}

// answerFields parses "k=v k=v" answers.
func answerFields(s string) map[string]string {
	m := map[string]string{}
	for f := range strings.FieldsSeq(s) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestDocker(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // registered first: runs last
	e := setupDocker(t)

	t.Run("Exchange", func(t *testing.T) {
		t.Parallel()
		d, rec := e.newDocker(t, nil)
		c := launchDocker(t, d, "sess-exchange")
		if !regexp.MustCompile(`^container [0-9a-f]{12}$`).MatchString(c.ID()) {
			t.Errorf("ID() = %q, want \"container <12 hex>\"", c.ID())
		}
		for i := range 100 {
			c.expect(t, fmt.Sprintf("echo line %d {\"jsonrpc\":\"2.0\"}", i), fmt.Sprintf("line %d {\"jsonrpc\":\"2.0\"}", i))
		}
		c.expect(t, "stderr hello from the container", "ok")
		if got := c.ask(t, "args"); got != "" { // the image's entrypoint, no CMD
			t.Errorf("args = %q, want none", got)
		}
		if got := e.containers(t, labelSession, "sess-exchange"); len(got) != 1 || !strings.HasSuffix(got[0], "(running)") {
			t.Errorf("containers of the session while it runs: %v, want one running", got)
		}

		// Closing stdin is the server's cue to exit; output ends, Wait is clean.
		if err := c.Stdin().Close(); err != nil {
			t.Fatalf("closing stdin: %v", err)
		}
		if rest, err := io.ReadAll(c.out); err != nil || len(rest) > 0 {
			t.Errorf("stdout after closing stdin: %q, %v; want EOF", rest, err)
		}
		if err := c.Wait(); err != nil {
			t.Errorf("Wait: %v, want nil", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if got := e.containers(t, labelSession, "sess-exchange"); len(got) > 0 {
			t.Errorf("containers of the session after Stop: %v, want none", got)
		}
		// The stderr line reached the log with the session's ID.
		found := false
		for _, en := range rec.all() {
			if en.msg == "server stderr" && en.attrs["line"] == "hello from the container" {
				found = true
				if en.attrs["session"] != "sess-exchange" || "container "+en.attrs["container"] != c.ID() {
					t.Errorf("stderr log entry attributes %v, want session=sess-exchange container=%s", en.attrs, c.ID())
				}
			}
		}
		if !found {
			t.Errorf("stderr line not logged; log: %v", rec.all())
		}
	})

	t.Run("StderrLineBytes", func(t *testing.T) {
		t.Parallel()
		// The bound applies under Docker as it does to local servers
		// (before: the Docker launcher ignored --stderr-line-bytes and
		// logged up to DefaultStderrLineBytes).
		const bound = 100
		d, rec := e.newDocker(t, func(o *DockerOptions) { o.StderrLineBytes = bound })
		c := launchDocker(t, d, "sess-stderr-bound")
		long := strings.Repeat("0123456789", 30) // 300 bytes
		c.expect(t, "stderr "+long, "ok")
		c.expect(t, "stderr short line", "ok")
		if err := c.Stdin().Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); err != nil { // stderr is drained before Wait returns
			t.Errorf("Wait: %v", err)
		}
		want := []string{long[:bound] + truncatedMarker, "short line"}
		if got := rec.stderrLines(); !slices.Equal(got, want) {
			t.Errorf("stderr lines logged: %q, want %q", got, want)
		}
	})

	t.Run("EarlyOutput", func(t *testing.T) {
		t.Parallel()
		// Written the moment the server starts: caught because we attach
		// before starting (the engine keeps no log: driver "none"). Here
		// the server starts slower than an attach, so the banner alone
		// cannot show the order: the engine's events do.
		session := "sess-early-" + randomHex(4)
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		events := e.cli.Events(ctx, client.EventsListOptions{
			Since:   strconv.FormatInt(time.Now().Unix()-1, 10), // replays what came before the subscription
			Filters: make(client.Filters).Add("type", "container").Add("label", labelSession+"="+session),
		})
		d, rec := e.newDocker(t, func(o *DockerOptions) { o.Command = []string{"/dockerchild", "banner"} })
		c := launchDocker(t, d, session)
		var actions []string
		for !slices.Contains(actions, "start") {
			select {
			case m := <-events.Messages:
				actions = append(actions, string(m.Action))
			case err := <-events.Err:
				t.Fatalf("engine events: %v (so far %q)", err, actions)
			}
		}
		cancel()
		if a, s := slices.Index(actions, "attach"), slices.Index(actions, "start"); a < 0 || a > s {
			// Fatal: the banner below would then be lost, and reading it block.
			t.Fatalf("engine events %q: want attach before start", actions)
		}
		if line, err := c.out.ReadString('\n'); line != "banner on stdout\n" {
			t.Errorf("first stdout line: %q, %v; want the banner", line, err)
		}
		c.expect(t, "echo after the banner", "after the banner")
		if err := c.Stdin().Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); err != nil {
			t.Errorf("Wait: %v", err)
		}
		if got := rec.stderrLines(); !slices.Contains(got, "banner on stderr") {
			t.Errorf("stderr lines logged: %q, want the banner", got)
		}
	})

	t.Run("LockedDown", func(t *testing.T) {
		t.Parallel()
		d, _ := e.newDocker(t, nil)
		c := launchDocker(t, d, "sess-locked")
		c.expect(t, "uid", "uid=65534 gid=65534")
		c.expect(t, "net", "net: error:", "network is unreachable")
		c.expect(t, "write-root", "write-root: error:", "read-only file system")
		c.expect(t, "write-tmp", "write-tmp: ok")
		c.expect(t, "exec-tmp", "exec-tmp: error:", "permission denied")
		st := answerFields(c.ask(t, "status"))
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if st[k] != "0000000000000000" {
				t.Errorf("%s = %q, want no capabilities", k, st[k])
			}
		}
		if st["NoNewPrivs"] != "1" {
			t.Errorf("NoNewPrivs = %q, want 1", st["NoNewPrivs"])
		}
		if st["Seccomp"] != "2" {
			t.Errorf("Seccomp = %q, want 2 (filtering)", st["Seccomp"])
		}
		c.expect(t, "nofile", fmt.Sprintf("nofile=%d/%d", DefaultDockerNoFile, DefaultDockerNoFile))
		cg := answerFields(c.ask(t, "cgroup"))
		want := map[string]string{
			"memory": strconv.Itoa(DefaultDockerMemory),
			"memsw":  strconv.Itoa(DefaultDockerMemory),
			"pids":   strconv.Itoa(DefaultDockerPids),
		}
		for k, v := range want {
			if cg[k] != v {
				t.Errorf("cgroup %s = %q, want %s (all: %v)", k, cg[k], v, cg)
			}
		}
		if q, p, _ := strings.Cut(cg["cpu"], "/"); q != p || q == "" || q == "-1" || q == "max" {
			t.Errorf("cgroup cpu quota/period = %q, want one CPU (quota = period)", cg["cpu"])
		}

		// And what the engine recorded.
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		id := strings.TrimPrefix(c.ID(), "container ")
		res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hc, cfg := res.Container.HostConfig, res.Container.Config
		checks := []struct {
			name      string
			got, want any
		}{
			{"NetworkMode", string(hc.NetworkMode), "none"},
			{"ReadonlyRootfs", hc.ReadonlyRootfs, true},
			{"Privileged", hc.Privileged, false},
			{"CapDrop", strings.Join(hc.CapDrop, ","), "ALL"},
			{"CapAdd", len(hc.CapAdd), 0},
			{"SecurityOpt", strings.Join(hc.SecurityOpt, ","), "no-new-privileges"},
			{"IpcMode", string(hc.IpcMode), "private"},
			{"Init", hc.Init != nil && *hc.Init, true},
			{"AutoRemove", hc.AutoRemove, false},
			{"RestartPolicy", string(hc.RestartPolicy.Name), "no"},
			{"Memory", hc.Memory, int64(DefaultDockerMemory)},
			{"MemorySwap", hc.MemorySwap, int64(DefaultDockerMemory)},
			{"NanoCPUs", hc.NanoCPUs, int64(1e9)},
			{"PidsLimit", hc.PidsLimit != nil && *hc.PidsLimit == DefaultDockerPids, true},
			{"Ulimits", fmt.Sprint(hc.Ulimits), fmt.Sprint([]string{fmt.Sprintf("nofile=%d:%d", DefaultDockerNoFile, DefaultDockerNoFile)})},
			{"Tmpfs /tmp", hc.Tmpfs["/tmp"], fmt.Sprintf("rw,noexec,nosuid,nodev,size=%d", DefaultDockerTmpfsBytes)},
			{"LogConfig", hc.LogConfig.Type, "none"},
			{"User", cfg.User, DefaultDockerUser},
			{"label instance", cfg.Labels[labelInstance], d.Instance()},
			{"label session", cfg.Labels[labelSession], "sess-locked"},
			{"label pid", cfg.Labels[labelPID], strconv.Itoa(os.Getpid())},
		}
		for _, ck := range checks {
			if fmt.Sprint(ck.got) != fmt.Sprint(ck.want) {
				t.Errorf("inspect %s = %v, want %v", ck.name, ck.got, ck.want)
			}
		}
	})

	t.Run("Loosened", func(t *testing.T) {
		t.Parallel()
		ro, rw := t.TempDir(), t.TempDir()
		if err := os.WriteFile(filepath.Join(ro, "data.txt"), []byte("from the host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{ro, rw} {
			if err := os.Chmod(dir, 0o777); err != nil { // the server runs as uid 1000
				t.Fatal(err)
			}
		}
		d, _ := e.newDocker(t, func(o *DockerOptions) {
			o.Command = []string{"/dockerchild", "first", "second"}
			o.Env = []string{"GREETING=hello there"}
			o.Mounts = []string{ro + ":/data", rw + ":/out:rw"}
			o.Memory = 64 << 20
			o.CPUs = 0.5
			o.Pids = 100
			o.User = "1000:1000"
			o.NoFile = 4096
		})
		c := launchDocker(t, d, "sess-loosened")
		c.expect(t, "args", "first second")
		c.expect(t, "getenv GREETING", "hello there")
		c.expect(t, "uid", "uid=1000 gid=1000")
		c.expect(t, "read /data/data.txt", "from the host")
		c.expect(t, "write /data/new", "write: error:", "read-only file system")
		c.expect(t, "write /out/new", "write: ok")
		c.expect(t, "nofile", "nofile=4096/4096")
		cg := answerFields(c.ask(t, "cgroup"))
		if cg["memory"] != strconv.Itoa(64<<20) || cg["memsw"] != strconv.Itoa(64<<20) || cg["pids"] != "100" {
			t.Errorf("cgroup limits %v, want memory=memsw=%d pids=100", cg, 64<<20)
		}
		if q, p, _ := strings.Cut(cg["cpu"], "/"); q+"/"+p != "50000/100000" {
			t.Errorf("cgroup cpu = %q, want 50000/100000", cg["cpu"])
		}
		if _, err := os.Stat(filepath.Join(rw, "new")); err != nil {
			t.Errorf("the file written to the rw mount is not on the host: %v", err)
		}
	})

	t.Run("ForkBomb", func(t *testing.T) {
		t.Parallel()
		const pids = 64
		d, _ := e.newDocker(t, func(o *DockerOptions) { o.Pids = pids })
		c := launchDocker(t, d, "sess-forkbomb")
		got := answerFields(strings.TrimPrefix(c.ask(t, "forkbomb"), "forkbomb: "))
		started, err := strconv.Atoi(got["started"])
		if err != nil || got["eagain"] != "true" || started < 1 || started >= pids {
			t.Errorf("forkbomb: %v; want fork to fail with EAGAIN after 1 to %d processes", got, pids-1)
		}
		t.Logf("fork bomb: %d processes started before fork failed (pids limit %d)", started, pids)
		c.expect(t, "echo still here", "still here")
	})

	t.Run("OutOfMemory", func(t *testing.T) {
		t.Parallel()
		d, _ := e.newDocker(t, func(o *DockerOptions) { o.Memory = 32 << 20 })
		hog := launchDocker(t, d, "sess-hog")
		neighbour := launchDocker(t, d, "sess-neighbour")
		neighbour.expect(t, "echo before", "before")
		if _, err := io.WriteString(hog.Stdin(), "hog\n"); err != nil {
			t.Fatal(err)
		}
		if rest, err := io.ReadAll(hog.out); err != nil || len(rest) > 0 {
			t.Errorf("hog's stdout: %q, %v; want EOF", rest, err)
		}
		err := hog.Wait()
		var ee *ExitError
		if !errors.As(err, &ee) || !ee.OOMKilled || ee.Code == 0 {
			t.Fatalf("hog's Wait: %#v, want an *ExitError with OOMKilled", err)
		}
		t.Logf("hog: exit code %d: %v", ee.Code, err)
		if !slices.ContainsFunc(ee.Stderr, func(l string) bool { return strings.HasPrefix(l, "hog: ") }) {
			t.Errorf("ExitError.Stderr = %q, want the hog's progress lines", ee.Stderr)
		}
		neighbour.expect(t, "echo after", "after")
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		if err := hog.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if got := e.containers(t, labelSession, "sess-hog"); len(got) > 0 {
			t.Errorf("hog's container after Stop: %v", got)
		}
	})

	t.Run("ExitStatus", func(t *testing.T) {
		t.Parallel()
		d, _ := e.newDocker(t, nil)
		c := launchDocker(t, d, "sess-exit")
		c.expect(t, "stderr last words", "ok")
		if _, err := io.WriteString(c.Stdin(), "exit 3\n"); err != nil {
			t.Fatal(err)
		}
		var ee *ExitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.Code != 3 || ee.OOMKilled || !slices.Contains(ee.Stderr, "last words") {
			t.Errorf("Wait: %#v, want *ExitError{Code: 3, Stderr: [last words]}", err)
		}
		// It exited on its own: it is removed without waiting for Stop.
		e.waitRemoved(t, strings.TrimPrefix(c.ID(), "container "))
	})

	t.Run("StopEscalates", func(t *testing.T) {
		t.Parallel()
		d, rec := e.newDocker(t, func(o *DockerOptions) { o.StopGrace = 100 * time.Millisecond })
		c := launchDocker(t, d, "sess-trap")
		c.expect(t, "trap", "trapped") // ignores SIGTERM and stdin from now on
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Go(func() { errs[i] = c.Stop(ctx) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("concurrent Stop %d: %v", i, err)
			}
		}
		var ee *ExitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.Code != 137 {
			t.Errorf("Wait: %#v, want *ExitError{Code: 137} (SIGKILL)", err)
		}
		if n, err := c.out.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("stdout after Stop: %d, %v; want EOF", n, err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop again: %v", err)
		}
		if got := e.containers(t, labelSession, "sess-trap"); len(got) > 0 {
			t.Errorf("container after Stop: %v", got)
		}
		if !slices.ContainsFunc(rec.all(), func(en logEntry) bool {
			return strings.HasPrefix(en.msg, "MCP server still running after stdin was closed")
		}) {
			t.Errorf("no log of the stop escalation: %v", rec.all())
		}
	})

	t.Run("StopCallerGivesUp", func(t *testing.T) {
		t.Parallel()
		d, _ := e.newDocker(t, nil) // 5 s grace: only the caller giving up makes this quick
		c := launchDocker(t, d, "sess-giveup")
		c.expect(t, "trap", "trapped")
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Stop(gone); !errors.Is(err, context.Canceled) {
			t.Errorf("Stop with an ended ctx: %v, want context.Canceled", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		var ee *ExitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.Code != 137 {
			t.Errorf("Wait: %#v, want *ExitError{Code: 137} (killed at once)", err)
		}
		if got := e.containers(t, labelSession, "sess-giveup"); len(got) > 0 {
			t.Errorf("container after Stop: %v", got)
		}
	})

	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		rec := newLogRecorder()
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		d, err := NewDocker(ctx, &DockerOptions{Image: e.image, Pull: PullNever, Logger: slog.New(rec)})
		if err != nil {
			t.Fatal(err)
		}
		var ps []Process
		for i := range 2 {
			p, err := d.Launch(ctx, fmt.Sprintf("sess-close-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		if got := e.containers(t, labelInstance, d.Instance()); len(got) != 2 {
			t.Errorf("containers before Close: %v, want 2", got)
		}
		if err := d.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if got := e.containers(t, labelInstance, d.Instance()); len(got) > 0 {
			t.Errorf("containers after Close: %v", got)
		}
		for _, p := range ps {
			if err := p.Wait(); err != nil {
				t.Errorf("Wait after Close: %v (closing stdin should end it cleanly)", err)
			}
			if err := p.Stop(ctx); err != nil {
				t.Errorf("Stop after Close: %v", err)
			}
		}
		if _, err := d.Launch(ctx, "sess-late"); !errors.Is(err, ErrLaunch) {
			t.Errorf("Launch after Close: %v, want ErrLaunch", err)
		}
		if err := d.Close(ctx); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})

	t.Run("CloseWithEndedContext", func(t *testing.T) {
		t.Parallel()
		// A bridge out of time for its shutdown still leaves nothing behind.
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		d, err := NewDocker(ctx, &DockerOptions{Image: e.image, Pull: PullNever, Logger: slog.New(newLogRecorder())})
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.Launch(ctx, "sess-close-ended")
		if err != nil {
			t.Fatal(err)
		}
		c := &dockerChild{Process: p, out: bufio.NewReader(p.Stdout())}
		c.expect(t, "trap", "trapped") // would take 2 grace periods to stop
		ended, end := context.WithCancel(context.Background())
		end()
		if err := d.Close(ended); err != nil {
			t.Errorf("Close: %v", err)
		}
		if got := e.containers(t, labelInstance, d.Instance()); len(got) > 0 {
			t.Errorf("containers after Close: %v", got)
		}
		if err := p.Wait(); err == nil {
			t.Error("Wait after an aborted Close: nil, want an error")
		}
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop after Close: %v", err)
		}
	})

	t.Run("RemoveLeftovers", func(t *testing.T) {
		t.Parallel()
		// The helpers and this launcher label their containers with a host
		// name of their own: any other bridge on this host (a parallel
		// test, another run's) would otherwise remove the dead helper's
		// container first, by the same dead-process rule.
		host := "test-host-" + randomHex(6)
		dead := startHelperBridge(t, e.image, "inst-dead-"+randomHex(4), host)
		live := startHelperBridge(t, e.image, "inst-live-"+randomHex(4), host)
		t.Cleanup(func() { // nobody else would: they belong to no real host
			ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
			defer cancel()
			for _, id := range []string{dead.container, live.container} {
				e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
			}
		})
		// A bridge killed without a chance to clean up.
		dead.cmd.Process.Kill()
		dead.cmd.Wait()

		d, rec := e.newDocker(t, nil)
		d.self.host = host
		own := launchDocker(t, d, "sess-own")
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		n, err := d.RemoveLeftovers(ctx)
		if err != nil {
			t.Fatalf("RemoveLeftovers: %v", err)
		}
		if n < 1 {
			t.Errorf("RemoveLeftovers removed %d containers, want at least the dead bridge's", n)
		}
		if e.exists(t, dead.container) {
			t.Errorf("the dead bridge's container %s is still there", dead.container)
		}
		if !e.exists(t, live.container) {
			t.Errorf("the live bridge's container %s was removed", live.container)
		}
		own.expect(t, "echo mine", "mine")
		if !slices.ContainsFunc(rec.all(), func(en logEntry) bool {
			return en.msg == "removed a leftover container" && strings.HasPrefix(dead.container, en.attrs["container"]) &&
				strings.Contains(en.attrs["reason"], "is gone")
		}) {
			t.Errorf("no log of the dead bridge's container being removed: %v", rec.all())
		}

		// A bridge started under the live one's instance name takes over
		// everything of that name, alive or not.
		d2, _ := e.newDocker(t, func(o *DockerOptions) { o.Instance = live.instance })
		if _, err := d2.RemoveLeftovers(ctx); err != nil {
			t.Fatalf("RemoveLeftovers of the same instance: %v", err)
		}
		if e.exists(t, live.container) {
			t.Errorf("the container %s of instance %s survived RemoveLeftovers of that instance", live.container, live.instance)
		}
		own.expect(t, "echo still mine", "still mine")
		live.stop(t)
	})

	t.Run("PullNever", func(t *testing.T) {
		t.Parallel()
		image := "mcp-bridge-test-missing:" + randomHex(6)
		d, _ := e.newDocker(t, func(o *DockerOptions) { o.Image = image })
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		_, err := d.Launch(ctx, "sess-pull-never")
		if !errors.Is(err, ErrLaunch) {
			t.Fatalf("Launch: %v, want ErrLaunch", err)
		}
		for _, w := range []string{image, "never", "docker build", "docker load", "pull missing images"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != "Pull" || strings.Contains(err.Error(), "--") {
			t.Errorf("error %q: want an *OptionError for Pull, naming no flag", err)
		}
		t.Logf("pull never: %v", err)
	})

	t.Run("MissingNetwork", func(t *testing.T) {
		t.Parallel()
		d, _ := e.newDocker(t, func(o *DockerOptions) { o.Network = "mcp-bridge-test-no-such-net-" + randomHex(4) })
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		_, err := d.Launch(ctx, "sess-no-network")
		var oe *OptionError
		if !errors.Is(err, ErrLaunch) || !errors.As(err, &oe) || oe.Field != "Network" || strings.Contains(err.Error(), "--") {
			t.Fatalf("Launch: %v; want ErrLaunch and an *OptionError for Network, naming no flag", err)
		}
		t.Logf("missing network: %v", err)
	})

	t.Run("Pull", func(t *testing.T) {
		t.Parallel()
		reg := e.startRegistry(t)
		image := reg.host + "/mcp-bridge-test-pulled:" + randomHex(6)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
			defer cancel()
			if _, err := e.cli.ImageRemove(ctx, image, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
				t.Errorf("removing the pulled image: %v", err)
			}
		})
		count := func(rec *logRecorder, msg string) int {
			n := 0
			for _, en := range rec.all() {
				if en.msg == msg {
					n++
				}
			}
			return n
		}

		// missing: pulled by the first launch only.
		d, rec := e.newDocker(t, func(o *DockerOptions) { o.Image = image; o.Pull = PullMissing })
		for i := range 2 {
			c := launchDocker(t, d, fmt.Sprintf("sess-pulled-%d", i))
			c.expect(t, "echo pulled", "pulled")
		}
		if n := count(rec, "pulling image"); n != 1 {
			t.Errorf("pull missing: %d pulls for two launches, want 1", n)
		}
		var statuses []string
		for _, en := range rec.all() {
			if en.msg == "pull progress" {
				statuses = append(statuses, en.attrs["status"])
			}
		}
		for _, want := range []string{"Pulling fs layer", "Download complete", "Pull complete"} {
			if !slices.Contains(statuses, want) {
				t.Errorf("pull progress statuses %q lack %q", statuses, want)
			}
		}
		if count(rec, "pulled image") != 1 {
			t.Errorf("no end of pull logged: %v", rec.all())
		}
		t.Logf("pull progress logged: %q", statuses)

		// always: pulled by every launch, even though the image is there.
		manifests := reg.manifestRequests.Load()
		d2, rec2 := e.newDocker(t, func(o *DockerOptions) { o.Image = image; o.Pull = PullAlways })
		c := launchDocker(t, d2, "sess-pulled-always")
		c.expect(t, "echo again", "again")
		if count(rec2, "pulled image") != 1 || reg.manifestRequests.Load() == manifests {
			t.Errorf("pull always: no pull from the registry (log %v)", rec2.all())
		}
	})

	t.Run("PullFails", func(t *testing.T) {
		t.Parallel()
		// A registry on a closed port of loopback (an insecure registry by
		// default): the pull fails at once, without the network.
		image := "127.0.0.1:1/mcp-bridge-test-missing:" + randomHex(6)
		for _, pull := range []PullPolicy{PullMissing, PullAlways} {
			d, rec := e.newDocker(t, func(o *DockerOptions) { o.Image = image; o.Pull = pull })
			ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
			defer cancel()
			_, err := d.Launch(ctx, "sess-pull-fails")
			if !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), image) || !strings.Contains(err.Error(), "pull") {
				t.Errorf("pull %s: Launch: %v, want ErrLaunch naming the image and the pull", pull, err)
			}
			if !slices.ContainsFunc(rec.all(), func(en logEntry) bool { return en.msg == "pulling image" }) {
				t.Errorf("pull %s: no pull logged", pull)
			}
			t.Logf("pull %s: %v", pull, err)
		}
	})

	t.Run("CommandNotFound", func(t *testing.T) {
		t.Parallel()
		// The container's init starts, then cannot run the command: the
		// container runs and exits at once, and Wait tells why.
		d, _ := e.newDocker(t, func(o *DockerOptions) { o.Command = []string{"/does-not-exist", "arg"} })
		c := launchDocker(t, d, "sess-not-found")
		var ee *ExitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.Code != 127 ||
			!slices.ContainsFunc(ee.Stderr, func(l string) bool { return strings.Contains(l, "/does-not-exist") }) {
			t.Errorf("Wait: %v, want *ExitError{Code: 127} with stderr naming /does-not-exist", err)
		}
		t.Logf("command not found: %v", c.Wait())
		e.waitRemoved(t, strings.TrimPrefix(c.ID(), "container "))
	})

	t.Run("StartFailure", func(t *testing.T) {
		t.Parallel()
		// The engine refuses to start the container: Launch fails.
		d, _ := e.newDocker(t, func(o *DockerOptions) { o.User = "nosuchuser" })
		ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
		defer cancel()
		_, err := d.Launch(ctx, "sess-start-failure")
		if !errors.Is(err, ErrLaunch) {
			t.Fatalf("Launch: %v, want ErrLaunch", err)
		}
		for _, w := range []string{"nosuchuser", "exit code", "sess-start-failure", "user"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
		t.Logf("start failure: %v", err)
		if got := e.containers(t, labelSession, "sess-start-failure"); len(got) > 0 {
			t.Errorf("containers after a failed start: %v", got)
		}
	})
}

// helperBridge is another bridge process (this test binary, re-run) with
// one container running.
type helperBridge struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	instance  string
	container string // full ID
}

// startHelperBridge runs TestDockerHelperBridge in a new process, which
// launches one container of instance and reports its ID.
func startHelperBridge(t *testing.T, image, instance, host string) *helperBridge {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDockerHelperBridge$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MCP_BRIDGE_DOCKER_HELPER_IMAGE="+image, "MCP_BRIDGE_DOCKER_HELPER_INSTANCE="+instance,
		"MCP_BRIDGE_DOCKER_HELPER_HOST="+host)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperBridge{cmd: cmd, stdin: stdin, instance: instance}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait() // also after a kill; the exit status is checked by stop
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "helper container "); ok {
			h.container = id
			break
		}
	}
	if h.container == "" {
		t.Fatalf("the helper bridge did not report its container (%v)", sc.Err())
	}
	go io.Copy(io.Discard, stdout) // owned by cmd: ends when the helper exits, before cmd.Wait returns
	return h
}

// stop asks the helper to close its launcher and exit, and checks it did so
// cleanly.
func (h *helperBridge) stop(t *testing.T) {
	t.Helper()
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Errorf("helper bridge: %v", err)
	}
}

// TestDockerHelperBridge is not a test: it is the other bridge process of
// TestDocker/RemoveLeftovers, run only by it.
func TestDockerHelperBridge(t *testing.T) {
	image := os.Getenv("MCP_BRIDGE_DOCKER_HELPER_IMAGE")
	if image == "" {
		t.Skip("helper process of TestDocker/RemoveLeftovers; runs only when started by it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	opts := &DockerOptions{
		Image: image, Pull: PullNever, Instance: os.Getenv("MCP_BRIDGE_DOCKER_HELPER_INSTANCE"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if proxy := os.Getenv("MCP_BRIDGE_DOCKER_HELPER_EGRESS_PROXY"); proxy != "" { // TestDockerEgressLeftovers
		opts.Egress, opts.EgressProxyBinary = []string{"example.com"}, proxy
	}
	d, err := NewDocker(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	d.self.host = os.Getenv("MCP_BRIDGE_DOCKER_HELPER_HOST") // see TestDocker/RemoveLeftovers
	p, err := d.Launch(ctx, "sess-helper")
	if err != nil {
		t.Fatal(err)
	}
	c := &dockerChild{Process: p, out: bufio.NewReader(p.Stdout())}
	c.expect(t, "echo ready", "ready")
	fmt.Printf("helper container %s\n", p.(*dockerProcess).id)
	io.Copy(io.Discard, os.Stdin) // until the test closes our stdin (or kills us)
	if err := d.Close(ctx); err != nil {
		t.Errorf("helper Close: %v", err)
	}
}

func TestDockerOptions(t *testing.T) {
	o, mounts, err := dockerDefaults(&DockerOptions{Image: "example.com/server:1"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Pull != PullMissing || o.Network != "none" || o.User != "65534:65534" || o.Memory != 512<<20 ||
		o.CPUs != 1 || o.Pids != 256 || o.NoFile != 1024 || o.TmpfsBytes != 64<<20 || o.StopGrace != DefaultStopGrace ||
		!regexp.MustCompile(`^bridge-[0-9a-f]{16}$`).MatchString(o.Instance) || len(mounts) != 0 {
		t.Errorf("defaults: %+v, mounts %v", o, mounts)
	}

	for _, tc := range []struct {
		in       string
		src, dst string
		readOnly bool
		err      string // substring of the error; "" for success
	}{
		{in: "/srv/data:/data", src: "/srv/data", dst: "/data", readOnly: true},
		{in: "/srv/data:/data:ro", src: "/srv/data", dst: "/data", readOnly: true},
		{in: "/srv/data:/data:rw", src: "/srv/data", dst: "/data", readOnly: false},
		{in: "/srv//data/:/data/x/../y/", src: "/srv/data", dst: "/data/y", readOnly: true},
		{in: "/srv/data", err: "want SRC:DST"},
		{in: "/a:/b:ro:extra", err: "want SRC:DST"},
		{in: "/a:/b:RW", err: `mode "RW"`},
		{in: "/a:/b:", err: `mode ""`},
		{in: "data:/data", err: "absolute path on the Docker host"},
		{in: ":/data", err: "absolute path on the Docker host"},
		{in: "/a:data", err: "absolute path in the container"},
		{in: "/a:/", err: "root"},
		{in: "/a:/tmp/", err: "/tmp is the container's tmpfs"},
	} {
		m, err := parseMount(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseMount(%q) = %+v, %v; want an error containing %q", tc.in, m, err, tc.in)
			}
			continue
		}
		if err != nil || m.Source != tc.src || m.Target != tc.dst || m.ReadOnly != tc.readOnly || m.Type != "bind" {
			t.Errorf("parseMount(%q) = %+v, %v; want bind %s -> %s read-only %v", tc.in, m, err, tc.src, tc.dst, tc.readOnly)
		}
	}

	for _, tc := range []struct {
		name  string
		edit  func(*DockerOptions)
		err   string
		field string // the OptionError's Field
	}{
		{"no image", func(o *DockerOptions) { o.Image = "" }, "no image", "Image"},
		{"bad image", func(o *DockerOptions) { o.Image = "UPPER/Case" }, "image", "Image"},
		{"empty program", func(o *DockerOptions) { o.Command = []string{""} }, "program is empty", "Command"},
		{"pull", func(o *DockerOptions) { o.Pull = "sometimes" }, "pull policy", "Pull"},
		{"env", func(o *DockerOptions) { o.Env = []string{"NOVALUE"} }, "KEY=VALUE", "Env"},
		{"memory", func(o *DockerOptions) { o.Memory = 1 << 20 }, "6 MiB", "Memory"},
		{"cpus", func(o *DockerOptions) { o.CPUs = -1 }, "CPUs", "CPUs"},
		{"pids", func(o *DockerOptions) { o.Pids = -1 }, "pids", "Pids"},
		{"nofile", func(o *DockerOptions) { o.NoFile = -1 }, "open files", "NoFile"},
		{"tmpfs", func(o *DockerOptions) { o.TmpfsBytes = -1 }, "/tmp size", "TmpfsBytes"},
		{"grace", func(o *DockerOptions) { o.StopGrace = -time.Second }, "stop grace", "StopGrace"},
		{"mount", func(o *DockerOptions) { o.Mounts = []string{"rel:/x"} }, "absolute", "Mounts"},
		{"duplicate mount", func(o *DockerOptions) { o.Mounts = []string{"/a:/x", "/b:/x/"} }, "already a mount target", "Mounts"},
	} {
		opts := &DockerOptions{Image: "example.com/server:1"}
		tc.edit(opts)
		_, err := NewDocker(context.Background(), opts) // fails before connecting
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: NewDocker: %v, want an error containing %q", tc.name, err, tc.err)
		}
		// A program maps the option to its own flag: the error must say
		// which one, and never name a flag itself.
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || oe.Option() != "sandbox.DockerOptions."+tc.field {
			t.Errorf("%s: NewDocker: %v is not an *OptionError for field %s", tc.name, err, tc.field)
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%s: NewDocker: %q names a flag", tc.name, err)
		}
	}
}

func TestProcessStart(t *testing.T) {
	// The start time tells our process from another that got our PID later.
	self := processStart(os.Getpid())
	if self == "" {
		t.Skip("no /proc on this system")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if processExists(cmd.Process.Pid) {
		t.Errorf("processExists(%d) after it was reaped = true", cmd.Process.Pid)
	}
	if !processExists(os.Getpid()) {
		t.Error("processExists(self) = false")
	}
	labels := currentOwner().labels()
	if gone, why := ownerGone(labels, currentOwner()); gone {
		t.Errorf("ownerGone(self) = true (%s)", why)
	}
	labels[labelPIDStart] = self + "1"
	if gone, _ := ownerGone(labels, currentOwner()); !gone {
		t.Error("ownerGone with another start time = false, want true: the PID was reused")
	}
	labels = currentOwner().labels()
	labels[labelBootID] = "another-boot"
	if gone, _ := ownerGone(labels, currentOwner()); !gone {
		t.Error("ownerGone with another boot ID = false")
	}
	labels = currentOwner().labels()
	labels[labelPID] = strconv.Itoa(cmd.Process.Pid)
	labels[labelPIDStart] = ""
	if gone, _ := ownerGone(labels, currentOwner()); !gone {
		t.Error("ownerGone of an exited process = false")
	}
}

// BenchmarkDockerLaunch measures a session's container from Launch to its
// first echoed line (create, attach, start, the server's first answer), and
// the Stop that follows; it reports their p50 and p99.
func BenchmarkDockerLaunch(b *testing.B) {
	e := setupDocker(b)
	d, _ := e.newDocker(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var starts, stops []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		p, err := d.Launch(ctx, fmt.Sprintf("bench-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		c := &dockerChild{Process: p, out: bufio.NewReader(p.Stdout())}
		c.expect(b, "echo hi", "hi")
		t1 := time.Now()
		if err := p.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		starts = append(starts, t1.Sub(t0))
		stops = append(stops, time.Since(t1))
	}
	pct := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(starts, 0.5), "start-p50-ms")
	b.ReportMetric(pct(starts, 0.99), "start-p99-ms")
	b.ReportMetric(pct(stops, 0.5), "stop-p50-ms")
	b.ReportMetric(pct(stops, 0.99), "stop-p99-ms")
}

// testRegistry serves the test image over the registry HTTP API v2 on
// loopback, where the engine accepts plain HTTP (127.0.0.0/8 is an insecure
// registry by default): enough for a real pull, with no network.
type testRegistry struct {
	host             string       // 127.0.0.1:port
	manifestRequests atomic.Int64 // GET or HEAD
}

// startRegistry reads the test image from the engine (docker save), turns
// it into a schema 2 manifest with gzipped layers, and serves it under any
// repository name and tag.
func (e *dockerEnv) startRegistry(t *testing.T) *testRegistry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	saved, err := e.cli.ImageSave(ctx, []string{e.image})
	if err != nil {
		t.Fatalf("saving the test image: %v", err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(saved)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the saved image: %v", err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	saved.Close()
	var saveManifest []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &saveManifest); err != nil || len(saveManifest) != 1 {
		t.Fatalf("the saved image's manifest.json: %v (%s)", err, files["manifest.json"])
	}
	type descriptor struct {
		MediaType string `json:"mediaType"`
		Size      int    `json:"size"`
		Digest    string `json:"digest"`
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) descriptor {
		dg := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		blobs[dg] = b
		return descriptor{mediaType, len(b), dg}
	}
	// One more layer, unique to this run, so that the engine has to
	// download something and reports per-layer progress: a tar holding one
	// file. The image config lists each layer's uncompressed digest.
	var marker bytes.Buffer
	mw := tar.NewWriter(&marker)
	content := []byte(randomHex(16))
	mw.WriteHeader(&tar.Header{Name: "pulled-marker", Mode: 0o644, Size: int64(len(content))})
	mw.Write(content)
	mw.Close()
	layers := [][]byte{}
	for _, l := range saveManifest[0].Layers {
		layers = append(layers, files[l])
	}
	layers = append(layers, marker.Bytes())
	var config map[string]any
	if err := json.Unmarshal(files[saveManifest[0].Config], &config); err != nil {
		t.Fatalf("the saved image's config: %v", err)
	}
	rootfs, _ := config["rootfs"].(map[string]any)
	if rootfs == nil {
		t.Fatalf("the saved image's config has no rootfs: %s", files[saveManifest[0].Config])
	}
	rootfs["diff_ids"] = append(rootfs["diff_ids"].([]any), fmt.Sprintf("sha256:%x", sha256.Sum256(marker.Bytes())))
	config["history"] = append(config["history"].([]any), map[string]any{"created_by": "the sandbox tests' registry"})
	cb, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	manifest := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{
		SchemaVersion: 2,
		MediaType:     "application/vnd.docker.distribution.manifest.v2+json",
		Config:        add("application/vnd.docker.container.image.v1+json", cb),
	}
	for _, l := range layers {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(l)
		zw.Close()
		manifest.Layers = append(manifest.Layers, add("application/vnd.docker.image.rootfs.diff.tar.gzip", gz.Bytes()))
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	mdigest := fmt.Sprintf("sha256:%x", sha256.Sum256(mb))

	reg := &testRegistry{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		// /v2/, /v2/NAME/manifests/REF, /v2/NAME/blobs/DIGEST
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v2/"), "/")
		var body []byte
		switch {
		case r.URL.Path == "/v2/":
			body = []byte("{}")
			w.Header().Set("Content-Type", "application/json")
		case len(parts) >= 3 && parts[len(parts)-2] == "manifests":
			reg.manifestRequests.Add(1)
			body = mb
			w.Header().Set("Content-Type", manifest.MediaType)
			w.Header().Set("Docker-Content-Digest", mdigest)
		case len(parts) >= 3 && parts[len(parts)-2] == "blobs" && blobs[parts[len(parts)-1]] != nil:
			body = blobs[parts[len(parts)-1]]
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Docker-Content-Digest", parts[len(parts)-1])
		default:
			http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN","message":"not here"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method != http.MethodHead {
			w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	reg.host = strings.TrimPrefix(srv.URL, "http://")
	return reg
}

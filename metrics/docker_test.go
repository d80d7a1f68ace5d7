package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// A container killed for its memory counts as out of memory, and its
// start is timed, against the real Docker Engine (skipped without one).
// The child is sandbox's test child, FROM scratch: its "hog" command
// allocates until the kernel kills it.
func TestDockerChildOutOfMemory(t *testing.T) {
	cli := dockertest.Client(t)
	exe := dockertest.StaticBinary(t, "../sandbox/testdata/dockerchild")
	image := dockertest.BuildImage(t, cli, "mcp-bridge-metrics-test-child", "FROM scratch\nCOPY dockerchild /dockerchild\nENTRYPOINT [\"/dockerchild\"]\n",
		dockertest.File{Name: "dockerchild", Mode: 0o755, Data: exe})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := sandbox.NewDocker(ctx, &sandbox.DockerOptions{Image: image, Pull: sandbox.PullNever, Memory: 32 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())

	m := metrics.New()
	l := m.Server(metrics.DefaultServer).Launcher(d, "docker")
	hog, err := l.Launch(ctx, "metrics-hog")
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Stop(context.Background())
	if _, err := io.WriteString(hog.Stdin(), "hog\n"); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, hog.Stdout())
	var ee *sandbox.ExitError
	if err := hog.Wait(); !asExit(err, &ee) || !ee.OOMKilled {
		t.Fatalf("hog's Wait: %v, want an out-of-memory exit", err)
	}
	hog.Wait() // counted once, however often Wait is called

	fams := gather(t, m)
	lv := []string{"server", "default", "sandbox", "docker"}
	for name, want := range map[string]float64{
		"mcp_bridge_children_oom_total":     1,
		"mcp_bridge_children_started_total": 1,
		"mcp_bridge_child_start_seconds":    1,
		"mcp_bridge_children_failed_total":  0,
	} {
		if got := value(fams, name, lv...); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

package sandbox

// Tests of egress allow-lists against the real Docker Engine:
// the test child (testdata/dockerchild) fetches through the proxy
// variables, tunnels with CONNECT, dials raw TCP and resolves names from
// inside its container; the proxy is testdata/egressproxy, which runs
// egress.Main as the bridge binary does.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/mcp-bridge/mcp-bridge/internal/dockertest"
	"github.com/moby/moby/client"
)

// proxyBinary writes the static test proxy to a file and returns its path.
func proxyBinary(t testing.TB) string {
	t.Helper()
	data := dockertest.StaticBinary(t, "./testdata/egressproxy")
	path := filepath.Join(t.TempDir(), "egressproxy")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// bridgeGateway is the host's address on Docker's default bridge (docker0).
func (e *dockerEnv) bridgeGateway(t testing.TB) string {
	t.Helper()
	res, err := e.cli.NetworkInspect(context.Background(), "bridge", client.NetworkInspectOptions{})
	if err != nil || len(res.Network.IPAM.Config) == 0 {
		t.Fatalf("inspecting the default bridge network: %v", err)
	}
	if gw := res.Network.IPAM.Config[0].Gateway; gw.IsValid() {
		return gw.String()
	}
	// Engine 20.10 leaves it out of the default network's IPAM: it is
	// this host's address in the subnet.
	subnet := res.Network.IPAM.Config[0].Subnet
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && subnet.Contains(ip.Unmap()) {
				return ip.Unmap().String()
			}
		}
	}
	t.Skipf("no address of this host in the default bridge's subnet %s: the engine is remote", subnet)
	return ""
}

// serveOn serves "hello" on a new port of ip, until t ends.
func serveOn(t testing.TB, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT")
		fmt.Fprintln(w, "hello")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// egressEvents collects what OnEgress receives.
type egressEvents struct {
	mu     sync.Mutex
	events []string
	more   chan struct{}
}

func newEgressEvents() *egressEvents { return &egressEvents{more: make(chan struct{}, 1000)} }

func (r *egressEvents) add(session string, e egress.Event) {
	r.mu.Lock()
	s := fmt.Sprintf("session=%s host=%s port=%d ip=%s allowed=%v reason=%q up=%d down=%d", session, e.Host, e.Port, e.IP, e.Allowed, e.Reason, e.Up, e.Down)
	if e.Allowed && e.Reason == "" {
		s = fmt.Sprintf("session=%s host=%s port=%d ip=%s allowed=true up=%d down=%d", session, e.Host, e.Port, e.IP, e.Up, e.Down)
	}
	r.events = append(r.events, s)
	r.mu.Unlock()
	r.more <- struct{}{}
}

// wait returns the events once there are n, sorted.
func (r *egressEvents) wait(t testing.TB, n int) []string {
	t.Helper()
	for {
		r.mu.Lock()
		if len(r.events) >= n {
			out := slices.Clone(r.events)
			r.mu.Unlock()
			slices.Sort(out)
			return out
		}
		r.mu.Unlock()
		select {
		case <-r.more:
		case <-t.Context().Done():
			t.Fatal("test ended waiting for egress events")
		}
	}
}

func TestDockerEgress(t *testing.T) {
	env := setupDocker(t)
	gw := env.bridgeGateway(t)
	allowed := serveOn(t, gw)
	other := serveOn(t, gw)
	events := newEgressEvents()
	d, _ := env.newDocker(t, func(o *DockerOptions) {
		o.Egress = []string{net.JoinHostPort(gw, strconv.Itoa(allowed)), "localhost:" + strconv.Itoa(allowed)}
		o.EgressProxyBinary = proxyBinary(t)
		o.OnEgress = events.add
	})
	c := launchDocker(t, d, "s1")
	gwp := func(port int) string { return net.JoinHostPort(gw, strconv.Itoa(port)) }

	// Through the proxy: the allowed address and port answer, by plain
	// HTTP and through a CONNECT tunnel.
	c.expect(t, "fetch http://"+gwp(allowed)+"/", "fetch: 200 hello")
	tun := c.expect(t, "tunnel "+gwp(allowed), "tunnel: 200 sent=", "HTTP/1.0 200 OK")
	f := answerFields(tun)
	// Refused: another port of the same address, the metadata address, a
	// name not listed, a listed name that resolves to loopback, and a
	// request that does not carry the container's tag.
	c.expect(t, "fetch http://"+gwp(other)+"/", "fetch: 403 egress refused: "+gwp(other)+" is not in this server's allow-list")
	c.expect(t, "fetch http://169.254.169.254/latest/meta-data/", "fetch: 403 egress refused: 169.254.169.254:80 is not in this server's allow-list")
	c.expect(t, "fetch http://example.com/", "fetch: 403 egress refused: example.com:80 is not in this server's allow-list")
	c.expect(t, "tunnel localhost:"+strconv.Itoa(allowed), "tunnel: 502", "127.0.0.1 is a loopback address")
	c.expect(t, "tunnel "+gwp(allowed)+" noauth", "tunnel: 407 egress refused: this proxy serves the bridge's containers only")
	// Around the proxy: nothing.
	c.expect(t, "dial "+gwp(allowed), "dial: error:")
	c.expect(t, "dial "+gwp(other), "dial: error:")
	c.expect(t, "dial 1.1.1.1:443", "dial: error:")
	c.expect(t, "resolve example.com", "resolve: error:")

	want := []string{
		fmt.Sprintf("session= host=%s port=%d ip= allowed=false reason=%q up=0 down=0", gw, allowed, "no known container tag in Proxy-Authorization"),
		fmt.Sprintf("session=s1 host=%s port=%d ip=%s allowed=true up=%s down=%s", gw, allowed, gw, f["sent"], f["read"]),
		fmt.Sprintf("session=s1 host=%s port=%d ip= allowed=false reason=%q up=0 down=0", gw, other, "not in the allow-list"),
		fmt.Sprintf("session=s1 host=169.254.169.254 port=80 ip= allowed=false reason=%q up=0 down=0", "not in the allow-list"),
		fmt.Sprintf("session=s1 host=example.com port=80 ip= allowed=false reason=%q up=0 down=0", "not in the allow-list"),
		fmt.Sprintf("session=s1 host=localhost port=%d ip=127.0.0.1 allowed=false reason=%q up=0 down=0", allowed, "a loopback address"),
	}
	got := events.wait(t, len(want)+1)
	// The plain HTTP request's byte counts depend on Go's client; the
	// tunnel's are exactly what the child sent and read.
	var plain string
	for i, g := range got {
		if strings.HasPrefix(g, fmt.Sprintf("session=s1 host=%s port=%d ip=%s allowed=true up=", gw, allowed, gw)) && !strings.Contains(g, "up="+f["sent"]+" ") {
			plain = g
			got = slices.Delete(got, i, i+1)
			break
		}
	}
	if plain == "" || strings.Contains(plain, "up=0") || strings.Contains(plain, "down=0") {
		t.Errorf("no plain HTTP event with bytes both ways: %q", plain)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("egress events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A bridge killed with -9 leaves its servers' containers, its proxy and its
// internal network; the next start of the same instance removes them all.
func TestDockerEgressLeftovers(t *testing.T) {
	env := setupDocker(t)
	instance := "egress-leftovers-" + dockertest.RandomSuffix()
	t.Setenv("MCP_BRIDGE_DOCKER_HELPER_EGRESS_PROXY", proxyBinary(t))
	host, _ := os.Hostname()
	h := startHelperBridge(t, env.image, instance, host)
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
	if c, n := env.containers(t, labelInstance, instance), env.networks(t, instance); len(c) != 2 || len(n) != 1 {
		t.Fatalf("after kill -9: containers %v, networks %v; want the server's and the proxy's, and one network", c, n)
	}
	d, _ := env.newDocker(t, func(o *DockerOptions) { o.Instance = instance })
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	n, err := d.RemoveLeftovers(ctx)
	// At least those three: the sweep also removes what other dead
	// bridges of this host left.
	if err != nil || n < 3 {
		t.Errorf("RemoveLeftovers = %d, %v; want 3 or more (two containers, one network)", n, err)
	}
	if c, n := env.containers(t, labelInstance, instance), env.networks(t, instance); len(c) != 0 || len(n) != 0 {
		t.Errorf("after RemoveLeftovers: containers %v, networks %v", c, n)
	}
}

// --sandbox-runtime: a runtime the engine does not list
// is refused at NewDocker, naming those it has; with gVisor's runsc
// registered, the server runs under it (its kernel is gVisor's).
func TestDockerRuntime(t *testing.T) {
	env := setupDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	_, err := NewDocker(ctx, &DockerOptions{Image: env.image, Pull: PullNever, Runtime: "no-such-runtime"})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Field != "Runtime" || !strings.Contains(err.Error(), `has no runtime "no-such-runtime" (it has `) || !strings.Contains(err.Error(), "runc") {
		t.Errorf("NewDocker with an unknown runtime: %v", err)
	}
	info, err := env.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Info.Runtimes["runsc"]; !ok {
		t.Skip("the engine has no runsc runtime (gVisor): register it in daemon.json to run the rest")
	}
	d, _ := env.newDocker(t, func(o *DockerOptions) { o.Runtime = "runsc" })
	c := launchDocker(t, d, "sess-runsc")
	host, _ := os.ReadFile("/proc/version")
	got := c.ask(t, "read /proc/version")
	if strings.HasPrefix(got, "read: error") || strings.TrimSpace(string(host)) == got {
		t.Errorf("under runsc, /proc/version is %q, the host's is %q: not gVisor's kernel", got, host)
	}
	t.Logf("under runsc: %s", got)
	c.expect(t, "net", "net: error:")
}

// An image pinned by digest: a launch whose image's
// digest differs is refused in one line naming both; the pinned one runs.
func TestDockerImageDigest(t *testing.T) {
	env := setupDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	res, err := env.cli.ImageInspect(ctx, env.image)
	if err != nil {
		t.Fatal(err)
	}
	id := res.ID
	d, _ := env.newDocker(t, nil)
	if got, err := d.ImageDigest(ctx); err != nil || got != id {
		t.Fatalf("ImageDigest = %q, %v; want %s", got, err, id)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	d2, _ := env.newDocker(t, func(o *DockerOptions) { o.ImageDigest = other })
	_, err = d2.Launch(ctx, "sess-digest")
	want := fmt.Sprintf("image %s has digest %s, not the pinned %s", env.image, id, other)
	if !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Launch with another pinned digest: %v; want it to say %q", err, want)
	}
	d3, _ := env.newDocker(t, func(o *DockerOptions) { o.ImageDigest = id })
	c := launchDocker(t, d3, "sess-pinned")
	c.expect(t, "echo pinned", "pinned")
}

// WithLaunchEnv gives one container, and only it, its session's values.
func TestDockerLaunchEnv(t *testing.T) {
	env := setupDocker(t)
	d, _ := env.newDocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), dockerTestTimeout)
	defer cancel()
	p, err := d.Launch(WithLaunchEnv(ctx, []string{"GITHUB_TOKEN=alice-value"}), "sess-alice")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	a := &dockerChild{Process: p, out: bufio.NewReader(p.Stdout())}
	a.expect(t, "getenv GITHUB_TOKEN", "alice-value")
	b := launchDocker(t, d, "sess-other")
	if got := b.ask(t, "getenv GITHUB_TOKEN"); strings.Contains(got, "alice-value") {
		t.Errorf("another session's container has %q", got)
	}
}

// BenchmarkDockerEgress measures what an allow-list costs:
//
//   - start: Launch to the first echoed line, with an allow-list and
//     without, launches alternating, p50 and p99 of each;
//
//   - request: 200 plain HTTP GETs to a server on docker0 from inside a
//     container, through the proxy and directly (a container on Docker's
//     default bridge), each on a new connection: the ratio;
//
//   - memory: the proxy container's memory with MCP_BRIDGE_EGRESS_SESSIONS
//     (default 100) sessions running, each having made one request.
//
//     go test -run '^$' -bench DockerEgress -benchtime 20x ./sandbox/
func BenchmarkDockerEgress(b *testing.B) {
	env := setupDocker(b)
	gw := env.bridgeGateway(b)
	port := serveOn(b, gw)
	url := "http://" + net.JoinHostPort(gw, strconv.Itoa(port)) + "/"
	proxy := proxyBinary(b)
	egressOpts := func(o *DockerOptions) {
		o.Egress = []string{net.JoinHostPort(gw, strconv.Itoa(port))}
		o.EgressProxyBinary = proxy
		o.OnEgress = func(string, egress.Event) {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pct := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.Run("start", func(b *testing.B) {
		plain, _ := env.newDocker(b, nil)
		filtered, _ := env.newDocker(b, egressOpts)
		var with, without []time.Duration
		for i := 0; b.Loop(); i++ {
			for _, c := range []struct {
				d   *Docker
				out *[]time.Duration
			}{{filtered, &with}, {plain, &without}} {
				t0 := time.Now()
				p, err := c.d.Launch(ctx, fmt.Sprintf("bench-%d", i))
				if err != nil {
					b.Fatal(err)
				}
				(&dockerChild{Process: p, out: bufio.NewReader(p.Stdout())}).expect(b, "echo hi", "hi")
				*c.out = append(*c.out, time.Since(t0))
				if err := p.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(pct(with, 0.5), "egress-p50-ms")
		b.ReportMetric(pct(with, 0.99), "egress-p99-ms")
		b.ReportMetric(pct(without, 0.5), "none-p50-ms")
		b.ReportMetric(pct(without, 0.99), "none-p99-ms")
	})
	b.Run("request", func(b *testing.B) {
		direct, _ := env.newDocker(b, func(o *DockerOptions) { o.Network = "bridge" })
		filtered, _ := env.newDocker(b, egressOpts)
		dc, fc := launchDocker(b, direct, "bench-direct"), launchDocker(b, filtered, "bench-proxied")
		var ratios []float64
		for b.Loop() {
			us := func(c *dockerChild) float64 {
				f := answerFields(c.expect(b, "fetchn 200 "+url, "last=200_hello"))
				v, _ := strconv.ParseFloat(f["us"], 64)
				return v
			}
			d, f := us(dc), us(fc)
			ratios = append(ratios, f/d)
		}
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "proxied/direct-p50")
	})
	b.Run("memory", func(b *testing.B) {
		n := 100
		if s := os.Getenv("MCP_BRIDGE_EGRESS_SESSIONS"); s != "" {
			n, _ = strconv.Atoi(s)
		}
		for b.Loop() {
			filtered, _ := env.newDocker(b, egressOpts)
			stats := func() float64 {
				res, err := env.cli.ContainerStats(ctx, filtered.egress.proxyID, client.ContainerStatsOptions{Stream: false})
				if err != nil {
					b.Fatal(err)
				}
				defer res.Body.Close()
				var st struct {
					MemoryStats struct {
						Usage uint64            `json:"usage"`
						Stats map[string]uint64 `json:"stats"`
					} `json:"memory_stats"`
				}
				if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
					b.Fatal(err)
				}
				// As docker stats shows it: without the page cache.
				return float64(st.MemoryStats.Usage-st.MemoryStats.Stats["cache"]) / (1 << 20)
			}
			idle := stats()
			for i := range n {
				c := launchDocker(b, filtered, fmt.Sprintf("bench-mem-%d", i))
				c.expect(b, "fetch "+url, "fetch: 200 hello")
			}
			b.ReportMetric(idle, "proxy-idle-MiB")
			b.ReportMetric(stats(), fmt.Sprintf("proxy-at-%d-sessions-MiB", n))
		}
	})
}

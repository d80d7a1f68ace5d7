package sandbox

// Egress allow-lists: the network and the forward proxy that let
// a Docker-sandboxed server reach the hosts its allow-list names, and
// nothing else.
//
// The layout, one per launcher (that is, per allow-list):
//
//   - an internal bridge network ("mcp-bridge-egress-<instance>-<hex>")
//     created with com.docker.network.bridge.inhibit_ipv4=true: the host
//     has no address on it, so nothing on the host is reachable from it
//     (a plain internal network still reaches every host listener bound to
//     0.0.0.0 through its gateway address); internal, so it has no route
//     out either;
//   - the proxy's container (egress.Main, the bridge binary on scratch),
//     created on the default "bridge" network, its way out, and connected
//     to the internal network, where alone it listens;
//   - each session's container, on the internal network only, with
//     HTTP_PROXY and HTTPS_PROXY naming the proxy and the container's tag,
//     and a DNS server that does not exist: the engine's embedded DNS of a
//     user-defined network would otherwise forward outside names (engines
//     before 26.0 do so even on internal networks, CVE-2024-29018).
//
// The proxy's attached stdin and stdout are its control channel: the
// bridge adds a container's random tag before creating the container and
// removes it after, and reads every decision of the proxy as an
// egress.Event, which it hands to DockerOptions.OnEgress with the session.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// labelRole marks the proxy's container and the internal network.
const labelRole = "io.mcp-bridge.role"

const (
	roleEgressProxy   = "egress-proxy"
	roleEgressNetwork = "egress-network"
)

// egressDNS is the DNS server given to sessions' containers: an address of
// TEST-NET-1 (RFC 5737), which nothing answers and the internal network has
// no route to.
const egressDNS = "192.0.2.1"

// egressProxyMemory bounds the proxy's container.
const egressProxyMemory = 128 << 20

// egressNet is a launcher's internal network and proxy.
type egressNet struct {
	d         *Docker
	rules     egress.Rules
	network   string // name
	networkID string
	proxyID   string
	proxyURL  string // http://IP:PORT, without the tag
	conn      interface{ Close() error }
	stdin     io.Writer
	log       *slog.Logger

	mu       sync.Mutex
	sessions map[string]string        // tag -> session ID
	acks     map[string]chan struct{} // tag -> closed when the proxy accepted it
	dead     error                    // the proxy is gone

	writeMu sync.Mutex
	// wg: the goroutines reading the proxy's output, which end when remove
	// closes the attach connection (or the proxy exits).
	wg sync.WaitGroup
}

// proxyEnv is what a session's container gets to use the proxy with tag.
func (e *egressNet) proxyEnv(tag string) []string {
	u := strings.Replace(e.proxyURL, "http://", "http://"+egress.ProxyUser+":"+tag+"@", 1)
	noProxy := "localhost,127.0.0.1,::1"
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		// Node 24 reads the variables above only when asked to.
		"NODE_USE_ENV_PROXY=1",
	}
}

// startEgress creates the internal network and starts the proxy.
func (d *Docker) startEgress(ctx context.Context, rules egress.Rules) (e *egressNet, err error) {
	bad := func(format string, args ...any) (*egressNet, error) {
		return nil, fmt.Errorf("docker sandbox: egress proxy: "+format, args...)
	}
	img, err := d.egressImage(ctx)
	if err != nil {
		return nil, err
	}
	e = &egressNet{d: d, rules: rules, sessions: map[string]string{}, acks: map[string]chan struct{}{}}
	e.log = d.log.With("egress_proxy", true)
	defer func() {
		if err != nil {
			rctx, cancel := context.WithTimeout(context.Background(), dockerAPITimeout)
			defer cancel()
			e.remove(rctx)
		}
	}()
	labels := d.self.labels()
	labels[labelInstance] = d.opts.Instance
	labels[labelRole] = roleEgressNetwork
	e.network = "mcp-bridge-egress-" + d.opts.Instance + "-" + randomHex(4)
	created, err := d.cli.NetworkCreate(ctx, e.network, client.NetworkCreateOptions{
		Driver:   "bridge",
		Internal: true,
		// The host gets no address on the network: nothing on it is
		// reachable from the network (tested: TestDockerEgress).
		Options: map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
		Labels:  labels,
	})
	if err != nil {
		return bad("creating the internal network: %w", err)
	}
	e.networkID = created.ID
	insp, err := d.cli.NetworkInspect(ctx, e.networkID, client.NetworkInspectOptions{})
	if err != nil || len(insp.Network.IPAM.Config) == 0 || !insp.Network.IPAM.Config[0].Subnet.IsValid() {
		return bad("the internal network %s has no IPv4 subnet (%v)", e.network, err)
	}
	subnet := insp.Network.IPAM.Config[0].Subnet
	// The networks the proxy is on (their gateways, the host, and the
	// other containers there) are refused even where they are not
	// private addresses.
	var deny []string
	for _, n := range []string{"bridge", e.networkID} {
		ni, err := d.cli.NetworkInspect(ctx, n, client.NetworkInspectOptions{})
		if err != nil {
			return bad("inspecting network %s: %w", n, err)
		}
		for _, c := range ni.Network.IPAM.Config {
			if c.Subnet.IsValid() {
				deny = append(deny, c.Subnet.String())
			}
			if c.Gateway.IsValid() {
				deny = append(deny, netip.PrefixFrom(c.Gateway, c.Gateway.BitLen()).String())
			}
		}
	}

	labels = d.self.labels()
	labels[labelInstance] = d.opts.Instance
	labels[labelRole] = roleEgressProxy
	pids := int64(64)
	yes := true
	pc, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:  img,
			User:   DefaultDockerUser,
			Labels: labels,
			Env: []string{
				egress.EnvRules + "=" + strings.Join(rules.Strings(), ","),
				egress.EnvDeny + "=" + strings.Join(deny, ","),
				egress.EnvSubnet + "=" + subnet.String(),
			},
			AttachStdin: true, AttachStdout: true, AttachStderr: true,
			OpenStdin: true, StdinOnce: true,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "bridge", // its way out
			RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			ReadonlyRootfs: true,
			IpcMode:        container.IPCModePrivate,
			Init:           &yes,
			LogConfig:      container.LogConfig{Type: "none"},
			// The default runtime: the proxy is the bridge's own code, and
			// needs the network a sandboxing runtime may be set to deny.
			Resources: container.Resources{
				Memory: egressProxyMemory, MemorySwap: egressProxyMemory,
				NanoCPUs: 1e9, PidsLimit: &pids,
			},
		},
	})
	if err != nil {
		return bad("creating its container from image %s: %w", img, err)
	}
	e.proxyID = pc.ID
	if _, err := d.cli.NetworkConnect(ctx, e.networkID, client.NetworkConnectOptions{Container: e.proxyID}); err != nil {
		return bad("connecting it to the internal network: %w", err)
	}
	att, err := d.cli.ContainerAttach(ctx, e.proxyID, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return bad("attaching to it: %w", err)
	}
	e.conn = att.Conn
	e.stdin = att.Conn
	if _, err := d.cli.ContainerStart(ctx, e.proxyID, client.ContainerStartOptions{}); err != nil {
		return bad("starting it: %w", err)
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	e.wg.Add(3)
	go func() {
		defer e.wg.Done()
		_, err := stdcopy.StdCopy(outW, errW, att.Reader)
		outW.CloseWithError(err)
		errW.CloseWithError(err)
	}()
	go func() {
		defer e.wg.Done()
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			e.log.Warn("egress proxy stderr", "line", sc.Text())
		}
		io.Copy(io.Discard, errR)
	}()
	ready := make(chan string, 1)
	go func() {
		defer e.wg.Done()
		e.read(outR, ready)
	}()
	select {
	case addr := <-ready:
		if addr == "" {
			e.mu.Lock()
			err := e.dead
			e.mu.Unlock()
			return bad("it did not start: %v", err)
		}
		e.proxyURL = "http://" + addr
	case <-ctx.Done():
		return bad("waiting for it to listen: %w", ctx.Err())
	case <-time.After(dockerAPITimeout):
		return bad("it did not say it listens within %v (is EgressProxyBinary the bridge?)", dockerAPITimeout)
	}
	e.log.Info("egress proxy ready", "network", e.network, "proxy", shortID(e.proxyID), "address", e.proxyURL, "allow", strings.Join(rules.Strings(), ","))
	return e, nil
}

// read handles the proxy's stdout until it ends; the first line says
// whether it listens (sent on ready, "" if not).
func (e *egressNet) read(r io.Reader, ready chan<- string) {
	sent := false // on ready
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var m egress.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			e.log.Warn("egress proxy: unreadable line", "error", err)
			continue
		}
		switch {
		case m.Ready != "" && !sent:
			ready <- m.Ready
			sent = true
		case m.Error != "":
			e.mu.Lock()
			e.dead = errors.New(m.Error)
			e.mu.Unlock()
			if !sent {
				ready <- ""
				sent = true
			}
		case m.Ack != "":
			e.mu.Lock()
			if ch := e.acks[m.Ack]; ch != nil {
				close(ch)
				delete(e.acks, m.Ack)
			}
			e.mu.Unlock()
		case m.Event != nil:
			e.event(*m.Event)
		}
	}
	e.mu.Lock()
	if e.dead == nil {
		e.dead = errors.New("the egress proxy's output ended")
	}
	for _, ch := range e.acks {
		close(ch)
	}
	clear(e.acks)
	e.mu.Unlock()
	if !sent {
		ready <- ""
	}
}

// event hands a decision of the proxy to OnEgress, with its session.
func (e *egressNet) event(ev egress.Event) {
	e.mu.Lock()
	session := e.sessions[ev.Tag]
	e.mu.Unlock()
	ev.Tag = "" // a credential of the container: never logged
	if f := e.d.opts.OnEgress; f != nil {
		f(session, ev)
		return
	}
	attrs := []any{"session", session, "host", ev.Host, "port", ev.Port, "ip", ev.IP, "allowed", ev.Allowed}
	if ev.Reason != "" {
		attrs = append(attrs, "reason", ev.Reason)
	}
	e.log.Info("egress", append(attrs, "bytes_up", ev.Up, "bytes_down", ev.Down, "ms", ev.Millis)...)
}

func (e *egressNet) send(m egress.Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	_, err = e.stdin.Write(append(b, '\n'))
	return err
}

// add registers a new container's tag for session and waits until the
// proxy accepts it.
func (e *egressNet) add(ctx context.Context, sessionID string) (string, error) {
	tag := randomHex(16)
	ch := make(chan struct{})
	e.mu.Lock()
	if e.dead != nil {
		err := e.dead
		e.mu.Unlock()
		return "", fmt.Errorf("the egress proxy is gone (%v); restart the bridge", err)
	}
	e.sessions[tag] = sessionID
	e.acks[tag] = ch
	e.mu.Unlock()
	if err := e.send(egress.Message{Add: tag}); err != nil {
		e.del(tag)
		return "", fmt.Errorf("telling the egress proxy about the container: %w", err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		e.del(tag)
		return "", ctx.Err()
	}
	e.mu.Lock()
	err := e.dead
	e.mu.Unlock()
	if err != nil {
		e.del(tag)
		return "", fmt.Errorf("the egress proxy is gone (%v); restart the bridge", err)
	}
	return tag, nil
}

// del forgets a tag whose container is gone.
func (e *egressNet) del(tag string) {
	e.mu.Lock()
	delete(e.sessions, tag)
	delete(e.acks, tag)
	dead := e.dead != nil
	e.mu.Unlock()
	if !dead {
		e.send(egress.Message{Del: tag})
	}
}

// remove stops the proxy and removes its container and the network.
func (e *egressNet) remove(ctx context.Context) error {
	var errs []error
	if e.conn != nil {
		e.conn.Close() // the proxy's stdin ends: it exits
	}
	if e.proxyID != "" {
		if err := e.d.removeContainer(ctx, e.proxyID); err != nil {
			errs = append(errs, err)
		}
	}
	e.wg.Wait()
	if e.networkID != "" {
		if err := e.d.removeNetwork(ctx, e.networkID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNetwork removes a network; one already gone counts as removed.
func (d *Docker) removeNetwork(ctx context.Context, id string) error {
	_, err := d.cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("removing network %s: %w", shortID(id), err)
}

// egressImage makes the proxy's image present: the proxy binary on
// scratch, tagged by the binary's hash, built through the Engine API.
func (d *Docker) egressImage(ctx context.Context) (string, error) {
	path := d.opts.EgressProxyBinary
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("docker sandbox: %w", &OptionError{Field: "EgressProxyBinary", Err: fmt.Errorf("reading the egress proxy's executable: %w", err)})
	}
	if err := checkStatic(data); err != nil {
		return "", fmt.Errorf("docker sandbox: %w", &OptionError{Field: "EgressProxyBinary", Err: fmt.Errorf(
			"the egress proxy's executable %s %v: it runs on an empty (scratch) image; build the bridge with CGO_ENABLED=0", path, err)})
	}
	sum := sha256.Sum256(data)
	tag := "mcp-bridge-egress-proxy:" + hex.EncodeToString(sum[:6])
	if _, err := d.cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	df := "FROM scratch\nCOPY proxy /proxy\nUSER " + DefaultDockerUser + "\nENTRYPOINT [\"/proxy\", \"" + egress.ProxyArg + "\"]\n"
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, []byte(df)}, {"proxy", 0o755, data}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)})
		tw.Write(f.data)
	}
	tw.Close()
	res, err := d.cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true,
		Labels: map[string]string{labelRole: roleEgressProxy}})
	if err != nil {
		return "", fmt.Errorf("docker sandbox: building the egress proxy's image: %w", err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", fmt.Errorf("docker sandbox: building the egress proxy's image: %w", err)
		}
		if m.Error != nil {
			return "", fmt.Errorf("docker sandbox: building the egress proxy's image: %s", m.Error.Message)
		}
	}
	d.log.Info("built the egress proxy's image", "image", tag)
	return tag, nil
}

// checkStatic refuses an executable that is not a static Linux ELF file.
func checkStatic(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return errors.New("is not a Linux (ELF) executable")
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("is dynamically linked")
		}
	}
	return nil
}

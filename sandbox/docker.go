package sandbox

// The Docker launcher: each session's MCP server runs in a container of its
// own, created through the Docker Engine API, locked down unless an option
// says otherwise.
//
// A container's life, and why it is done this way:
//
//  1. The image is made present according to the pull policy.
//  2. The container is created, with labels naming this bridge and the session.
//  3. We attach to its stdin, stdout and stderr, and register a wait for its
//     next exit, both BEFORE starting it: output written at once is not lost,
//     and an exit that comes at once is not missed.
//  4. It is started. Its multiplexed output is split with stdcopy: stdout
//     goes to the caller, stderr line by line into the log.
//  5. When it exits, it is inspected (State.OOMKilled) and then removed by us.
//
// We do not set HostConfig.AutoRemove: the engine would delete the container
// the moment it exits, racing our inspect, and the wait result carries only
// the exit status, never OOMKilled. So we remove it ourselves, right after the
// inspect (whether it exited on its own or was stopped). The price is that a
// bridge that dies abruptly leaves exited (or, if its server ignores stdin's
// EOF, running) containers behind; RemoveLeftovers, run at start-up, removes
// them, and Close removes everything this launcher started.
//
// The client is github.com/moby/moby/client, which negotiates down to the
// engine's API version (it supports API 1.40 and later). Every setting here
// is accepted and enforced by Engine 20.10 (API 1.41) on cgroup v1, as the
// tests check from inside the container; NewDocker refuses an engine that
// cannot enforce the limits, and Launch refuses a container the engine
// created with warnings (a setting it dropped), rather than run a server
// less confined than configured.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// dockerAPITimeout bounds one Engine API call made in the background (kill,
// inspect, remove), where no caller's context applies.
const dockerAPITimeout = 30 * time.Second

// Docker launches each session's MCP server in a new container.
//
// It is safe for concurrent use. Close it to remove every container it
// started and release its connection to the engine.
type Docker struct {
	cli    *client.Client
	opts   DockerOptions // private copy with the defaults filled in
	mounts []mount.Mount
	log    *slog.Logger
	self   owner      // this bridge process, as recorded in labels
	egress *egressNet // nil without an allow-list

	pullMu sync.Mutex // one pull at a time; the next launch finds the image

	mu     sync.Mutex
	closed bool
	procs  map[*dockerProcess]struct{} // started and not yet removed
	wg     sync.WaitGroup              // every goroutine of every process

	closeOnce sync.Once
	closeErr  error
}

var _ Launcher = (*Docker)(nil)

// NewDocker checks opts, connects to the Docker Engine and negotiates the
// API version (the client supports engines from API 1.40, Docker 19.03).
// A nil opts is the zero DockerOptions, which lacks an Image and fails.
//
// It fails if the engine cannot enforce the limits (memory, swap, pids, CPU
// quota) on this host, rather than run servers less confined than
// configured.
func NewDocker(ctx context.Context, opts *DockerOptions) (*Docker, error) {
	o, mounts, err := dockerDefaults(opts)
	if err != nil {
		return nil, err
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	o.Logger = logger

	copts := []client.Opt{client.FromEnv}
	if o.Host != "" {
		copts = append(copts, client.WithHost(o.Host)) // after FromEnv: wins over DOCKER_HOST
	}
	cli, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker sandbox: %w", &OptionError{Field: "Host", Err: fmt.Errorf("configuring the Docker client: %w (check DOCKER_HOST and the engine's address)", err)})
	}
	ping, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker sandbox: cannot reach the Docker Engine at %s: %w (start the daemon, or point DOCKER_HOST at it)", cli.DaemonHost(), err)
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker sandbox: asking the Docker Engine at %s for its capabilities: %w", cli.DaemonHost(), err)
	}
	in := info.Info
	var missing []string
	if !in.MemoryLimit {
		missing = append(missing, "memory limit")
	}
	if !in.SwapLimit {
		missing = append(missing, "swap limit (memory+swap)")
	}
	if !in.PidsLimit {
		missing = append(missing, "pids limit")
	}
	if !in.CPUCfsQuota {
		missing = append(missing, "CPU quota (CFS)")
	}
	if len(missing) > 0 {
		cli.Close()
		return nil, fmt.Errorf("docker sandbox: the Docker Engine at %s cannot enforce: %s; enable the cgroup controllers (e.g. swapaccount=1 on the kernel command line for the swap limit) or use a host that has them",
			cli.DaemonHost(), strings.Join(missing, ", "))
	}
	if in.NCPU > 0 && o.CPUs > float64(in.NCPU) {
		cli.Close()
		return nil, fmt.Errorf("docker sandbox: %w", &OptionError{Field: "CPUs", Err: fmt.Errorf("CPUs is %g but the Docker host has only %d CPUs; lower it", o.CPUs, in.NCPU)})
	}
	if in.OSType != "" && in.OSType != "linux" {
		cli.Close()
		return nil, fmt.Errorf("docker sandbox: the Docker Engine at %s runs %s containers; this sandbox needs Linux containers", cli.DaemonHost(), in.OSType)
	}

	if o.Runtime != "" {
		if _, ok := in.Runtimes[o.Runtime]; !ok {
			cli.Close()
			names := make([]string, 0, len(in.Runtimes))
			for n := range in.Runtimes {
				names = append(names, n)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("docker sandbox: %w", &OptionError{Field: "Runtime", Err: fmt.Errorf(
				"the Docker Engine at %s has no runtime %q (it has %s); register it in the engine's daemon.json, or choose one of those", cli.DaemonHost(), o.Runtime, strings.Join(names, ", "))})
		}
	}

	d := &Docker{
		cli:    cli,
		opts:   o,
		mounts: mounts,
		log:    logger.With("sandbox", "docker", "instance", o.Instance),
		self:   currentOwner(),
		procs:  make(map[*dockerProcess]struct{}),
	}
	if len(o.Egress) > 0 {
		rules, _ := egress.ParseRules(o.Egress) // checked by dockerDefaults
		e, err := d.startEgress(ctx, rules)
		if err != nil {
			cli.Close()
			return nil, err
		}
		d.egress = e
	}
	d.log.Info("connected to the Docker Engine",
		"host", cli.DaemonHost(), "engine", in.ServerVersion, "api", cli.ClientVersion(),
		"engine_api", ping.APIVersion, "image", o.Image, "pull", string(o.Pull))
	for _, w := range in.Warnings {
		d.log.Warn("Docker Engine warning", "warning", w)
	}
	return d, nil
}

// Instance returns the instance name in this launcher's container labels.
func (d *Docker) Instance() string { return d.opts.Instance }

// ensureImage makes the image present according to the pull policy.
func (d *Docker) ensureImage(ctx context.Context, sessionID string) error {
	img := d.opts.Image
	present := func() (bool, error) {
		_, err := d.cli.ImageInspect(ctx, img)
		switch {
		case err == nil:
			return true, nil
		case cerrdefs.IsNotFound(err):
			return false, nil
		default:
			return false, fmt.Errorf("%w for session %s: looking up image %s on the Docker host: %w", ErrLaunch, sessionID, img, err)
		}
	}
	switch d.opts.Pull {
	case PullNever:
		ok, err := present()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, &OptionError{Field: "Pull", Err: fmt.Errorf(
				"image %s is not on the Docker host and the pull policy is never; build or load it there (docker build -t %s, docker load), or let the bridge pull missing images", img, img)})
		}
		return nil
	case PullMissing:
		if ok, err := present(); err != nil || ok {
			return err
		}
	}
	d.pullMu.Lock()
	defer d.pullMu.Unlock()
	if d.opts.Pull == PullMissing {
		// Another launch may have pulled it while we waited for the lock.
		if ok, err := present(); err != nil || ok {
			return err
		}
	}
	if err := d.pull(ctx); err != nil {
		if d.opts.Pull == PullAlways {
			return fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, &OptionError{Field: "Pull", Err: fmt.Errorf(
				"pulling image %s (pull policy always): %w; check the name and the registry's reachability and credentials, or pull only missing images to run the local copy", img, err)})
		}
		return fmt.Errorf("%w for session %s: image %s is not on the Docker host and pulling it failed: %w; build or load it there (docker build -t %s, docker load), or check the name, the registry's reachability and the pull policy",
			ErrLaunch, sessionID, img, err, img)
	}
	return nil
}

// pull pulls the image, logging its progress: each layer's changes of
// status ("Pulling fs layer", "Downloading", "Pull complete"...), not every
// progress tick.
func (d *Docker) pull(ctx context.Context) error {
	img := d.opts.Image
	d.log.Info("pulling image", "image", img)
	start := time.Now()
	resp, err := d.cli.ImagePull(ctx, img, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	last := map[string]string{} // layer ID -> last status logged
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
		if msg.Status == "" || last[msg.ID] == msg.Status {
			continue
		}
		last[msg.ID] = msg.Status
		attrs := []any{"image", img, "status", msg.Status}
		if msg.ID != "" {
			attrs = append(attrs, "layer", msg.ID)
		}
		if p := msg.Progress; p != nil && p.Total > 0 {
			attrs = append(attrs, "bytes", p.Total)
		}
		d.log.Info("pull progress", attrs...)
	}
	d.log.Info("pulled image", "image", img, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// removeContainer force-removes a container (killing it if it runs).
// A container that is already gone counts as removed; one that someone else
// is removing (another bridge's RemoveLeftovers, the engine) counts as
// removed once it is gone.
func (d *Docker) removeContainer(ctx context.Context, id string) error {
	_, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err):
		// The engine answers 409 Conflict while a removal is in progress:
		// wait for that one to finish.
		w := d.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
		select {
		case <-w.Result:
			return nil
		case werr := <-w.Error:
			if cerrdefs.IsNotFound(werr) {
				return nil
			}
			return fmt.Errorf("removing container %s: %w; then waiting for its removal: %w", shortID(id), err, werr)
		}
	default:
		return fmt.Errorf("removing container %s: %w", shortID(id), err)
	}
}

func (d *Docker) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// reserve adds n goroutines to wg, unless the launcher is closed: checked
// under mu, so that no Add can race with Close's Wait.
func (d *Docker) reserve(n int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(n)
	return true
}

// track registers a started container and reserves its waiter goroutine,
// unless the launcher is closed.
func (d *Docker) track(p *dockerProcess) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.procs[p] = struct{}{}
	d.wg.Add(1)
	return true
}

func (d *Docker) untrack(p *dockerProcess) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.procs, p)
}

// Close stops and removes every container this launcher started, waits for
// its goroutines and closes the connection to the engine. Launch fails
// afterwards. It is idempotent: later calls return the first one's result.
//
// If ctx ends first, the remaining containers are force-removed (killed)
// at once; Close still waits for that, for at most dockerAPITimeout (30 s)
// if the engine stops answering. What could not be removed is reported and
// left to the next start's RemoveLeftovers.
func (d *Docker) Close(ctx context.Context) error {
	d.closeOnce.Do(func() { d.closeErr = d.close(ctx) })
	return d.closeErr
}

func (d *Docker) close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true // from now on, no Launch adds goroutines or processes
	procs := make([]*dockerProcess, 0, len(d.procs))
	for p := range d.procs {
		procs = append(procs, p)
	}
	d.mu.Unlock()

	for _, p := range procs {
		p.startStop()
	}
	for _, p := range procs {
		select {
		case <-p.removed:
		case <-ctx.Done():
			// Kill and remove it now; the waiter still removes it, with
			// its own timeout, if the engine answers.
			p.abort()
		}
	}
	d.wg.Wait()

	var errs []error
	for _, p := range procs {
		if p.removeErr != nil {
			errs = append(errs, p.removeErr)
		}
	}
	// Sweep by label: a container whose launch was cut short may have
	// escaped the bookkeeping above.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerAPITimeout)
	defer cancel()
	list, err := d.cli.ContainerList(sctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelInstance+"="+d.opts.Instance, labelPID+"="+strconv.Itoa(d.self.pid)),
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing this bridge's containers: %w", err))
	}
	for _, c := range list.Items {
		if !d.self.is(c.Labels) || c.Labels[labelRole] == roleEgressProxy {
			continue
		}
		d.log.Warn("removing a container this bridge started but no longer tracked", "container", shortID(c.ID), "session", c.Labels[labelSession])
		if err := d.removeContainer(sctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if d.egress != nil {
		// After the servers: the proxy served them to the end.
		if err := d.egress.remove(sctx); err != nil {
			errs = append(errs, err)
		}
	}
	d.cli.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("docker sandbox: closing instance %s: %w (the next start's RemoveLeftovers removes what is left)", d.opts.Instance, err)
	}
	d.log.Info("Docker launcher closed")
	return nil
}

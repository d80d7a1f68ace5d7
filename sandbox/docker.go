package sandbox

// The Docker launcher: each session's MCP server runs in a container of its
// own, created through the Docker Engine API, locked down unless an option
// says otherwise (issue 4).
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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// PullPolicy says when the Docker launcher pulls its image.
type PullPolicy string

const (
	// PullNever never pulls: the image must already be on the Docker host.
	PullNever PullPolicy = "never"
	// PullMissing pulls the image only if the Docker host does not have it.
	PullMissing PullPolicy = "missing"
	// PullAlways pulls the image before every launch; a failed pull fails
	// the launch, even if an older copy is present.
	PullAlways PullPolicy = "always"
)

// Defaults of DockerOptions.
const (
	DefaultDockerPull       = PullMissing
	DefaultDockerNetwork    = "none"
	DefaultDockerUser       = "65534:65534" // nobody:nogroup on most distributions
	DefaultDockerMemory     = 512 << 20     // bytes
	DefaultDockerCPUs       = 1.0
	DefaultDockerPids       = 256
	DefaultDockerNoFile     = 1024
	DefaultDockerTmpfsBytes = 64 << 20
)

// minDockerMemory is the engine's own lower bound for a memory limit; asking
// for less fails every container create, so NewDocker refuses it at once.
const minDockerMemory = 6 << 20

// dockerAPITimeout bounds one Engine API call made in the background (stop,
// inspect, remove), where no caller's context applies.
const dockerAPITimeout = 30 * time.Second

// Container labels. RemoveLeftovers documents how they are used.
const (
	labelInstance = "io.mcp-bridge.instance"  // the bridge instance (DockerOptions.Instance)
	labelSession  = "io.mcp-bridge.session"   // the session ID
	labelHost     = "io.mcp-bridge.host"      // hostname of the bridge's host
	labelBootID   = "io.mcp-bridge.boot-id"   // that host's boot ID (Linux), "" if unknown
	labelPID      = "io.mcp-bridge.pid"       // the bridge's process ID
	labelPIDStart = "io.mcp-bridge.pid-start" // that process's start time in clock ticks since boot (Linux), "" if unknown
)

// DockerOptions configure a Docker launcher. Every field's zero value means
// the documented default, which is the locked-down one: each loosening must
// be asked for explicitly.
type DockerOptions struct {
	// Image is the image each container runs, e.g. "ghcr.io/org/server:1.2".
	// Required.
	Image string
	// Command, if not empty, replaces the image's ENTRYPOINT and CMD:
	// Command[0] is the program and the rest its arguments, as with
	// "docker run --entrypoint Command[0] IMAGE Command[1:]...".
	// If empty, the image's own ENTRYPOINT and CMD run.
	Command []string
	// Pull is the pull policy. If empty, PullMissing.
	Pull PullPolicy
	// Network is the container's network mode ("bridge", "host", a network
	// name, "container:ID"). If empty, "none": the server has a loopback
	// interface only.
	Network string
	// Mounts are host directories or files to bind-mount, each as
	// "SRC:DST" or "SRC:DST:ro" (read-only) or "SRC:DST:rw" (writable).
	// SRC and DST must be absolute; DST may be neither "/" nor "/tmp".
	// A mount is read-only unless it ends in ":rw". If nil, none.
	Mounts []string
	// Env are "KEY=VALUE" variables added to the image's environment.
	// If nil, the image's environment only (never the bridge's).
	Env []string
	// Memory is the memory limit in bytes; swap is limited to the same
	// value (memory+swap = Memory), so the server cannot swap. If zero,
	// DefaultDockerMemory. The engine refuses less than 6 MiB.
	Memory int64
	// CPUs is how many CPUs' worth of time the server may use (CFS quota).
	// If zero, DefaultDockerCPUs.
	CPUs float64
	// Pids limits the processes and threads in the container (fork bombs).
	// If zero, DefaultDockerPids.
	Pids int64
	// User is the "UID:GID" (or name, if the image defines it) the server
	// runs as. If empty, DefaultDockerUser: never root unless asked.
	User string
	// NoFile is the soft and hard limit on open files (RLIMIT_NOFILE).
	// If zero, DefaultDockerNoFile.
	NoFile int64
	// TmpfsBytes is the size of the writable tmpfs at /tmp (mounted
	// noexec, nosuid, nodev; the rest of the filesystem is read-only).
	// It counts against Memory. If zero, DefaultDockerTmpfsBytes.
	TmpfsBytes int64
	// StopGrace is how long Stop waits after closing stdin before asking the
	// engine to stop the container (SIGTERM to its init), how long the
	// engine then waits before SIGKILL (rounded up to whole seconds), and
	// how long Stop waits for the output to drain after that.
	// If zero, DefaultStopGrace.
	StopGrace time.Duration
	// Instance names this bridge in container labels. Two bridges running
	// at once against one engine must not share a name: RemoveLeftovers
	// removes every container of its own instance that it did not start.
	// If empty, a random name "bridge-<16 hex>" is used, so only the
	// dead-process rule of RemoveLeftovers applies.
	Instance string
	// StderrRate bounds the stderr lines logged per session; see StderrRate.
	StderrRate StderrRate
	// Logger receives the servers' stderr lines and lifecycle events, with
	// the attributes session=<session ID> and container=<12 hex>, and the
	// image pull progress. If nil, slog.Default() at the time of NewDocker.
	Logger *slog.Logger
	// Host is the engine's address, e.g. "unix:///var/run/docker.sock" or
	// "tcp://host:2376". If empty, the environment decides as for the
	// docker CLI (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH,
	// DOCKER_API_VERSION), else the local default socket.
	Host string
}

// Docker launches each session's MCP server in a new container.
//
// It is safe for concurrent use. Close it to remove every container it
// started and release its connection to the engine.
type Docker struct {
	cli    *client.Client
	opts   DockerOptions // private copy with the defaults filled in
	mounts []mount.Mount
	log    *slog.Logger
	self   owner // this bridge process, as recorded in labels

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
		return nil, fmt.Errorf("docker sandbox: configuring the Docker client: %w (check DOCKER_HOST and the --docker-host value)", err)
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
		return nil, fmt.Errorf("docker sandbox: CPUs is %g but the Docker host has only %d CPUs; lower it", o.CPUs, in.NCPU)
	}
	if in.OSType != "" && in.OSType != "linux" {
		cli.Close()
		return nil, fmt.Errorf("docker sandbox: the Docker Engine at %s runs %s containers; this sandbox needs Linux containers", cli.DaemonHost(), in.OSType)
	}

	d := &Docker{
		cli:    cli,
		opts:   o,
		mounts: mounts,
		log:    logger.With("sandbox", "docker", "instance", o.Instance),
		self:   currentOwner(),
		procs:  make(map[*dockerProcess]struct{}),
	}
	d.log.Info("connected to the Docker Engine",
		"host", cli.DaemonHost(), "engine", in.ServerVersion, "api", cli.ClientVersion(),
		"engine_api", ping.APIVersion, "image", o.Image, "pull", string(o.Pull))
	for _, w := range in.Warnings {
		d.log.Warn("Docker Engine warning", "warning", w)
	}
	return d, nil
}

// dockerDefaults validates opts and returns a copy with the defaults filled in.
func dockerDefaults(opts *DockerOptions) (DockerOptions, []mount.Mount, error) {
	var o DockerOptions
	if opts != nil {
		o = *opts
		o.Command = slices.Clone(opts.Command)
		o.Mounts = slices.Clone(opts.Mounts)
		o.Env = slices.Clone(opts.Env)
	}
	bad := func(format string, args ...any) (DockerOptions, []mount.Mount, error) {
		return DockerOptions{}, nil, fmt.Errorf("docker sandbox: "+format, args...)
	}
	if o.Image == "" {
		return bad("no image given; pass --image")
	}
	if _, err := reference.ParseAnyReference(o.Image); err != nil {
		return bad("image %q: %v", o.Image, err)
	}
	if len(o.Command) > 0 && o.Command[0] == "" {
		return bad("the command's program is empty")
	}
	switch o.Pull {
	case "":
		o.Pull = DefaultDockerPull
	case PullNever, PullMissing, PullAlways:
	default:
		return bad("pull policy %q: want never, missing or always", o.Pull)
	}
	if o.Network == "" {
		o.Network = DefaultDockerNetwork
	}
	for _, e := range o.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return bad("environment entry %q: want KEY=VALUE", e)
		}
	}
	switch {
	case o.Memory == 0:
		o.Memory = DefaultDockerMemory
	case o.Memory < minDockerMemory:
		return bad("memory limit %d bytes: the Docker Engine needs at least %d (6 MiB)", o.Memory, minDockerMemory)
	}
	switch {
	case o.CPUs == 0:
		o.CPUs = DefaultDockerCPUs
	case o.CPUs < 0.01 || math.IsNaN(o.CPUs) || math.IsInf(o.CPUs, 0):
		return bad("CPUs %g: want at least 0.01", o.CPUs)
	}
	switch {
	case o.Pids == 0:
		o.Pids = DefaultDockerPids
	case o.Pids < 0:
		return bad("pids limit %d: want a positive number", o.Pids)
	}
	if o.User == "" {
		o.User = DefaultDockerUser
	}
	switch {
	case o.NoFile == 0:
		o.NoFile = DefaultDockerNoFile
	case o.NoFile < 0:
		return bad("open files limit %d: want a positive number", o.NoFile)
	}
	switch {
	case o.TmpfsBytes == 0:
		o.TmpfsBytes = DefaultDockerTmpfsBytes
	case o.TmpfsBytes < 0:
		return bad("/tmp size %d: want a positive number of bytes", o.TmpfsBytes)
	}
	switch {
	case o.StopGrace == 0:
		o.StopGrace = DefaultStopGrace
	case o.StopGrace < 0:
		return bad("stop grace %v: want a positive duration", o.StopGrace)
	}
	if o.Instance == "" {
		o.Instance = "bridge-" + randomHex(8)
	}
	mounts := make([]mount.Mount, 0, len(o.Mounts))
	seen := map[string]bool{}
	for _, s := range o.Mounts {
		m, err := parseMount(s)
		if err != nil {
			return bad("%v", err)
		}
		if seen[m.Target] {
			return bad("mount %q: %s is already a mount target", s, m.Target)
		}
		seen[m.Target] = true
		mounts = append(mounts, m)
	}
	return o, mounts, nil
}

// parseMount parses "SRC:DST[:ro|:rw]" into a bind mount, read-only unless
// ":rw" is given.
func parseMount(s string) (mount.Mount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return mount.Mount{}, fmt.Errorf("mount %q: want SRC:DST, SRC:DST:ro or SRC:DST:rw", s)
	}
	src, dst := parts[0], parts[1]
	readOnly := true
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
		case "rw":
			readOnly = false
		default:
			return mount.Mount{}, fmt.Errorf("mount %q: mode %q: want ro or rw", s, parts[2])
		}
	}
	if !path.IsAbs(src) {
		return mount.Mount{}, fmt.Errorf("mount %q: source %q must be an absolute path on the Docker host", s, src)
	}
	if !path.IsAbs(dst) {
		return mount.Mount{}, fmt.Errorf("mount %q: target %q must be an absolute path in the container", s, dst)
	}
	dst = path.Clean(dst)
	switch dst {
	case "/":
		return mount.Mount{}, fmt.Errorf("mount %q: cannot mount over the container's root", s)
	case "/tmp":
		return mount.Mount{}, fmt.Errorf("mount %q: /tmp is the container's tmpfs; mount elsewhere", s)
	}
	return mount.Mount{Type: mount.TypeBind, Source: path.Clean(src), Target: dst, ReadOnly: readOnly}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}

// Instance returns the instance name in this launcher's container labels.
func (d *Docker) Instance() string { return d.opts.Instance }

// Launch creates and starts a container for sessionID.
//
// ctx bounds the launch (pull, create, attach, start): the container
// outlives it and runs until it exits or Stop is called. Errors wrap
// ErrLaunch; when the engine refuses to start the container (an unknown
// user, say), the error carries its state, exit code and engine error.
//
// A command that cannot be executed is not a Launch error: the container's
// init starts, fails to run it and exits with status 127, and Wait returns
// that as an *ExitError whose Stderr says why.
func (d *Docker) Launch(ctx context.Context, sessionID string) (Process, error) {
	if d.isClosed() {
		return nil, fmt.Errorf("%w for session %s: the Docker launcher is closed (the bridge is shutting down)", ErrLaunch, sessionID)
	}
	if err := d.ensureImage(ctx, sessionID); err != nil {
		return nil, err
	}
	cfg, hcfg := d.containerConfig(sessionID)
	created, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hcfg})
	if err != nil {
		hint := "check the Docker options (--network, --mount, limits) and the engine's log"
		if cerrdefs.IsNotFound(err) {
			hint = "the image or the network is missing on the Docker host; check --image, --pull and --network"
		}
		return nil, fmt.Errorf("%w for session %s: creating a container from image %s: %w (%s)", ErrLaunch, sessionID, d.opts.Image, err, hint)
	}
	id := created.ID
	logger := d.log.With("session", sessionID, "container", shortID(id))
	p := &dockerProcess{
		d:          d,
		id:         id,
		sessionID:  sessionID,
		logger:     logger,
		stderr:     newStderrLogger(logger, 0, 0).withRate(d.opts.StderrRate),
		outputDone: make(chan struct{}),
		exited:     make(chan struct{}),
		done:       make(chan struct{}),
		hurry:      make(chan struct{}),
		removed:    make(chan struct{}),
	}
	p.life, p.cancel = context.WithCancel(context.Background())
	// fail undoes a partial launch. The container must not outlive it
	// whatever ctx says, hence its own context.
	fail := func(err error) (Process, error) {
		p.cancel()
		if p.conn != nil {
			p.conn.Close()
		}
		rctx, cancel := context.WithTimeout(context.Background(), dockerAPITimeout)
		defer cancel()
		if rerr := d.removeContainer(rctx, id); rerr != nil {
			logger.Warn("cannot remove the container of a failed launch; RemoveLeftovers or Close will", "error", rerr)
		}
		return nil, err
	}
	if len(created.Warnings) > 0 {
		// The engine dropped or changed a setting (for example a limit the
		// kernel cannot enforce): never run a server less confined than
		// configured.
		return fail(fmt.Errorf("%w for session %s: the Docker Engine would weaken the sandbox: %s; fix the host or the options",
			ErrLaunch, sessionID, strings.Join(created.Warnings, "; ")))
	}

	// Attach before start, so not a byte of early output is lost.
	att, err := d.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fail(fmt.Errorf("%w for session %s: attaching to container %s: %w", ErrLaunch, sessionID, shortID(id), err))
	}
	p.att = att.HijackedResponse
	p.conn = att.Conn
	// Register the wait before start too: "next-exit" on a created
	// container cannot miss an exit that follows the start at once. The
	// engine has registered it when the call returns (it sends the
	// response headers only then), so a failure shows up on Error now.
	wait := d.cli.ContainerWait(p.life, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	select {
	case err := <-wait.Error:
		return fail(fmt.Errorf("%w for session %s: waiting on container %s: %w", ErrLaunch, sessionID, shortID(id), err))
	default:
	}

	p.stdoutR, p.stdoutW = io.Pipe()
	stderrR, stderrW := io.Pipe()
	// Owned by p: the demultiplexer ends when the engine closes the attach
	// stream (the container's output ended) or when the stream or stdoutR
	// is closed (Stop hurrying, a failed start); it then closes both pipe
	// writers, which ends the stderr reader.
	if !d.reserve(2) {
		return fail(fmt.Errorf("%w for session %s: the Docker launcher is closed (the bridge is shutting down)", ErrLaunch, sessionID))
	}
	stderrDone := make(chan struct{})
	go func() {
		defer d.wg.Done()
		defer close(stderrDone)
		p.stderr.run(stderrR)
	}()
	go func() {
		defer d.wg.Done()
		_, err := stdcopy.StdCopy(p.stdoutW, stderrW, p.att.Reader)
		p.stdoutW.CloseWithError(err) // nil: readers get io.EOF
		stderrW.CloseWithError(err)
		<-stderrDone
		close(p.outputDone)
	}()

	// cutOutput ends the demultiplexer and the stderr reader.
	cutOutput := func() {
		p.stdoutR.CloseWithError(errStopped)
		p.conn.Close()
		<-p.outputDone
	}
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		diag := d.diagnose(id)
		cutOutput()
		if tail := p.stderr.lines(); len(tail) > 0 {
			diag += "; last stderr lines: " + strings.Join(tail, " | ")
		}
		return fail(fmt.Errorf("%w for session %s: starting container %s from image %s: %w (%s; check the image's entrypoint, the command after --, --user and --mount)",
			ErrLaunch, sessionID, shortID(id), d.opts.Image, err, diag))
	}
	// Tracked only now, fully set up, so that Close never stops a
	// half-launched container (Close's label sweep covers the window).
	if !d.track(p) {
		cutOutput()
		return fail(fmt.Errorf("%w for session %s: the Docker launcher is closed (the bridge is shutting down)", ErrLaunch, sessionID))
	}
	go p.waiter(wait)
	logger.Info("MCP server container started", "image", d.opts.Image)
	return p, nil
}

// containerConfig is the locked-down configuration of a session's container.
func (d *Docker) containerConfig(sessionID string) (*container.Config, *container.HostConfig) {
	o := &d.opts
	labels := d.self.labels()
	labels[labelInstance] = o.Instance
	labels[labelSession] = sessionID
	cfg := &container.Config{
		Image:        o.Image,
		User:         o.User,
		Env:          slices.Clone(o.Env),
		Labels:       labels,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		// StdinOnce: when our attached stdin closes (Stop, or the bridge
		// dying), the engine closes the server's stdin: its cue to exit.
		StdinOnce: true,
		Tty:       false, // keeps stdout and stderr apart (multiplexed)
	}
	if len(o.Command) > 0 {
		cfg.Entrypoint = []string{o.Command[0]}
		cfg.Cmd = append([]string{}, o.Command[1:]...) // non-nil: never the image's CMD
	}
	yes := true
	pids := o.Pids
	hcfg := &container.HostConfig{
		NetworkMode:    container.NetworkMode(o.Network),
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		AutoRemove:     false, // see the top of this file: we remove it after the inspect
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Privileged:     false,
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,noexec,nosuid,nodev,size=%d", o.TmpfsBytes)},
		IpcMode:        container.IPCModePrivate,
		Init:           &yes, // reaps zombies and forwards SIGTERM to the server
		// The MCP traffic is private and unbounded: keep it out of the
		// engine's log files. Stderr reaches our log through the attach.
		LogConfig: container.LogConfig{Type: "none"},
		Mounts:    slices.Clone(d.mounts),
		Resources: container.Resources{
			Memory:     o.Memory,
			MemorySwap: o.Memory, // memory+swap: no swap
			NanoCPUs:   int64(math.Round(o.CPUs * 1e9)),
			PidsLimit:  &pids,
			Ulimits:    []*container.Ulimit{{Name: "nofile", Soft: o.NoFile, Hard: o.NoFile}},
		},
	}
	return cfg, hcfg
}

// diagnose describes a container that failed to start, for the error.
func (d *Docker) diagnose(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), dockerAPITimeout)
	defer cancel()
	res, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Sprintf("cannot inspect it: %v", err)
	}
	st := res.Container.State
	if st == nil {
		return "the engine reported no state"
	}
	s := fmt.Sprintf("state %s, exit code %d", st.Status, st.ExitCode)
	if st.Error != "" {
		s += ", engine error: " + st.Error
	}
	return s
}

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
			return fmt.Errorf("%w for session %s: image %s is not on the Docker host and the pull policy is never; build or load it there (docker build -t %s, docker load), or use --pull missing",
				ErrLaunch, sessionID, img, img)
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
			return fmt.Errorf("%w for session %s: pulling image %s (pull policy always): %w; check the name and the registry's reachability and credentials, or use --pull missing to run the local copy",
				ErrLaunch, sessionID, img, err)
		}
		return fmt.Errorf("%w for session %s: image %s is not on the Docker host and pulling it failed: %w; build or load it there (docker build -t %s, docker load), or check the name, the registry's reachability and --pull",
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
		if !d.self.is(c.Labels) {
			continue
		}
		d.log.Warn("removing a container this bridge started but no longer tracked", "container", shortID(c.ID), "session", c.Labels[labelSession])
		if err := d.removeContainer(sctx, c.ID); err != nil {
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

// RemoveLeftovers removes the containers that earlier bridges left behind
// (a bridge killed before its Close ran) and returns how many it removed.
// Call it at start-up, before serving.
//
// Every container this package creates carries the labels
// io.mcp-bridge.instance (the bridge's instance name),
// io.mcp-bridge.session, and the identity of the bridge process that
// created it: io.mcp-bridge.host (hostname), io.mcp-bridge.boot-id,
// io.mcp-bridge.pid and io.mcp-bridge.pid-start (the process's start time,
// which tells a reused PID from the original). A container with an
// io.mcp-bridge.instance label that this process did not create is removed
// when either
//
//   - its instance is this launcher's Instance: a bridge restarted under the
//     same name takes over everything of that name (so two bridges running
//     at once must not share an instance name); or
//   - it was created on this host (same hostname) by a process that is gone:
//     the boot ID differs (the host rebooted), no process has that PID, or
//     the process with that PID started at another time.
//
// Containers of live bridges, and of bridges on other hosts sharing the
// engine, are left alone: from here nothing tells whether those are alive.
// A bridge running in a container sees its own PID namespace and hostname,
// so there, give it a stable --instance name.
func (d *Docker) RemoveLeftovers(ctx context.Context) (int, error) {
	list, err := d.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelInstance),
	})
	if err != nil {
		return 0, fmt.Errorf("docker sandbox: listing containers left by earlier bridges: %w", err)
	}
	removed := 0
	var errs []error
	for _, c := range list.Items {
		if d.self.is(c.Labels) {
			continue // ours, alive: Close removes them
		}
		var reason string
		switch {
		case c.Labels[labelInstance] == d.opts.Instance:
			reason = "an earlier run of this instance created it"
		case c.Labels[labelHost] == d.self.host:
			dead, why := ownerGone(c.Labels, d.self)
			if !dead {
				continue
			}
			reason = why
		default:
			continue
		}
		if err := d.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		d.log.Info("removed a leftover container", "container", shortID(c.ID),
			"owner_instance", c.Labels[labelInstance], "session", c.Labels[labelSession], "state", string(c.State), "reason", reason)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("docker sandbox: removing containers left by earlier bridges: %w", err)
	}
	return removed, nil
}

// owner identifies a bridge process across restarts of the bridge.
type owner struct {
	host     string
	bootID   string
	pid      int
	pidStart string
}

func currentOwner() owner {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return owner{host: host, bootID: bootID(), pid: pid, pidStart: processStart(pid)}
}

func (o owner) labels() map[string]string {
	return map[string]string{
		labelHost:     o.host,
		labelBootID:   o.bootID,
		labelPID:      strconv.Itoa(o.pid),
		labelPIDStart: o.pidStart,
	}
}

// is reports whether labels name this very process.
func (o owner) is(labels map[string]string) bool {
	return labels[labelHost] == o.host && labels[labelBootID] == o.bootID &&
		labels[labelPID] == strconv.Itoa(o.pid) && labels[labelPIDStart] == o.pidStart
}

// ownerGone reports whether the bridge process named by labels, on this
// host, is gone, and why. If unsure, it says no.
func ownerGone(labels map[string]string, self owner) (bool, string) {
	if b := labels[labelBootID]; b != "" && self.bootID != "" && b != self.bootID {
		return true, "its bridge ran before this host's last boot"
	}
	pid, err := strconv.Atoi(labels[labelPID])
	if err != nil || pid <= 0 {
		return false, ""
	}
	if !processExists(pid) {
		return true, fmt.Sprintf("its bridge (pid %d) is gone", pid)
	}
	if want := labels[labelPIDStart]; want != "" {
		if got := processStart(pid); got != "" && got != want {
			return true, fmt.Sprintf("its bridge (pid %d) is gone; the pid now belongs to another process", pid)
		}
	}
	return false, ""
}

// processExists reports whether a process with this PID exists (possibly
// as a zombie, or owned by another user).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// bootID returns this host's boot ID, "" where the kernel does not tell.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// processStart returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat), "" where unknown.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// or parentheses: fields are counted from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	const starttime = 22 - 3 // f[0] is field 3
	if len(f) <= starttime {
		return ""
	}
	return f[starttime]
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// errStopped is what the demultiplexer gets when Stop cut the output off
// (readers of Stdout get io.EOF).
var errStopped = errors.New("sandbox: the MCP server's container was stopped")

// dockerProcess is one session's container. Its goroutines, and who ends
// them:
//   - the stderr reader (Launch): ends when the demultiplexer closes the
//     stderr pipe.
//   - the demultiplexer (Launch): ends when the attach stream ends (the
//     container's output is over) or is closed, or when stdoutR is closed;
//     closes both pipe writers, then outputDone once the stderr reader has
//     returned.
//   - waiter: ends once the container has exited, its output is drained,
//     it is inspected and removed; closes exited, done, then removed.
//   - stopper (the first Stop): ends once removed is closed, or life is
//     cancelled.
//
// The client's own ContainerWait goroutine ends with waiter's receive, or
// with life.
type dockerProcess struct {
	d         *Docker
	id        string
	sessionID string
	logger    *slog.Logger
	stderr    *stderrLogger

	att     client.HijackedResponse
	conn    io.Closer // att.Conn
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter

	// life bounds every background API call of this container; cancelled
	// only when the container is removed or the launcher gives up (abort).
	life   context.Context
	cancel context.CancelFunc

	stdinOnce sync.Once
	stdinErr  error

	outputDone chan struct{} // closed by the demultiplexer once stdout and stderr are drained
	exited     chan struct{} // closed by waiter once the engine reported the exit
	done       chan struct{} // closed by waiter once err is set
	err        error         // Wait's result
	removed    chan struct{} // closed by waiter once the container is removed (or given up on)
	removeErr  error

	stopOnce  sync.Once
	hurryOnce sync.Once
	hurry     chan struct{} // closed when a Stop caller's ctx ended: kill at once
}

// ID returns "container " and the container's short ID.
func (p *dockerProcess) ID() string { return "container " + shortID(p.id) }

func (p *dockerProcess) Stdin() io.WriteCloser { return dockerStdin{p} }

// Stdout returns the server's stdout. The caller must keep reading it: the
// engine sends stdout and stderr on one stream, so an unread stdout also
// holds back stderr (Stop cuts it off after StopGrace).
func (p *dockerProcess) Stdout() io.Reader { return dockerStdout{p.stdoutR} }

// Wait returns once the container has exited and its output is drained.
// The result is nil for status 0, else an *ExitError whose Code is the
// status of the container's init: a server killed by signal N shows as
// 128+N (137 for SIGKILL, 143 for SIGTERM), and Signal stays empty, since
// the engine does not tell that from an exit with that status. OOMKilled is
// set if the kernel killed a process of the container for exceeding Memory
// (read from the engine after the exit, before the container is removed).
func (p *dockerProcess) Wait() error {
	<-p.done
	return p.err
}

// dockerStdout turns the end of the output that Stop cut off into io.EOF,
// as for a local child: the caller asked for the end of the output.
type dockerStdout struct{ r *io.PipeReader }

func (s dockerStdout) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if errors.Is(err, io.ErrClosedPipe) {
		err = io.EOF
	}
	return n, err
}

type dockerStdin struct{ p *dockerProcess }

func (s dockerStdin) Write(b []byte) (int, error) { return s.p.att.Conn.Write(b) }

// Close half-closes the attach connection; with StdinOnce, the engine then
// closes the server's stdin.
func (s dockerStdin) Close() error { return s.p.closeStdin() }

func (p *dockerProcess) closeStdin() error {
	p.stdinOnce.Do(func() {
		if _, ok := p.att.Conn.(client.CloseWriter); !ok {
			// Not reachable with unix or TCP (TLS or not) connections.
			p.stdinErr = fmt.Errorf("closing the stdin of %s: the connection to the engine cannot be half-closed", p.ID())
			return
		}
		p.stdinErr = p.att.CloseWrite()
	})
	return p.stdinErr
}

// waiter is the only goroutine that receives the wait result, inspects and
// removes the container.
func (p *dockerProcess) waiter(wait client.ContainerWaitResult) {
	defer p.d.wg.Done()
	defer p.cancel()
	status := int64(-1)
	var werr error
	select {
	case res := <-wait.Result:
		status = res.StatusCode
		if res.Error != nil && res.Error.Message != "" {
			werr = errors.New(res.Error.Message)
		}
	case werr = <-wait.Error:
	}
	close(p.exited)
	if status < 0 {
		// The launcher is aborting, or we lost track of the container (the
		// engine restarted): end it rather than leave it unwatched.
		if p.life.Err() != nil {
			p.logger.Warn("the Docker launcher is closing in a hurry; killing and removing the container")
		} else {
			p.logger.Error("lost track of the MCP server's container; killing and removing it", "error", werr)
		}
		p.removeErr = p.remove()
	}
	<-p.outputDone

	oom := false
	if status >= 0 {
		ctx, cancel := context.WithTimeout(p.life, dockerAPITimeout)
		res, err := p.d.cli.ContainerInspect(ctx, p.id, client.ContainerInspectOptions{})
		cancel()
		switch {
		case cerrdefs.IsNotFound(err):
			p.logger.Warn("the exited container was removed by someone else (another bridge's RemoveLeftovers?); an out-of-memory kill would go unreported")
		case err != nil:
			p.logger.Warn("cannot inspect the exited container; an out-of-memory kill would go unreported", "error", err)
		case res.Container.State != nil:
			oom = res.Container.State.OOMKilled
		}
	}
	switch {
	case status < 0:
		p.err = fmt.Errorf("waiting for the MCP server (%s) of session %s: %w", p.ID(), p.sessionID, werr)
	case status != 0:
		p.err = &ExitError{Code: int(status), OOMKilled: oom, Stderr: p.stderr.lines()}
	case oom:
		p.logger.Warn("a process in the container was killed for exceeding its memory limit", "memory", p.d.opts.Memory)
	}
	if p.err != nil {
		p.logger.Info("MCP server container exited", "error", p.err)
	} else {
		p.logger.Info("MCP server container exited", "status", 0)
	}
	close(p.done)

	if status >= 0 {
		p.removeErr = p.remove()
	}
	if p.removeErr != nil {
		p.logger.Warn("cannot remove the container; RemoveLeftovers will", "error", p.removeErr)
	}
	p.conn.Close()
	// removed before untrack: Close either sees p tracked, or removed.
	close(p.removed)
	p.d.untrack(p)
}

func (p *dockerProcess) remove() error {
	// Not bound by life: the container must go even while the launcher
	// aborts, if the engine still answers.
	ctx, cancel := context.WithTimeout(context.Background(), dockerAPITimeout)
	defer cancel()
	return p.d.removeContainer(ctx, p.id)
}

// Stop ends the container: close stdin, wait StopGrace, have the engine
// stop it (SIGTERM to its init, then SIGKILL after StopGrace), cut its
// output off if nobody drains it, and remove it. The escalation runs once,
// in a goroutine of its own, whatever the callers' contexts; each caller
// waits for it or for its ctx. A caller whose ctx ends first makes the
// escalation kill the container at once, so a container is never left
// running because its stopper gave up.
func (p *dockerProcess) Stop(ctx context.Context) error {
	p.startStop()
	select {
	case <-p.removed:
		return p.removeErr
	case <-ctx.Done():
	}
	p.hurryOnce.Do(func() { close(p.hurry) })
	select {
	case <-p.removed:
		return p.removeErr
	default:
	}
	return fmt.Errorf("stopping the MCP server (%s) of session %s: %w; it is being killed and removed", p.ID(), p.sessionID, context.Cause(ctx))
}

// startStop starts the stopper once, unless the container is already
// removed. Close calls it for every tracked process before waiting for wg,
// so the stopper's Add can never race with that Wait.
func (p *dockerProcess) startStop() {
	select {
	case <-p.removed:
		return
	default:
	}
	p.stopOnce.Do(func() {
		p.d.wg.Add(1)
		go p.stopper()
	})
}

func (p *dockerProcess) stopper() {
	defer p.d.wg.Done()
	grace := p.d.opts.StopGrace
	// MCP stdio transport, Shutdown: "the client SHOULD initiate shutdown
	// by: 1. First, closing the input stream to the child process (the
	// server) 2. Waiting for the server to exit, or sending SIGTERM if the
	// server does not exit within a reasonable time 3. Sending SIGKILL if
	// the server does not exit within a reasonable time after SIGTERM".
	if err := p.closeStdin(); err != nil {
		p.logger.Warn("cannot close the MCP server's stdin", "error", err)
	}
	if !p.waitFor(p.exited, grace) {
		if p.hurried() {
			p.kill()
		} else {
			p.logger.Info("MCP server still running after stdin was closed; stopping its container", "grace", grace)
			secs := max(1, int(math.Ceil(grace.Seconds())))
			ctx, cancel := context.WithTimeout(p.life, time.Duration(secs)*time.Second+dockerAPITimeout)
			stopped := make(chan error, 1)
			go func() { // owned by stopper: it waits below for the result
				_, err := p.d.cli.ContainerStop(ctx, p.id, client.ContainerStopOptions{Timeout: &secs})
				stopped <- err
			}()
			var err error
			select {
			case err = <-stopped:
			case <-p.hurry:
				p.kill()
				cancel()
				err = <-stopped
			}
			cancel()
			if err != nil && !cerrdefs.IsNotFound(err) && !errors.Is(err, context.Canceled) {
				p.logger.Warn("the engine did not stop the container; killing it", "error", err)
				p.kill()
			}
		}
	}
	// The container has exited, or is being killed. If nobody reads stdout,
	// the demultiplexer is stuck and the waiter with it: cut the output.
	if !p.waitFor(p.done, grace) {
		p.logger.Warn("MCP server output not drained after it was stopped; discarding the rest", "grace", grace)
		p.stdoutR.CloseWithError(errStopped)
		p.conn.Close()
	}
	select {
	case <-p.removed:
	case <-p.life.Done():
	}
	// After Stop, Stdout returns io.EOF.
	p.stdoutR.CloseWithError(errStopped)
}

// waitFor reports whether ch was closed within d. It returns false at once
// if a Stop caller gave up or the launcher aborts.
func (p *dockerProcess) waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-p.hurry:
	case <-p.life.Done():
	case <-t.C:
	}
	select { // closed meanwhile counts too
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *dockerProcess) hurried() bool {
	select {
	case <-p.hurry:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the container's processes; the waiter then sees the
// exit and removes it.
func (p *dockerProcess) kill() {
	ctx, cancel := context.WithTimeout(p.life, dockerAPITimeout)
	defer cancel()
	_, err := p.d.cli.ContainerKill(ctx, p.id, client.ContainerKillOptions{Signal: "KILL"})
	switch {
	case err == nil, cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err): // conflict: not running any more
	case p.life.Err() != nil: // aborting: the waiter force-removes it
	default:
		p.logger.Warn("cannot kill the container", "error", err)
	}
}

// abort gives up on the container at once: the launcher is closing and its
// ctx has ended. API calls are cancelled and the output is cut off, so every
// goroutine of p ends promptly.
func (p *dockerProcess) abort() {
	p.hurryOnce.Do(func() { close(p.hurry) })
	p.cancel()
	p.stdoutR.CloseWithError(errStopped)
	p.conn.Close()
}

package sandbox

// A session's container: its locked-down configuration, its creation,
// attachment and start.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

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
	err := d.ensureImage(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	cfg, hcfg := d.containerConfig(sessionID)
	cfg.Env = append(cfg.Env, launchEnv(ctx)...) // a session's own variables (WithLaunchEnv)
	if cfg.Image, err = d.pinnedImage(ctx, sessionID); err != nil {
		return nil, err
	}
	var tag string
	if d.egress != nil {
		// The proxy knows the container's tag before the container runs.
		t, err := d.egress.add(ctx, sessionID)
		if err != nil {
			return nil, fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, err)
		}
		tag = t
		hcfg.NetworkMode = container.NetworkMode(d.egress.network)
		// Not the engine's embedded DNS, which forwards outside names.
		hcfg.DNS = []netip.Addr{netip.MustParseAddr(egressDNS)}
		cfg.Env = append(cfg.Env, d.egress.proxyEnv(tag)...)
	}
	created, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hcfg})
	if err != nil {
		if tag != "" {
			d.egress.del(tag)
		}
		if cerrdefs.IsNotFound(err) {
			// ensureImage found the image: what is missing is the network
			// (newer engines look it up at create).
			return nil, fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, &OptionError{Field: "Network", Err: fmt.Errorf(
				"creating a container from image %s: %w (is network %q on the Docker host?)", d.opts.Image, err, d.opts.Network)})
		}
		return nil, fmt.Errorf("%w for session %s: creating a container from image %s: %w (check the sandbox's network, mounts and limits, and the engine's log)",
			ErrLaunch, sessionID, d.opts.Image, err)
	}
	id := created.ID
	logger := d.log.With("session", sessionID, "container", shortID(id))
	p := &dockerProcess{
		d:          d,
		id:         id,
		sessionID:  sessionID,
		egressTag:  tag,
		logger:     logger,
		stderr:     newStderrLogger(logger, d.opts.StderrLineBytes, 0).withRate(d.opts.StderrRate),
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
		if tag != "" {
			d.egress.del(tag)
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
		if cerrdefs.IsNotFound(err) {
			// The engine looks the network up at start (Engine 20.10).
			return fail(fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, &OptionError{Field: "Network", Err: fmt.Errorf(
				"starting container %s from image %s: %w (%s; is network %q on the Docker host?)", shortID(id), d.opts.Image, err, diag, d.opts.Network)}))
		}
		return fail(fmt.Errorf("%w for session %s: starting container %s from image %s: %w (%s; check the image's entrypoint, the server's command, the sandbox's user and mounts)",
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
		Runtime:   o.Runtime,
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

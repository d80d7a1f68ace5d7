package endpoint

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	units "github.com/docker/go-units"

	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// newLauncher builds the launcher of a server, in this order from the
// inside: the sandbox's, the per-user credentials, the record of each
// launch's principal (who, for the egress reporter; nil: none), the
// counters, the warm spares. close releases it (after every session has
// ended).
func newLauncher(ctx context.Context, o *ServerOptions, sh *Shared, tel *telemetry, who *launchPrincipals, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	l, closeInner, err := NewLauncher(ctx, o, logger)
	if err != nil {
		return nil, nil, err
	}
	if len(o.UserEnv) > 0 {
		l = &userEnvLauncher{Launcher: l, vars: o.UserEnv, dir: o.SecretsDir, authn: sh.Authenticates,
			legacy: o.ChildEra == pool.EraLegacy, logger: logger}
		if o.SecretsDir != "" {
			for i, t := range sh.StaticTokens {
				sum := sha256.Sum256([]byte(t))
				logger.Info("per-user credentials of a static token", "token", i+1, "dir", filepath.Join(o.SecretsDir, "static-"+hex.EncodeToString(sum[:8])))
			}
		}
	}
	if who != nil {
		l = principalLauncher{Launcher: l, who: who}
	}
	kind := o.sandbox()
	if o.Remote != nil {
		kind = "remote"
	}
	l = tel.launcher(l, kind)
	if o.Warm <= 0 {
		return l, closeInner, nil
	}
	spares := sandbox.NewSpares(l, o.Warm, logger)
	tel.watchSpares(spares)
	return spares, func() {
		// The spares go first: the Docker launcher's close removes what remains.
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.StopBudget(o.StopGrace))
		defer cancel()
		if err := spares.Close(ctx); err != nil {
			logger.Error("stopping the warm MCP servers at exit", "err", err)
		}
		closeInner()
	}, nil
}

func (o *ServerOptions) sandbox() Sandbox {
	if o.Sandbox == "" {
		return SandboxLocal
	}
	return o.Sandbox
}

// NewLauncher builds the sandbox's launcher of a server alone (no
// credentials, counters or spares: what `bridge check` and `bridge pin`
// run one child with), and a function that releases it. It checks what it
// can before any child starts: a local command that cannot be run, a
// Docker image that --pull never keeps from being pulled; and it removes
// what an earlier process left behind.
func NewLauncher(ctx context.Context, o *ServerOptions, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	if o.Remote != nil {
		ro := *o.Remote
		ro.Logger = logger
		l, err := connect.NewLauncher(&ro)
		return l, func() {}, err
	}
	if o.sandbox() == SandboxDocker {
		return newDockerLauncher(ctx, o, logger)
	}
	lo := o.Local
	if _, err := exec.LookPath(lo.Command); err != nil {
		return nil, nil, fmt.Errorf("the MCP server command %q cannot be run: %v; give a program that exists and is executable (a path, or a name on PATH) after --",
			lo.Command, unwrapExec(err))
	}
	// Servers run under the supervisor, this binary in its hidden mode,
	// started once and shared by every server of this process, so that
	// what a server starts ends with it and with us.
	if !o.Unsupervised && lo.Supervisor == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("finding the bridge's own executable, which supervises local servers (--local-unsupervised turns it off): %w", err)
		}
		lo.Supervisor = []string{exe, sandbox.SuperviseArg}
	}
	if lo.StopGrace == 0 {
		lo.StopGrace = o.StopGrace
	}
	lo.Logger = logger
	l := sandbox.NewLocal(&lo)
	return l, l.Close, nil
}

// unwrapExec drops exec's `exec: "name": ` prefix, which the message already says.
func unwrapExec(err error) error {
	if ee, ok := err.(*exec.Error); ok {
		return ee.Err
	}
	return err
}

func newDockerLauncher(ctx context.Context, o *ServerOptions, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	do := o.Docker
	if len(do.Egress) > 0 && do.EgressProxyBinary == "" {
		// The proxy's image is this binary on scratch (egress.ProxyArg).
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("--sandbox-egress: finding the bridge's own executable, which runs the egress proxy: %w", err)
		}
		do.EgressProxyBinary = exe
	}
	if o.Lock != nil {
		do.ImageDigest = o.Lock.ImageDigest // pinned: only that image runs
	}
	if do.StopGrace == 0 {
		do.StopGrace = o.StopGrace
	}
	do.Logger = logger
	d, err := sandbox.NewDocker(ctx, &do)
	if err != nil {
		return nil, nil, fmt.Errorf("--sandbox docker: %w", err)
	}
	if do.Pull == sandbox.PullNever {
		// Known now, not at the first session's 502.
		if err := d.CheckImage(ctx); err != nil {
			d.Close(ctx)
			return nil, nil, err // an OptionError: cmd/bridge names --pull
		}
	}
	// Containers of a bridge that died without cleaning up (kill -9, a
	// crash, a lost host) are removed before serving.
	n, err := d.RemoveLeftovers(ctx)
	if err != nil {
		logger.Warn("could not remove containers left by an earlier bridge", "err", err)
	} else if n > 0 {
		logger.Info("removed containers left by an earlier bridge", "count", n)
	}
	logger.Info("docker sandbox ready", "image", do.Image, "instance", d.Instance(),
		"network", do.Network, "egress", strings.Join(do.Egress, ","), "runtime", do.Runtime, "memory", units.BytesSize(float64(cmp.Or(do.Memory, sandbox.DefaultDockerMemory))), "cpus", do.CPUs, "pids", do.Pids, "user", do.User)
	return d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.StopBudget(o.StopGrace))
		defer cancel()
		if err := d.Close(ctx); err != nil {
			logger.Error("removing server containers at exit", "err", err)
		}
	}, nil
}

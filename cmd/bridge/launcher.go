package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// newLauncher builds the launcher the configuration asks for, with a warm
// pool in front of it when --warm is set, and a function that releases it
// at exit (after every session has ended). tel counts the children (nil:
// no metrics).
func newLauncher(ctx context.Context, cfg *config, logger *slog.Logger, tel *telemetry) (sandbox.Launcher, func(), error) {
	l, closeInner, err := newInnerLauncher(ctx, cfg, logger)
	if err != nil {
		return l, closeInner, err
	}
	if len(cfg.userVars) > 0 {
		l = &userEnvLauncher{Launcher: l, vars: cfg.userVars, dir: cfg.SecretsDir, authn: cfg.authenticates(),
			legacy: cfg.ChildEra == pool.EraLegacy, logger: logger}
		if cfg.SecretsDir != "" {
			for i, t := range cfg.tokens {
				sum := sha256.Sum256([]byte(t))
				logger.Info("per-user credentials of a static token", "token", i+1, "dir", filepath.Join(cfg.SecretsDir, "static-"+hex.EncodeToString(sum[:8])))
			}
		}
	}
	if cfg.egressWho != nil {
		l = principalLauncher{Launcher: l, who: cfg.egressWho}
	}
	l = tel.launcher(l, cfg.Sandbox)
	if cfg.Warm <= 0 {
		return l, closeInner, nil
	}
	pool := sandbox.NewSpares(l, cfg.Warm, logger)
	tel.watchSpares(pool)
	return pool, func() {
		// The spares go first: the Docker launcher's close removes what remains.
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.StopBudget(cfg.StopGrace))
		defer cancel()
		if err := pool.Close(ctx); err != nil {
			logger.Error("stopping the warm MCP servers at exit", "err", err)
		}
		closeInner()
	}, nil
}

func newInnerLauncher(ctx context.Context, cfg *config, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	if cfg.Sandbox == "docker" {
		return newDockerLauncher(ctx, cfg, logger)
	}
	if err := checkCommand(cfg); err != nil {
		return nil, nil, err
	}
	// Servers run under the supervisor, this binary in its hidden mode
	// (see main), started once and shared by every server of this
	// process, so that what a server starts ends with it and with us.
	var supervisor []string
	if !cfg.LocalUnsupervised {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("finding the bridge's own executable, which supervises local servers (--local-unsupervised turns it off): %w", err)
		}
		supervisor = []string{exe, sandbox.SuperviseArg}
	}
	// Servers of a bridge that died with their supervisors (kill -9 of
	// both, the OOM killer) are ended before serving.
	if n, err := sandbox.KillLocalLeftovers(); err != nil {
		logger.Warn("could not end every process left by an earlier bridge", "err", err)
	} else if n > 0 {
		logger.Info("ended processes left by an earlier bridge", "count", n)
	}
	l := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:         cfg.command[0],
		Args:            cfg.command[1:],
		Env:             append(slices.Clip(cfg.env), cfg.serverEnv...), // with the config file's "env" of the server
		Dir:             cfg.serverDir,
		Supervisor:      supervisor,
		StopGrace:       cfg.StopGrace,
		StderrLineBytes: int(cfg.StderrLineBytes),
		StderrRate:      stderrRate(cfg),
		Logger:          logger,
	})
	return l, l.Close, nil
}

func newDockerLauncher(ctx context.Context, cfg *config, logger *slog.Logger) (sandbox.Launcher, func(), error) {
	var proxyBinary string
	if len(cfg.SandboxEgress) > 0 {
		// The proxy's image is this binary on scratch (egress.ProxyArg).
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("--sandbox-egress: finding the bridge's own executable, which runs the egress proxy: %w", err)
		}
		proxyBinary = exe
	}
	var digest string
	if cfg.lock != nil {
		digest = cfg.lock.ImageDigest // --pin-file: only that image runs
	}
	d, err := sandbox.NewDocker(ctx, &sandbox.DockerOptions{
		Image:       cfg.Image,
		Command:     cfg.command,
		Pull:        cfg.Pull,
		Network:     cfg.SandboxNetwork,
		Mounts:      cfg.SandboxMounts,
		Env:         append(slices.Clip(cfg.SandboxEnv), cfg.serverEnv...),
		Memory:      cfg.memory,
		CPUs:        cfg.SandboxCPUs,
		Pids:        cfg.SandboxPids,
		User:        cfg.SandboxUser,
		StopGrace:   cfg.StopGrace,
		Instance:    cfg.Instance,
		StderrRate:  stderrRate(cfg),
		Logger:      logger,
		Runtime:     cfg.SandboxRuntime,
		ImageDigest: digest,

		StderrLineBytes: int(cfg.StderrLineBytes),

		Egress:            cfg.SandboxEgress,
		EgressProxyBinary: proxyBinary,
		OnEgress:          cfg.onEgress,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("--sandbox docker: %w", err)
	}
	if cfg.Pull == sandbox.PullNever {
		// Known now, not at the first session's 502.
		if err := d.CheckImage(ctx); err != nil {
			d.Close(ctx)
			return nil, nil, err // an OptionError: explain names --pull
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
	logger.Info("docker sandbox ready", "image", cfg.Image, "instance", d.Instance(),
		"network", cfg.SandboxNetwork, "egress", strings.Join(cfg.SandboxEgress, ","), "runtime", cfg.SandboxRuntime, "memory", cfg.SandboxMemory, "cpus", cfg.SandboxCPUs, "pids", cfg.SandboxPids, "user", cfg.SandboxUser)
	return d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.StopBudget(cfg.StopGrace))
		defer cancel()
		if err := d.Close(ctx); err != nil {
			logger.Error("removing server containers at exit", "err", err)
		}
	}, nil
}

func stderrRate(cfg *config) sandbox.StderrRate {
	return sandbox.StderrRate{LinesPerSecond: cfg.StderrLinesPerSecond, Burst: cfg.StderrBurst}
}

package main

import (
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	units "github.com/docker/go-units"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// checkCommand refuses a server command that cannot be run, at start-up
// rather than at the first session's 502. The local launcher runs it with
// the bridge's PATH, as exec.LookPath looks it up.
func checkCommand(cfg *config) error {
	if _, err := exec.LookPath(cfg.command[0]); err != nil {
		return fmt.Errorf("the MCP server command %q cannot be run: %v; give a program that exists and is executable (a path, or a name on PATH) after --",
			cfg.command[0], unwrapExec(err))
	}
	return nil
}

// unwrapExec drops exec's `exec: "name": ` prefix, which the message already says.
func unwrapExec(err error) error {
	if ee, ok := err.(*exec.Error); ok {
		return ee.Err
	}
	return err
}

// warnLoosenings logs a WARN line for each option that loosens a safe
// default, with its risk as README's tables state it: a loosening must never
// be on unnoticed.
func warnLoosenings(cfg *config, logger *slog.Logger) {
	warn := func(flag, value, risk string) {
		logger.Warn("loosened: "+risk, "flag", "--"+flag, "value", value)
	}
	if cfg.InsecureNoAuth && len(cfg.tokens) == 0 && !isLoopback(cfg.Listen) {
		warn("insecure-no-auth", "true", "no authentication on "+cfg.Listen+": anyone who reaches it can run your server")
	}
	if slices.Contains(cfg.AllowedOrigins, "*") {
		warn("allowed-origins", "*", "any web page open in a browser that reaches the bridge can call your server")
	}
	if slices.Contains(cfg.AllowedHosts, "*") && isLoopback(cfg.Listen) {
		warn("allowed-hosts", "*", "no DNS-rebinding protection: a web page can reach this loopback bridge under its own host name")
	}
	if cfg.AllowHiddenUnicode {
		warn("allow-hidden-unicode", "true", "tool descriptions may hide instructions for the model in characters a reviewer does not see")
	}
	if cfg.MaxDescriptionBytes < 0 {
		warn("max-description-bytes", strconv.Itoa(cfg.MaxDescriptionBytes), "tool descriptions of any length: room for instructions nobody reads")
	}
	if cfg.AuditArgs {
		warn("audit-args", "true", "the audit log holds the arguments of every request, which may carry what users typed")
	}
	if cfg.Sandbox != "docker" {
		return
	}
	if cfg.SandboxNetwork != sandbox.DefaultDockerNetwork {
		warn("sandbox-network", cfg.SandboxNetwork, "the server can reach your network and the internet: exfiltration, lateral movement")
	}
	for _, h := range cfg.SandboxEgress {
		warn("sandbox-egress", h, "the server can send what it reads to that host")
	}
	for _, m := range cfg.SandboxMounts {
		if strings.HasSuffix(m, ":rw") {
			warn("sandbox-mount", m, "the server reads and writes those host files")
		} else {
			warn("sandbox-mount", m, "the server reads those host files")
		}
	}
	for _, e := range cfg.SandboxEnv {
		name, _, _ := strings.Cut(e, "=")
		// The value may be a secret: the log names the variable only.
		warn("sandbox-env", name, "the server can read every value given")
	}
	if uid, _, _ := strings.Cut(cfg.SandboxUser, ":"); uid == "0" || uid == "root" {
		warn("sandbox-user", cfg.SandboxUser, "the server runs as root: an escape from the container lands as root")
	}
	if cfg.memory > sandbox.DefaultDockerMemory {
		warn("sandbox-memory", cfg.SandboxMemory, "a server can take "+units.BytesSize(float64(cfg.memory))+" of host memory")
	}
	if cfg.SandboxCPUs > sandbox.DefaultDockerCPUs {
		warn("sandbox-cpus", fmt.Sprint(cfg.SandboxCPUs), "a server can take that much CPU time")
	}
	if cfg.SandboxPids > sandbox.DefaultDockerPids {
		warn("sandbox-pids", fmt.Sprint(cfg.SandboxPids), "more processes on the host")
	}
}

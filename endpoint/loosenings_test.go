package endpoint_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// looseServerOptions sets every option Loosenings reports.
func looseServerOptions() *endpoint.ServerOptions {
	return &endpoint.ServerOptions{
		Sandbox:    endpoint.SandboxDocker,
		Inspection: pin.Inspection{AllowHiddenUnicode: true, MaxDescriptionBytes: -1},
		AuditArgs:  true,
		Docker: sandbox.DockerOptions{
			Network: "bridge",
			Egress:  []string{"api.example"},
			Mounts:  []string{"/a:/a", "/b:/b:rw"},
			Env:     []string{"API_KEY=s3cret"},
			User:    "0:0",
			Memory:  1 << 30,
			CPUs:    1.5,
			Pids:    512,
		},
	}
}

// Each loosening of a server's options is reported with its value (a
// variable's name only: its value may be a secret); the defaults loosen
// nothing, and the Docker ones only with the Docker sandbox.
func TestLoosenings(t *testing.T) {
	var got []string
	for _, l := range looseServerOptions().Loosenings() {
		got = append(got, fmt.Sprintf("%s %s: %s", l.Option, l.Value, l.Risk))
	}
	want := []string{
		"pin.Inspection.AllowHiddenUnicode true: tool descriptions may hide instructions for the model in characters a reviewer does not see",
		"pin.Inspection.MaxDescriptionBytes -1: tool descriptions of any length: room for instructions nobody reads",
		"endpoint.ServerOptions.AuditArgs true: the audit log holds the arguments of every request, which may carry what users typed",
		"sandbox.DockerOptions.Network bridge: the server can reach your network and the internet: exfiltration, lateral movement",
		"sandbox.DockerOptions.Egress api.example: the server can send what it reads to that host",
		"sandbox.DockerOptions.Mounts /a:/a: the server reads those host files",
		"sandbox.DockerOptions.Mounts /b:/b:rw: the server reads and writes those host files",
		"sandbox.DockerOptions.Env API_KEY: the server can read every value given",
		"sandbox.DockerOptions.User 0:0: the server runs as root: an escape from the container lands as root",
		"sandbox.DockerOptions.Memory 1GiB: a server can take 1GiB of host memory",
		"sandbox.DockerOptions.CPUs 1.5: a server can take that much CPU time",
		"sandbox.DockerOptions.Pids 512: more processes on the host",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Loosenings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	local := looseServerOptions()
	local.Sandbox = endpoint.SandboxLocal
	if n := len(local.Loosenings()); n != 3 {
		t.Errorf("a local server: %d loosenings, want the 3 that are not Docker's", n)
	}
	defaults := &endpoint.ServerOptions{Sandbox: endpoint.SandboxDocker, Docker: sandbox.DockerOptions{
		Network: sandbox.DefaultDockerNetwork, User: sandbox.DefaultDockerUser, Memory: sandbox.DefaultDockerMemory,
		CPUs: sandbox.DefaultDockerCPUs, Pids: sandbox.DefaultDockerPids}}
	if l := defaults.Loosenings(); len(l) != 0 {
		t.Errorf("the defaults loosen: %v", l)
	}
	if l := (&endpoint.ServerOptions{Sandbox: endpoint.SandboxDocker}).Loosenings(); len(l) != 0 {
		t.Errorf("the zero options loosen: %v", l)
	}
}

// Validate asks each package's options to validate themselves (their
// OptionErrors come through as they are) and checks its own fields.
func TestServerOptionsValidate(t *testing.T) {
	if err := (&endpoint.ServerOptions{}).Validate(); err != nil {
		t.Fatalf("zero ServerOptions: %v", err)
	}
	for _, tc := range []struct {
		o      endpoint.ServerOptions
		option string
	}{
		{endpoint.ServerOptions{Warm: -1}, "endpoint.ServerOptions.Warm"},
		{endpoint.ServerOptions{MaxSessions: -1}, "session.Options.MaxSessions"},
		{endpoint.ServerOptions{LogMaxBytes: -1}, "session.Options.LogMaxBytes"},
		{endpoint.ServerOptions{Limits: peer.Limits{MaxRequests: -1}}, "peer.Limits.MaxRequests"},
		{endpoint.ServerOptions{PoolMin: 3, PoolMax: 2}, "pool.Options.Min"},
		{endpoint.ServerOptions{RequestStateTTL: -1}, "pool.Options.StateTTL"},
		{endpoint.ServerOptions{Handler: bridge.Options{SSERetry: -1}}, "bridge.Options.SSERetry"},
		{endpoint.ServerOptions{AuditArgs: true}, "endpoint.ServerOptions.AuditLog"},
	} {
		err := tc.o.Validate()
		var oe interface{ Option() string }
		if !errors.As(err, &oe) || oe.Option() != tc.option {
			t.Errorf("%+v: %v, want an OptionError of %s", tc.o, err, tc.option)
		}
	}
	if err := (&endpoint.ServerOptions{AuditArgs: true}).Validate(); !errors.Is(err, endpoint.ErrAuditArgsWithoutLog) {
		t.Errorf("AuditArgs without AuditLog: %v", err)
	}
}

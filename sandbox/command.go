package sandbox

import (
	"errors"
	"os/exec"

	"github.com/mcp-bridge/mcp-bridge/egress"
)

// CheckCommand reports why a local server's program cannot be run, as the
// local launcher would find it (exec.LookPath, with the bridge's PATH),
// so that a command is refused at start rather than at the first
// session's launch. The error is LookPath's cause, without exec's
// `exec: "name": ` prefix, which a caller's message says already.
func CheckCommand(program string) error {
	_, err := exec.LookPath(program)
	if ee, ok := err.(*exec.Error); ok {
		return ee.Err
	}
	return err
}

// ErrEgressNetwork is CheckEgress's refusal of a network beside an
// egress allow-list.
var ErrEgressNetwork = errors.New("an egress allow-list and a network exclude each other: the allow-list puts the server on an internal network of its own")

// CheckEgress checks an egress allow-list (DockerOptions.Egress) and the
// network beside it, for DockerOptions' own check and for a command's,
// each with its own words: the rules must parse (egress.ParseRules'
// error), then no network but
// DefaultDockerNetwork (or none) may be asked for with a list
// (ErrEgressNetwork). An empty list is nil.
func CheckEgress(list []string, network string) error {
	if len(list) == 0 {
		return nil
	}
	if _, err := egress.ParseRules(list); err != nil {
		return err
	}
	if network != "" && network != DefaultDockerNetwork {
		return ErrEgressNetwork
	}
	return nil
}

package sandbox_test

import (
	"errors"
	"io/fs"
	"os/exec"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

func TestCheckCommand(t *testing.T) {
	if err := sandbox.CheckCommand("sh"); err != nil {
		t.Fatalf("sh: %v", err)
	}
	if err := sandbox.CheckCommand("no-such-program-here"); !errors.Is(err, exec.ErrNotFound) || err.Error() != exec.ErrNotFound.Error() {
		t.Fatalf("a name not on PATH: %v, want exec.ErrNotFound without exec's prefix", err)
	}
	var pe *fs.PathError
	if err := sandbox.CheckCommand("/nonexistent/srv"); !errors.As(err, &pe) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing path: %v, want its *fs.PathError", err)
	}
}

// One rule for DockerOptions and the command: the rules parse first, then
// no network but the default may be asked for beside them.
func TestCheckEgress(t *testing.T) {
	for _, c := range []struct {
		list    []string
		network string
		want    error
		bad     bool
	}{
		{nil, "bridge", nil, false},
		{[]string{"example.com"}, "", nil, false},
		{[]string{"example.com"}, sandbox.DefaultDockerNetwork, nil, false},
		{[]string{"example.com"}, "bridge", sandbox.ErrEgressNetwork, true},
		{[]string{"exa mple.com"}, "bridge", nil, true}, // the rules' error first
	} {
		err := sandbox.CheckEgress(c.list, c.network)
		if (err != nil) != c.bad || (c.want != nil && !errors.Is(err, c.want)) || (c.want == nil && errors.Is(err, sandbox.ErrEgressNetwork)) {
			t.Errorf("%q with network %q: %v", c.list, c.network, err)
		}
	}
}

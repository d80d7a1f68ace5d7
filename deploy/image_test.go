package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// --build-arg values are checked against the Dockerfile's ARGs, and the base
// images a failed build could not pull are those of its FROM lines with the
// ARGs given, else their defaults.
func TestBuildArgsAndBaseImages(t *testing.T) {
	spec, err := ParseSpec("go:example.com/x/cmd@v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	goDF, err := RenderDockerfile(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	aloneDF, err := RenderDockerfile(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := dockerfileArgs(goDF); !slices.Equal(got, []string{"GO_IMAGE", "RUNTIME_IMAGE"}) {
		t.Errorf("ARGs %q", got)
	}
	defaults := baseImages(goDF, nil)
	if len(defaults) != 2 || !strings.HasPrefix(defaults[0], "golang:") || !strings.Contains(defaults[1], "distroless") {
		t.Errorf("base images by default %q", defaults)
	}
	args, err := buildArgs(goDF, []string{"GO_IMAGE=mirror.example/golang:1", "RUNTIME_IMAGE=scratch"})
	if err != nil {
		t.Fatal(err)
	}
	if got := baseImages(goDF, args); !slices.Equal(got, []string{"mirror.example/golang:1"}) {
		t.Errorf("base images with --build-arg %q, want the given one and no scratch", got)
	}
	if got := baseImages(aloneDF, nil); len(got) != 0 {
		t.Errorf("the bridge alone: base images %q, want none (scratch)", got)
	}
	for _, tc := range []struct {
		df   []byte
		arg  string
		want string
	}{
		{goDF, "NODE_IMAGE=x", "--build-arg NODE_IMAGE: the Dockerfile has no such ARG (it has GO_IMAGE, RUNTIME_IMAGE)"},
	} {
		if _, err := buildArgs(tc.df, []string{tc.arg}); err == nil || err.Error() != tc.want {
			t.Errorf("--build-arg %s: %v, want %q", tc.arg, err, tc.want)
		}
	}
}

// A dry run without --bridge-binary shows the plan and notes what the real
// run would refuse; a binary it is given is checked at once.
func TestSetBridgeBinary(t *testing.T) {
	c := &AWSConfig{Target: TargetECS}
	if _, err := c.SetBridgeBinary("/nonexistent/bridge", true); err == nil {
		t.Error("a dry run accepted a bridge binary that does not exist")
	}
	note, err := c.SetBridgeBinary("", true)
	if err != nil || c.BridgeBinary != "<this executable>" {
		t.Errorf("dry run: %v, binary %q", err, c.BridgeBinary)
	}
	// The note is what the real run would refuse of this executable (the
	// test binary: dynamically linked under -race, static without cgo).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	if err := c.CheckBinary(exe); err != nil {
		want = "the real run would refuse this executable: " + err.Error()
	}
	if note != want {
		t.Errorf("dry run note %q, want %q", note, want)
	}
	if note, err := c.SetBridgeBinary("", false); err != nil || note != "" || c.BridgeBinary == "" || c.BridgeBinary == "<this executable>" {
		t.Errorf("real run: note %q, %v, binary %q", note, err, c.BridgeBinary)
	}
}

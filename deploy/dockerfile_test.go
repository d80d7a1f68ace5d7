package deploy

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/dockerfiles"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if buildDir != "" {
			os.RemoveAll(buildDir)
		}
	}))
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
}

// parseDockerfile splits a Dockerfile into instructions, the way the
// builder does for what these files use: comments, blank lines, backslash
// continuations.
func parseDockerfile(t *testing.T, src []byte) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("dangling continuation: %q", cur.String())
	}
	return out
}

var knownInstructions = []string{"FROM", "ARG", "ENV", "WORKDIR", "RUN", "COPY", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "LABEL"}

// checkDockerfile checks what every image must satisfy and returns the
// final stage's CMD (nil if none).
func checkDockerfile(t *testing.T, name string, src []byte) []string {
	t.Helper()
	ins := parseDockerfile(t, src)
	if len(ins) == 0 {
		t.Fatalf("%s: empty", name)
	}
	args := map[string]string{} // ARG defaults before the first FROM
	var final []instruction
	froms := 0
	for _, in := range ins {
		if !slices.Contains(knownInstructions, in.cmd) {
			t.Errorf("%s: unknown instruction %s", name, in.cmd)
		}
		switch in.cmd {
		case "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
			for _, bad := range []string{"TOKEN", "SECRET", "PASSWORD", "KEY"} {
				if strings.Contains(strings.ToUpper(k), bad) {
					t.Errorf("%s: build argument %s would bake a secret into the image history", name, k)
				}
			}
		case "ENV":
			for _, bad := range []string{"TOKEN", "SECRET", "PASSWORD"} {
				if strings.Contains(strings.ToUpper(in.args), bad) {
					t.Errorf("%s: ENV %s: no secret in the image", name, in.args)
				}
			}
		case "FROM":
			froms++
			final = nil
			image, _, _ := strings.Cut(in.args, " ")
			if strings.HasPrefix(image, "${") {
				image = args[strings.Trim(image, "${}")]
			}
			if image != "scratch" {
				_, tag, ok := strings.Cut(image[strings.LastIndexByte(image, '/')+1:], ":")
				if !ok || tag == "" || tag == "latest" {
					t.Errorf("%s: base image %q is not pinned to a tag", name, image)
				}
			}
		case "RUN", "ENTRYPOINT", "CMD":
			if strings.HasPrefix(in.args, "[") {
				var argv []string
				if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
					t.Errorf("%s: %s %s: bad exec form: %v", name, in.cmd, in.args, err)
				}
			} else if in.cmd != "RUN" {
				t.Errorf("%s: %s must use the exec form (a JSON array) so that signals reach the bridge", name, in.cmd)
			}
		}
		final = append(final, in)
	}
	if froms == 0 {
		t.Fatalf("%s: no FROM", name)
	}
	var user, entrypoint string
	var cmd []string
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "CMD":
			json.Unmarshal([]byte(in.args), &cmd)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("%s: the final stage runs as %q; want a non-root user", name, user)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) != 1 || filepath.Base(ep[0]) != "bridge" {
		t.Errorf("%s: entrypoint %q; want the bridge alone", name, entrypoint)
	}
	return cmd
}

func TestStaticDockerfiles(t *testing.T) {
	for _, name := range []string{"Dockerfile", "scratch.Dockerfile"} {
		src, err := fs.ReadFile(dockerfiles.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		if cmd := checkDockerfile(t, name, src); cmd != nil {
			t.Errorf("%s: the bridge-alone image has a CMD %q", name, cmd)
		}
	}
	// The multi-stage build makes a static binary.
	src, _ := fs.ReadFile(dockerfiles.FS, "Dockerfile")
	if !bytes.Contains(src, []byte("CGO_ENABLED=0 go build")) {
		t.Errorf("Dockerfile does not build with CGO_ENABLED=0")
	}
}

func TestRenderDockerfile(t *testing.T) {
	for _, c := range []struct {
		spec    string
		command []string
		install string // the pinned install the Dockerfile must run
	}{
		{"npx:@modelcontextprotocol/server-everything@2025.1.14", nil, `["npm","install","--omit=dev","--save-exact","@modelcontextprotocol/server-everything@2025.1.14"]`},
		{"uvx:mcp-server-fetch==2025.4.7", nil, `["uv","tool","install","--no-cache","--python","/usr/local/bin/python3","mcp-server-fetch==2025.4.7"]`},
		{"go:github.com/acme/tools/cmd/mcp-server@v1.4.2", nil, `["go","install","github.com/acme/tools/cmd/mcp-server@v1.4.2"]`},
		{"npx:pkg@1.0.0", []string{"npx", "--no", "pkg@1.0.0", "--root", "/data dir"}, `["npm","install","--omit=dev","--save-exact","pkg@1.0.0"]`},
	} {
		spec, err := ParseSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		df, err := RenderDockerfile(spec, c.command)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		cmd := checkDockerfile(t, c.spec, df)
		want := spec.Command()
		if c.command != nil {
			want = append([]string{"--"}, c.command...)
		}
		if !slices.Equal(cmd, want) {
			t.Errorf("%s: CMD %q; want %q", c.spec, cmd, want)
		}
		if !bytes.Contains(df, []byte("RUN "+c.install+"\n")) {
			t.Errorf("%s: no `RUN %s` in\n%s", c.spec, c.install, df)
		}
		if !bytes.Contains(df, []byte("COPY "+BridgeFile+" /usr/local/bin/bridge\n")) {
			t.Errorf("%s: the bridge is not copied in", c.spec)
		}
		if !bytes.HasPrefix(df, []byte("# Generated by `bridge image build --from "+c.spec+"`.")) {
			t.Errorf("%s: the header does not name the spec", c.spec)
		}
	}
	if _, err := RenderDockerfile(nil, []string{"x"}); err == nil {
		t.Errorf("the bridge-alone image accepted a server command")
	}
}

func TestBuildContext(t *testing.T) {
	ctx1, err := BuildContext([]byte("FROM scratch\n"), []byte("binary"))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, _ := BuildContext([]byte("FROM scratch\n"), []byte("binary"))
	ctx3, _ := BuildContext([]byte("FROM scratch\n"), []byte("binary2"))
	if !bytes.Equal(ctx1, ctx2) || ContentTag(ctx1) != ContentTag(ctx2) {
		t.Errorf("the same inputs gave different contexts")
	}
	if ContentTag(ctx1) == ContentTag(ctx3) {
		t.Errorf("different binaries gave the same tag")
	}
	if len(ContentTag(ctx1)) != 12 {
		t.Errorf("tag %q", ContentTag(ctx1))
	}
	tr := tar.NewReader(bytes.NewReader(ctx1))
	got := map[string]int64{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h.Mode
	}
	if len(got) != 2 || got["Dockerfile"] != 0o644 || got[BridgeFile] != 0o755 {
		t.Errorf("context entries %v", got)
	}
}

// Builds of testdata programs, shared by the tests (each took seconds of a
// loaded machine): one per program and environment, in buildDir, which
// TestMain removes.
var (
	buildMu  sync.Mutex
	buildDir string
	builds   = map[string]*goBuildResult{}
)

type goBuildResult struct {
	once sync.Once
	path string
	err  error
}

// goBuild compiles a testdata program with the given environment, once per
// test binary; the caller must not change the file.
func goBuild(t *testing.T, dir string, env ...string) string {
	t.Helper()
	key := dir + "\x00" + strings.Join(env, "\x00")
	buildMu.Lock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "deploy-test-")
		if err != nil {
			buildMu.Unlock()
			t.Fatal(err)
		}
		buildDir = d
	}
	r := builds[key]
	if r == nil {
		r = &goBuildResult{path: filepath.Join(buildDir, fmt.Sprintf("%s-%d", filepath.Base(dir), len(builds)))}
		builds[key] = r
	}
	buildMu.Unlock()
	r.once.Do(func() {
		cmd := exec.Command("go", "build", "-trimpath", "-o", r.path, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("go build %s: %v\n%s", dir, err, b)
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

func TestReadBinary(t *testing.T) {
	t.Parallel()
	static := goBuild(t, "testdata/hello", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	b, err := ReadBinary(static)
	if err != nil || b.Arch != "amd64" {
		t.Fatalf("static amd64 binary: %+v, %v", b, err)
	}
	arm := goBuild(t, "testdata/hello", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if b, err := ReadBinary(arm); err != nil || b.Arch != "arm64" {
		t.Fatalf("static arm64 binary: %+v, %v", b, err)
	}
	mac := goBuild(t, "testdata/hello", "CGO_ENABLED=0", "GOOS=darwin", "GOARCH=arm64")
	if _, err := ReadBinary(mac); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "GOOS=linux") {
		t.Errorf("darwin binary: %v; want ErrBinary with a build hint", err)
	}
	if _, err := ReadBinary(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrBinary) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Logf("no C compiler here: the dynamically linked case is not tested")
		return
	}
	dynamic := goBuild(t, "testdata/cgo", "CGO_ENABLED=1")
	if _, err := ReadBinary(dynamic); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("cgo binary: %v; want ErrBinary saying it is dynamically linked", err)
	}
}

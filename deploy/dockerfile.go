package deploy

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/template"
	"time"

	"github.com/mcp-bridge/mcp-bridge/dockerfiles"
)

// Base images of the rendered Dockerfiles, pinned by tag. Tags, not digests:
// digests cannot be resolved where this was written (no registry is
// reachable); pin digests in production by editing the output of
// `bridge image build --dockerfile-only`.
const (
	DefaultNodeImage    = "node:22.12.0-bookworm-slim"
	DefaultUVImage      = "ghcr.io/astral-sh/uv:0.5.11"
	DefaultPythonImage  = "python:3.12.8-slim-bookworm"
	DefaultGoImage      = "golang:1.27.3"
	DefaultRuntimeImage = "gcr.io/distroless/static-debian12:nonroot"
)

// BridgeFile is the bridge binary's name in the build context.
const BridgeFile = "bridge"

// ErrBinary wraps every error of a bridge binary that cannot go into an image.
var ErrBinary = errors.New("unusable bridge binary")

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	// json writes an exec-form instruction argument: a JSON array of
	// strings needs no shell and no quoting rules of its own.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"list": func(s ...string) []string { return s },
}).ParseFS(dockerfiles.FS, "*.Dockerfile.tmpl"))

// RenderDockerfile returns the Dockerfile of an image bundling the bridge
// with spec's server, or of the bridge alone when spec is nil. command, if
// not empty, replaces the server command the image runs by default; it is
// the COMMAND ARGS... the bridge reads after "--".
func RenderDockerfile(spec *Spec, command []string) ([]byte, error) {
	if spec == nil {
		if len(command) > 0 {
			return nil, errors.New("a server command needs --from: the bridge-alone image holds no server to run")
		}
		return fs.ReadFile(dockerfiles.FS, "scratch.Dockerfile")
	}
	cmd := spec.Command()
	if len(command) > 0 {
		cmd = append([]string{"--"}, command...)
	}
	data := map[string]any{
		"Spec":           spec.String(),
		"Package":        spec.Package,
		"Version":        spec.Version,
		"PackageVersion": spec.PackageVersion(),
		"Binary":         spec.Binary(),
		"BridgeFile":     BridgeFile,
		"Command":        cmd,
		"NodeImage":      DefaultNodeImage,
		"UVImage":        DefaultUVImage,
		"PythonImage":    DefaultPythonImage,
		"GoImage":        DefaultGoImage,
		"RuntimeImage":   DefaultRuntimeImage,
	}
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, string(spec.Kind)+".Dockerfile.tmpl", data); err != nil {
		return nil, fmt.Errorf("rendering the Dockerfile for %s: %w", spec, err)
	}
	return b.Bytes(), nil
}

// BuildContext returns the whole build context as a tar archive: the
// Dockerfile and the bridge binary, nothing else from this machine. Its
// bytes depend only on the two inputs (fixed times and owners), so that
// ContentTag names the same context the same way.
func BuildContext(dockerfile, bridge []byte) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, dockerfile},
		{BridgeFile, 0o755, bridge},
	} {
		hdr := &tar.Header{
			Name:     f.name,
			Mode:     f.mode,
			Size:     int64(len(f.data)),
			ModTime:  time.Unix(0, 0),
			Typeflag: tar.TypeReg,
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ContentTag returns 12 hex digits naming a build context's content: the
// same Dockerfile and binary give the same tag, so redeploying unchanged
// content pushes nothing new and leaves the stack unchanged.
func ContentTag(buildContext []byte) string {
	sum := sha256.Sum256(buildContext)
	return hex.EncodeToString(sum[:6])
}

// A Binary is a bridge executable checked fit for a Linux image.
type Binary struct {
	Path string
	Arch string // GOARCH: "amd64" or "arm64"
	Data []byte
}

// ReadBinary reads the bridge binary at path and checks that it can run in
// the images: a Linux ELF executable for amd64 or arm64, statically linked
// (the scratch and distroless images have no C library).
func ReadBinary(path string) (*Binary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBinary, err)
	}
	hint := "build one with: CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -o bridge-linux ./cmd/bridge, and pass --bridge-binary bridge-linux"
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a Linux executable (%v); %s", ErrBinary, path, err, hint)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("%w: %s is an ELF file of type %s, not an executable; %s", ErrBinary, path, f.Type, hint)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%w: %s is dynamically linked and needs a C library the images do not have; rebuild it with CGO_ENABLED=0 (%s)", ErrBinary, path, hint)
		}
	}
	b := &Binary{Path: path, Data: data}
	switch f.Machine {
	case elf.EM_X86_64:
		b.Arch = "amd64"
	case elf.EM_AARCH64:
		b.Arch = "arm64"
	default:
		return nil, fmt.Errorf("%w: %s is built for %s; images run on amd64 or arm64; %s", ErrBinary, path, f.Machine, hint)
	}
	return b, nil
}

package deploy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Kind names a package ecosystem a stdio MCP server can come from.
type Kind string

// The ecosystems `bridge image build --from` understands.
const (
	KindNPX Kind = "npx" // an npm package, run with npx
	KindUVX Kind = "uvx" // a Python package, installed with uv's tool install
	KindGo  Kind = "go"  // a Go main package, built with go install
)

// A Spec is a parsed, pinned package spec: "npx:@scope/pkg@1.2.3",
// "uvx:pkg==1.2.3" or "go:example.com/mod/cmd/server@v1.2.3".
type Spec struct {
	Kind    Kind
	Package string // "@scope/pkg", "pkg", "example.com/mod/cmd/server"
	Version string // "1.2.3", "v1.2.3"
}

var (
	// npm package names: lowercase, URL-safe, optionally scoped
	// (https://docs.npmjs.com/cli/configuring-npm/package-json#name).
	npmName = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	// An exact semantic version; npm accepts no "v" here when pinned.
	semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	// Python distribution names (PEP 508) and exact public versions (PEP 440
	// without epochs or local labels).
	pyName    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	pyVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$`)
	// Go import paths of a main package: a domain-like first element, then
	// path elements; and a semantic version with "v", pseudo-versions
	// included.
	goPath    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)+(/[A-Za-z0-9._~+-]+)*$`)
	goVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	goMajor   = regexp.MustCompile(`^v[0-9]+$`)
	// A file name safe in a Dockerfile COPY line and a path.
	binaryName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// ErrSpec wraps every error of a spec that cannot be used.
var ErrSpec = errors.New("bad package spec")

// ParseSpec parses a package spec. The version must be exact: an image
// built twice from the same spec must hold the same server.
func ParseSpec(s string) (*Spec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("%w %q: want npx:PACKAGE@VERSION, uvx:PACKAGE==VERSION or go:MODULE/PATH@VERSION", ErrSpec, s)
	}
	switch Kind(kind) {
	case KindNPX:
		// The version follows the last "@"; a scope's "@" is the first byte.
		at := strings.LastIndexByte(rest, '@')
		if at <= 0 {
			return nil, fmt.Errorf("%w %q: no version; pin one, as in npx:%s@1.2.3", ErrSpec, s, rest)
		}
		name, version := rest[:at], rest[at+1:]
		if !npmName.MatchString(name) {
			return nil, fmt.Errorf("%w %q: %q is not an npm package name (lowercase, optionally @scope/name)", ErrSpec, s, name)
		}
		if !semver.MatchString(version) {
			return nil, fmt.Errorf("%w %q: the version %q must be exact (1.2.3), not a tag or a range, so that the image is reproducible", ErrSpec, s, version)
		}
		return &Spec{Kind: KindNPX, Package: name, Version: version}, nil
	case KindUVX:
		name, version, ok := strings.Cut(rest, "==")
		if !ok {
			return nil, fmt.Errorf("%w %q: no version; pin one, as in uvx:%s==1.2.3", ErrSpec, s, rest)
		}
		if !pyName.MatchString(name) {
			return nil, fmt.Errorf("%w %q: %q is not a Python package name (extras and URLs are not supported)", ErrSpec, s, name)
		}
		if !pyVersion.MatchString(version) {
			return nil, fmt.Errorf("%w %q: the version %q must be one exact release (1.2.3), not a range, so that the image is reproducible", ErrSpec, s, version)
		}
		return &Spec{Kind: KindUVX, Package: name, Version: version}, nil
	case KindGo:
		p, version, ok := strings.Cut(rest, "@")
		if !ok {
			return nil, fmt.Errorf("%w %q: no version; pin one, as in go:%s@v1.2.3", ErrSpec, s, rest)
		}
		if !goPath.MatchString(p) || strings.Contains(p, "//") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			return nil, fmt.Errorf("%w %q: %q is not a Go package path", ErrSpec, s, p)
		}
		if !goVersion.MatchString(version) {
			return nil, fmt.Errorf("%w %q: the version %q must be a semantic version tag or pseudo-version (v1.2.3), not a branch or \"latest\", so that the image is reproducible", ErrSpec, s, version)
		}
		sp := &Spec{Kind: KindGo, Package: p, Version: version}
		if sp.Binary() == "" {
			return nil, fmt.Errorf("%w %q: cannot tell the name of the binary go install would write", ErrSpec, s)
		}
		return sp, nil
	}
	return nil, fmt.Errorf("%w %q: unknown kind %q; want npx, uvx or go", ErrSpec, s, kind)
}

// String returns the spec as ParseSpec reads it.
func (s *Spec) String() string {
	return string(s.Kind) + ":" + s.PackageVersion()
}

// PackageVersion is the pinned package as its own installer writes it.
func (s *Spec) PackageVersion() string {
	switch s.Kind {
	case KindUVX:
		return s.Package + "==" + s.Version
	default:
		return s.Package + "@" + s.Version
	}
}

// Binary is the name of the program go install writes for a Go spec: the
// last path element, or the one before a major-version suffix ("/v2").
func (s *Spec) Binary() string {
	if s.Kind != KindGo {
		return ""
	}
	dir, base := path.Split(s.Package)
	if goMajor.MatchString(base) && dir != "" {
		base = path.Base(strings.TrimSuffix(dir, "/"))
	}
	if !binaryName.MatchString(base) {
		return ""
	}
	return base
}

// Command is the server command the image runs by default, as the bridge
// reads it after its own flags: "--", then the command and its arguments.
func (s *Spec) Command() []string {
	switch s.Kind {
	case KindNPX:
		// "--no": npx fails instead of downloading if the package is not in
		// the image's local project.
		return []string{"--", "npx", "--no", s.PackageVersion()}
	case KindUVX:
		// uv tool install puts the entry point named after the package on
		// PATH.
		return []string{"--", s.Package}
	default:
		return []string{"--", "/usr/local/bin/" + s.Binary()}
	}
}

// Name is a short name for the server, usable in image and repository
// names: lowercase letters, digits and single dashes.
func (s *Spec) Name() string {
	n := s.Package
	switch s.Kind {
	case KindNPX:
		n = strings.TrimPrefix(n, "@")
	case KindGo:
		n = s.Binary()
	}
	return sanitize(n)
}

// ImageTag is a tag for the version: Docker tags allow [A-Za-z0-9_.-].
func (s *Spec) ImageTag() string {
	var b strings.Builder
	for _, c := range s.Version {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	t := b.String()
	if len(t) > 100 {
		t = t[:100]
	}
	return t
}

// sanitize lowercases s and maps every run of other characters to one dash.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

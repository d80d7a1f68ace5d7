package sandbox

// The Docker launcher's options, their defaults and their validation.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/mcp-bridge/mcp-bridge/egress"
	"github.com/moby/moby/api/types/mount"
)

// PullPolicy says when the Docker launcher pulls its image.
type PullPolicy string

const (
	// PullNever never pulls: the image must already be on the Docker host.
	PullNever PullPolicy = "never"
	// PullMissing pulls the image only if the Docker host does not have it.
	PullMissing PullPolicy = "missing"
	// PullAlways pulls the image before every launch; a failed pull fails
	// the launch, even if an older copy is present.
	PullAlways PullPolicy = "always"
)

// ErrPullPolicy is what PullPolicy.UnmarshalText returns for text that is
// not a pull policy.
var ErrPullPolicy = errors.New("want never, missing or always")

// MarshalText writes the policy as it is read.
func (p PullPolicy) MarshalText() ([]byte, error) { return []byte(p), nil }

// UnmarshalText reads never, missing or always; other text is refused with
// ErrPullPolicy (the caller names the option and the text).
func (p *PullPolicy) UnmarshalText(text []byte) error {
	switch v := PullPolicy(text); v {
	case PullNever, PullMissing, PullAlways:
		*p = v
		return nil
	}
	return ErrPullPolicy
}

// An OptionError is an error that one field of DockerOptions causes or can
// fix: a value NewDocker refuses, or a launch that the pull policy keeps
// from pulling its image. Its message describes the option in words; a
// program that sets the field from a flag or a setting of its own finds the
// field with errors.As and names that flag (cmd/bridge: --sandbox-network
// for Network), so that this package never names a flag that may not exist.
type OptionError struct {
	Field string // the field of DockerOptions, e.g. "Network"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct,
// e.g. "sandbox.DockerOptions.Network".
func (e *OptionError) Option() string { return "sandbox.DockerOptions." + e.Field }

// Defaults of DockerOptions.
const (
	DefaultDockerPull       = PullMissing
	DefaultDockerNetwork    = "none"
	DefaultDockerUser       = "65534:65534" // nobody:nogroup on most distributions
	DefaultDockerMemory     = 512 << 20     // bytes
	DefaultDockerCPUs       = 1.0
	DefaultDockerPids       = 256
	DefaultDockerNoFile     = 1024
	DefaultDockerTmpfsBytes = 64 << 20
)

// minDockerMemory is the engine's own lower bound for a memory limit; asking
// for less fails every container create, so NewDocker refuses it at once.
const minDockerMemory = 6 << 20

// DockerOptions configure a Docker launcher. Every field's zero value means
// the documented default, which is the locked-down one: each loosening must
// be asked for explicitly.
type DockerOptions struct {
	// Image is the image each container runs, e.g. "ghcr.io/org/server:1.2".
	// Required.
	Image string
	// Command, if not empty, replaces the image's ENTRYPOINT and CMD:
	// Command[0] is the program and the rest its arguments, as with
	// "docker run --entrypoint Command[0] IMAGE Command[1:]...".
	// If empty, the image's own ENTRYPOINT and CMD run.
	Command []string
	// Pull is the pull policy. If empty, PullMissing.
	Pull PullPolicy
	// Network is the container's network mode ("bridge", "host", a network
	// name, "container:ID"). If empty, "none": the server has a loopback
	// interface only.
	Network string
	// Mounts are host directories or files to bind-mount, each as
	// "SRC:DST" or "SRC:DST:ro" (read-only) or "SRC:DST:rw" (writable).
	// SRC and DST must be absolute; DST may be neither "/" nor "/tmp".
	// A mount is read-only unless it ends in ":rw". If nil, none.
	Mounts []string
	// Env are "KEY=VALUE" variables added to the image's environment.
	// If nil, the image's environment only (never the bridge's).
	Env []string
	// Memory is the memory limit in bytes; swap is limited to the same
	// value (memory+swap = Memory), so the server cannot swap. If zero,
	// DefaultDockerMemory. The engine refuses less than 6 MiB.
	Memory int64
	// CPUs is how many CPUs' worth of time the server may use (CFS quota).
	// If zero, DefaultDockerCPUs.
	CPUs float64
	// Pids limits the processes and threads in the container (fork bombs).
	// If zero, DefaultDockerPids.
	Pids int64
	// User is the "UID:GID" (or name, if the image defines it) the server
	// runs as. If empty, DefaultDockerUser: never root unless asked.
	User string
	// NoFile is the soft and hard limit on open files (RLIMIT_NOFILE).
	// If zero, DefaultDockerNoFile.
	NoFile int64
	// TmpfsBytes is the size of the writable tmpfs at /tmp (mounted
	// noexec, nosuid, nodev; the rest of the filesystem is read-only).
	// It counts against Memory. If zero, DefaultDockerTmpfsBytes.
	TmpfsBytes int64
	// StopGrace is how long Stop waits after closing stdin before sending
	// SIGTERM to the container's init, how long it then waits before
	// SIGKILL, and how long it waits for the output to drain after that.
	// If zero, DefaultStopGrace.
	StopGrace time.Duration
	// Instance names this bridge in container labels. Two bridges running
	// at once against one engine must not share a name: RemoveLeftovers
	// removes every container of its own instance that it did not start.
	// If empty, a random name "bridge-<16 hex>" is used, so only the
	// dead-process rule of RemoveLeftovers applies.
	Instance string
	// StderrLineBytes bounds one logged stderr line, as for LocalOptions;
	// the rest of a longer line is discarded. If zero or negative,
	// DefaultStderrLineBytes.
	StderrLineBytes int
	// StderrRate bounds the stderr lines logged per session; see StderrRate.
	StderrRate StderrRate
	// Logger receives the servers' stderr lines and lifecycle events, with
	// the attributes session=<session ID> and container=<12 hex>, and the
	// image pull progress. If nil, slog.Default() at the time of NewDocker.
	Logger *slog.Logger
	// Egress is the allow-list of the server's network: each
	// entry "host[:port]" (egress.ParseRule: an exact name, "*.domain" for
	// its subdomains, or a literal IP; port 443 if none). If not empty, the
	// server's container sits on an internal network whose only way out is
	// a filtering proxy, and Network must be empty or "none". If empty,
	// Network alone decides.
	Egress []string
	// EgressProxyBinary is the path of a static Linux executable that runs
	// the egress proxy (egress.Main) when its first argument is
	// egress.ProxyArg: the bridge itself. Required with Egress.
	EgressProxyBinary string
	// OnEgress receives each decision of the egress proxy with the session
	// ID of the container it concerns ("" if none known), from one
	// goroutine; it must not block for long. If nil, decisions are logged.
	OnEgress func(sessionID string, e egress.Event)
	// ImageDigest, if not empty, is the digest ("sha256:" and 64 hex
	// digits: the image ID, as ImageDigest reports it) the image must
	// have: a launch finding another under Image is refused, and the
	// container is created from the digest itself, so that a tag moved
	// after the check cannot slip in. If empty, whatever Image names runs.
	ImageDigest string
	// Runtime is the container runtime (Docker's --runtime, e.g. "runsc"
	// for gVisor); NewDocker refuses one the engine does not list. If
	// empty, the engine's default.
	Runtime string
	// Host is the engine's address, e.g. "unix:///var/run/docker.sock" or
	// "tcp://host:2376". If empty, the environment decides as for the
	// docker CLI (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH,
	// DOCKER_API_VERSION), else the local default socket.
	Host string
}

// dockerDefaults validates opts and returns a copy with the defaults filled in.
func dockerDefaults(opts *DockerOptions) (DockerOptions, []mount.Mount, error) {
	var o DockerOptions
	if opts != nil {
		o = *opts
		o.Command = slices.Clone(opts.Command)
		o.Mounts = slices.Clone(opts.Mounts)
		o.Env = slices.Clone(opts.Env)
		o.Egress = slices.Clone(opts.Egress)
	}
	bad := func(field, format string, args ...any) (DockerOptions, []mount.Mount, error) {
		return DockerOptions{}, nil, fmt.Errorf("docker sandbox: %w", &OptionError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	if o.Image == "" {
		return bad("Image", "no image given")
	}
	if _, err := reference.ParseAnyReference(o.Image); err != nil {
		return bad("Image", "image %q: %v", o.Image, err)
	}
	if o.ImageDigest != "" && (len(o.ImageDigest) != len("sha256:")+64 || !strings.HasPrefix(o.ImageDigest, "sha256:") ||
		strings.Trim(o.ImageDigest[7:], "0123456789abcdef") != "") {
		return bad("ImageDigest", "image digest %q: want sha256: and 64 hex digits", o.ImageDigest)
	}
	if len(o.Command) > 0 && o.Command[0] == "" {
		return bad("Command", "the command's program is empty")
	}
	switch o.Pull {
	case "":
		o.Pull = DefaultDockerPull
	case PullNever, PullMissing, PullAlways:
	default:
		return bad("Pull", "pull policy %q: want never, missing or always", o.Pull)
	}
	if len(o.Egress) > 0 {
		switch err := CheckEgress(o.Egress, o.Network); {
		case errors.Is(err, ErrEgressNetwork):
			return bad("Network", "network %q and an egress allow-list exclude each other: the allow-list puts the server on an internal network of its own", o.Network)
		case err != nil:
			return bad("Egress", "%v", err)
		}
		if o.EgressProxyBinary == "" {
			return bad("EgressProxyBinary", "an egress allow-list needs the proxy's executable")
		}
	}
	if o.Network == "" {
		o.Network = DefaultDockerNetwork
	}
	for _, e := range o.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return bad("Env", "environment entry %q: want KEY=VALUE", e)
		}
	}
	switch {
	case o.Memory == 0:
		o.Memory = DefaultDockerMemory
	case o.Memory < minDockerMemory:
		return bad("Memory", "memory limit %d bytes: the Docker Engine needs at least %d (6 MiB)", o.Memory, minDockerMemory)
	}
	switch {
	case o.CPUs == 0:
		o.CPUs = DefaultDockerCPUs
	case o.CPUs < 0.01 || math.IsNaN(o.CPUs) || math.IsInf(o.CPUs, 0):
		return bad("CPUs", "CPUs %g: want at least 0.01", o.CPUs)
	}
	switch {
	case o.Pids == 0:
		o.Pids = DefaultDockerPids
	case o.Pids < 0:
		return bad("Pids", "pids limit %d: want a positive number", o.Pids)
	}
	if o.User == "" {
		o.User = DefaultDockerUser
	}
	switch {
	case o.NoFile == 0:
		o.NoFile = DefaultDockerNoFile
	case o.NoFile < 0:
		return bad("NoFile", "open files limit %d: want a positive number", o.NoFile)
	}
	switch {
	case o.TmpfsBytes == 0:
		o.TmpfsBytes = DefaultDockerTmpfsBytes
	case o.TmpfsBytes < 0:
		return bad("TmpfsBytes", "/tmp size %d: want a positive number of bytes", o.TmpfsBytes)
	}
	if o.StderrLineBytes <= 0 {
		o.StderrLineBytes = DefaultStderrLineBytes
	}
	switch {
	case o.StopGrace == 0:
		o.StopGrace = DefaultStopGrace
	case o.StopGrace < 0:
		return bad("StopGrace", "stop grace %v: want a positive duration", o.StopGrace)
	}
	if o.Instance == "" {
		o.Instance = "bridge-" + randomHex(8)
	}
	mounts := make([]mount.Mount, 0, len(o.Mounts))
	seen := map[string]bool{}
	for _, s := range o.Mounts {
		m, err := parseMount(s)
		if err != nil {
			return bad("Mounts", "%v", err)
		}
		if seen[m.Target] {
			return bad("Mounts", "mount %q: %s is already a mount target", s, m.Target)
		}
		seen[m.Target] = true
		mounts = append(mounts, m)
	}
	return o, mounts, nil
}

// parseMount parses "SRC:DST[:ro|:rw]" into a bind mount, read-only unless
// ":rw" is given.
func parseMount(s string) (mount.Mount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return mount.Mount{}, fmt.Errorf("mount %q: want SRC:DST, SRC:DST:ro or SRC:DST:rw", s)
	}
	src, dst := parts[0], parts[1]
	readOnly := true
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
		case "rw":
			readOnly = false
		default:
			return mount.Mount{}, fmt.Errorf("mount %q: mode %q: want ro or rw", s, parts[2])
		}
	}
	if !path.IsAbs(src) {
		return mount.Mount{}, fmt.Errorf("mount %q: source %q must be an absolute path on the Docker host", s, src)
	}
	if !path.IsAbs(dst) {
		return mount.Mount{}, fmt.Errorf("mount %q: target %q must be an absolute path in the container", s, dst)
	}
	dst = path.Clean(dst)
	switch dst {
	case "/":
		return mount.Mount{}, fmt.Errorf("mount %q: cannot mount over the container's root", s)
	case "/tmp":
		return mount.Mount{}, fmt.Errorf("mount %q: /tmp is the container's tmpfs; mount elsewhere", s)
	}
	return mount.Mount{Type: mount.TypeBind, Source: path.Clean(src), Target: dst, ReadOnly: readOnly}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}

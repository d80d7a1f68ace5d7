package endpoint

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/internal/units"
	"github.com/mcp-bridge/mcp-bridge/metrics"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
	"github.com/mcp-bridge/mcp-bridge/tracing"
)

// A Sandbox is where a server's children run.
type Sandbox string

const (
	// SandboxLocal runs each child as a local process (ServerOptions.Local).
	SandboxLocal Sandbox = "local"
	// SandboxDocker runs each child in a container (ServerOptions.Docker).
	SandboxDocker Sandbox = "docker"
)

// ErrSandbox is what Sandbox.UnmarshalText returns for another name.
var ErrSandbox = errors.New("want local or docker")

// MarshalText writes the sandbox's name.
func (s Sandbox) MarshalText() ([]byte, error) { return []byte(s), nil }

// UnmarshalText reads local or docker; other text is ErrSandbox.
func (s *Sandbox) UnmarshalText(text []byte) error {
	switch v := Sandbox(text); v {
	case SandboxLocal, SandboxDocker:
		*s = v
		return nil
	}
	return ErrSandbox
}

// A UserVar is one per-user variable of a server: its child's variable
// Name holds the value of the secret Secret of the principal it serves
// (see ServerOptions.UserEnv).
type UserVar struct{ Name, Secret string }

// ServerOptions are one configured server's options: what a server of a
// configuration may have of its own. Build reads them; the zero value of
// each field means the documented default of the package it configures.
type ServerOptions struct {
	// Name is the server's name in a configuration of several: its
	// metrics and spans carry it (metrics.DefaultServer when empty), its
	// audit lines and logs name it, and an egress refusal's hint names
	// its allowHosts key instead of --sandbox-egress. Empty: the
	// one-command form.
	Name string

	// Sandbox chooses where children run; empty means SandboxLocal.
	Sandbox Sandbox
	// Local are the local launcher's options (Sandbox local). Build sets
	// Logger, and Supervisor unless Unsupervised: the running executable
	// with sandbox.SuperviseArg, which the program's main must handle.
	Local sandbox.LocalOptions
	// Unsupervised runs local children without the supervisor.
	Unsupervised bool
	// Remote, when set, makes the server a remote MCP server reached with
	// connect's launcher (one forwarder per child); Sandbox, Local and
	// Docker are then not used.
	Remote *connect.Options
	// Docker are the Docker launcher's options (Sandbox docker). Build
	// sets Logger, OnEgress, ImageDigest (from Lock) and, with Egress,
	// EgressProxyBinary (the running executable, which must handle
	// egress.ProxyArg) when empty.
	Docker sandbox.DockerOptions
	// Warm is the number of spare children kept started (sandbox.Spares).
	Warm int
	// StopGrace bounds each step of a child's stop (sandbox.StopBudget of
	// it bounds the spares' and the launcher's close).
	StopGrace time.Duration

	// UserEnv are the server's per-user variables: each child gets its
	// principal's values, read at its launch. With authentication, from
	// SecretsDir/PRINCIPAL/SECRET (a regular file, mode 0600, owned by
	// the bridge's user); without, from the variable BRIDGE_SECRET_<SECRET>
	// of the bridge's environment. The 2026-07-28 pool must then run
	// legacy children (ChildEra), which it keys by principal.
	UserEnv    []UserVar
	SecretsDir string

	// The sessions of revision 2025 clients (session.Options of the same
	// names).
	SessionIdleTimeout time.Duration
	MaxSessions        int
	// MaxMessageBytes bounds a message either way, in both eras.
	MaxMessageBytes int
	LogMaxEvents    int
	LogMaxBytes     int64

	// Limits hold for both eras: a session's requests and a pool child's
	// (request timeout, initialize timeout, requests in flight, bytes
	// queued for stdin, SSE keep-alive; Inflight is set by Build, from
	// Shared.Inflight).
	Limits peer.Limits

	// The 2026-07-28 pool (pool.Options of the same meaning).
	ChildEra            pool.Era
	PoolMin, PoolMax    int
	PoolMaxPerPrincipal int
	PoolEvictIdle       time.Duration // pool.Options.EvictIdle: negative stops at once
	RequestStateTTL     time.Duration

	// Handler are the HTTP handler's options. Build sets Path, Auth,
	// Forward, Metrics, TraceContext, SSEKeepAlive (Limits.KeepAlive),
	// Stateless and Logger.
	Handler bridge.Options

	// The guards at peer's interception point. Policy: nil, none. Lock:
	// nil, nothing pinned (LockFile names it in messages). Inspection
	// applies to every item listed, pinned or not.
	Policy         *policy.Policy
	Lock           *pin.Lock
	LockFile       string
	OnPinViolation pin.Action
	Inspection     pin.Inspection
	// AuditLog is the audit log's path ("-": standard output); empty,
	// none. When it is Shared.AuditPath, the server writes to the shared
	// log, its name in each line.
	AuditLog  string
	AuditArgs bool
	// LogMessages logs every message of each connection (msglog).
	LogMessages bool
}

// Shared is what the servers of one process share; Build reads it. Its
// zero value means: no authentication, no affinity, metrics and tracing
// off, no governor, a log budget of the server's own.
type Shared struct {
	// Auth authenticates requests (bridge.Options.Auth); nil: none.
	Auth *auth.Authenticator
	// Authenticates: requests carry a principal (static tokens or
	// OAuth). The guards then ask who a message's caller is, the pool
	// keeps results and children per principal.
	Authenticates bool
	// StaticTokens are the static bearer tokens: a server with UserEnv
	// and a SecretsDir logs the directory of each one's credentials.
	StaticTokens []string
	// Affinity, when set, names this instance in session IDs and in the
	// pool's requestStates, signed with AffinitySecret; Forward reaches
	// the instance holding a parked call (bridge.Options.Forward).
	Affinity       *affinity.Instance
	AffinitySecret []byte
	Forward        func(w http.ResponseWriter, r *http.Request, instance string)
	// Metrics collects every server's metrics (each its own
	// metrics.Server); nil: metrics off. MetricsHandler is what the
	// handler serves at /metrics (nil: not served there).
	Metrics        *metrics.Metrics
	MetricsHandler http.Handler
	// Tracer makes every server's spans (tracing.New); nil: tracing off.
	Tracer *sdktrace.TracerProvider
	// LogBudget bounds the sessions' event logs of every server together;
	// nil: each server has one of session.DefaultLogMaxTotalBytes.
	LogBudget *session.LogBudget
	// Inflight makes a source of the governor's count (procs.Sources):
	// Build takes one for the sessions and one for the pool of each
	// server. Nil: no governor.
	Inflight func() func(int)
	// Audit is an audit log the servers whose AuditLog is AuditPath write
	// to (audit.Log.ForServer); the caller closes it after the servers.
	Audit     *audit.Log
	AuditPath string
	// Scopes advertises the scopes of a server's policy in the protected
	// resource metadata (auth.Authenticator.AdvertiseScopes); nil: not.
	Scopes func(scopes ...string)
	// Logger receives the servers' logs; nil means slog.Default().
	Logger *slog.Logger
}

func (sh *Shared) logger() *slog.Logger {
	if sh.Logger == nil {
		return slog.Default()
	}
	return sh.Logger
}

func (sh *Shared) inflight() func(int) {
	if sh.Inflight == nil {
		return nil
	}
	return sh.Inflight()
}

// HandlerOptions are o with what the process shares set (Auth, Forward,
// Metrics, TraceContext, Logger): those of the handler of a set's own
// answers (SetOptions.Edge), and of each server's.
func (sh *Shared) HandlerOptions(o bridge.Options) *bridge.Options {
	o.Auth, o.Forward, o.Metrics = sh.Auth, sh.Forward, sh.MetricsHandler
	if sh.Tracer != nil {
		o.TraceContext = tracing.HeaderToMeta
	}
	if o.Logger == nil {
		o.Logger = sh.logger()
	}
	return &o
}

// Forget drops the gauges of a server that left the configuration
// (SetOptions.Forget).
func (sh *Shared) Forget(name string) {
	if sh.Metrics != nil {
		sh.Metrics.Server(name).Drop()
	}
}

// An OptionError is an error that one field of ServerOptions causes or
// can fix. Its message describes the option in words; cmd/bridge names its
// flag or key (errors.As).
type OptionError struct {
	Field string // the field of ServerOptions, e.g. "AuditLog"
	Err   error
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct,
// e.g. "endpoint.ServerOptions.AuditLog".
func (e *OptionError) Option() string { return "endpoint.ServerOptions." + e.Field }

// A Loosening is a value of one of a server's options that loosens a safe
// default, with its risk: the command logs each at start, so that a
// loosening is never on unnoticed.
type Loosening struct {
	Option string // as OptionError.Option, e.g. "sandbox.DockerOptions.Network"
	Value  string // the value, or a name only where the value may be a secret
	Risk   string // what it allows, in words
}

// Loosenings are the options of o that loosen a safe default, in the
// order of ServerOptions (README's tables state each risk).
func (o *ServerOptions) Loosenings() []Loosening {
	var out []Loosening
	add := func(option, value, risk string) { out = append(out, Loosening{option, value, risk}) }
	if o.Inspection.AllowHiddenUnicode {
		add("pin.Inspection.AllowHiddenUnicode", "true", "tool descriptions may hide instructions for the model in characters a reviewer does not see")
	}
	if o.Inspection.MaxDescriptionBytes < 0 {
		add("pin.Inspection.MaxDescriptionBytes", strconv.Itoa(o.Inspection.MaxDescriptionBytes), "tool descriptions of any length: room for instructions nobody reads")
	}
	if o.AuditArgs {
		add("endpoint.ServerOptions.AuditArgs", "true", "the audit log holds the arguments of every request, which may carry what users typed")
	}
	if o.Sandbox != SandboxDocker {
		return out
	}
	d := &o.Docker
	if d.Network != "" && d.Network != sandbox.DefaultDockerNetwork {
		add("sandbox.DockerOptions.Network", d.Network, "the server can reach your network and the internet: exfiltration, lateral movement")
	}
	for _, h := range d.Egress {
		add("sandbox.DockerOptions.Egress", h, "the server can send what it reads to that host")
	}
	for _, m := range d.Mounts {
		if strings.HasSuffix(m, ":rw") {
			add("sandbox.DockerOptions.Mounts", m, "the server reads and writes those host files")
		} else {
			add("sandbox.DockerOptions.Mounts", m, "the server reads those host files")
		}
	}
	for _, e := range d.Env {
		name, _, _ := strings.Cut(e, "=")
		// The value may be a secret: the log names the variable only.
		add("sandbox.DockerOptions.Env", name, "the server can read every value given")
	}
	if uid, _, _ := strings.Cut(d.User, ":"); uid == "0" || uid == "root" {
		add("sandbox.DockerOptions.User", d.User, "the server runs as root: an escape from the container lands as root")
	}
	if d.Memory > sandbox.DefaultDockerMemory {
		size := units.Bytes(d.Memory).String()
		add("sandbox.DockerOptions.Memory", size, "a server can take "+size+" of host memory")
	}
	if d.CPUs > sandbox.DefaultDockerCPUs {
		add("sandbox.DockerOptions.CPUs", strconv.FormatFloat(d.CPUs, 'g', -1, 64), "a server can take that much CPU time")
	}
	if d.Pids > sandbox.DefaultDockerPids {
		add("sandbox.DockerOptions.Pids", strconv.FormatInt(d.Pids, 10), "more processes on the host")
	}
	return out
}

// ErrAuditArgsWithoutLog is the OptionError of AuditLog when AuditArgs is
// on without it: there is no log to write the arguments to.
var ErrAuditArgsWithoutLog = errors.New("AuditArgs is on without an AuditLog: give the server an audit log, or turn AuditArgs off")

// Validate refuses what no server can be built from: it asks each
// package's options of o (session.Options, pool.Options, peer.Limits,
// bridge.Options) to validate themselves, whose errors are those
// packages' OptionErrors, and checks its own fields (a negative Warm,
// AuditArgs without AuditLog). Zero values mean the defaults, and the
// negative values a field documents are valid.
func (o *ServerOptions) Validate() error {
	if o.Warm < 0 {
		return &OptionError{Field: "Warm", Err: fmt.Errorf("%d: want 0 or more", o.Warm)}
	}
	so := session.Options{
		IdleTimeout:       o.SessionIdleTimeout,
		MaxSessions:       o.MaxSessions,
		MaxMessageBytes:   o.MaxMessageBytes,
		LogMaxEvents:      o.LogMaxEvents,
		LogMaxBytes:       o.LogMaxBytes,
		InitializeTimeout: o.Limits.InitializeTimeout,
		RequestTimeout:    o.Limits.RequestTimeout,
		MaxRequests:       o.Limits.MaxRequests,
		MaxQueuedBytes:    o.Limits.MaxQueuedBytes,
	}
	if err := so.Validate(); err != nil {
		return err
	}
	po := pool.Options{
		Era:             o.ChildEra,
		Min:             o.PoolMin,
		Max:             o.PoolMax,
		MaxPerPrincipal: o.PoolMaxPerPrincipal,
		EvictIdle:       o.PoolEvictIdle,
		StateTTL:        o.RequestStateTTL,
		Limits:          o.Limits,
	}
	if err := po.Validate(); err != nil {
		return err
	}
	if err := o.Handler.Validate(); err != nil {
		return err
	}
	if o.AuditArgs && o.AuditLog == "" {
		return &OptionError{Field: "AuditLog", Err: ErrAuditArgsWithoutLog}
	}
	return nil
}

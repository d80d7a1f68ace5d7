package main

import (
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/internal/flagx"
	"github.com/mcp-bridge/mcp-bridge/internal/logx"
	"github.com/mcp-bridge/mcp-bridge/internal/units"
	"github.com/mcp-bridge/mcp-bridge/msglog"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// config is the bridge's configuration. It starts from defaultConfig (the
// packages' exported defaults), envconfig fills it from BRIDGE_* variables
// (the envconfig tag names each one), then flags of the same name in kebab
// case override it: flag --session-idle-timeout is variable
// BRIDGE_SESSION_IDLE_TIMEOUT. The tags hold whole names and Process gets no
// prefix because envconfig falls back to a tag without its prefix: with
// prefix BRIDGE and tag PATH, it would read the shell's $PATH. No tag has a
// default: a default lives once, in the package that uses it.
//
// Adding a flag: a field here (or in configfile.ServerOptions, with its
// key, if a server of the config file may set it for itself), a line in
// newFlagSet (its usage wrapped in its --help group, help.go:
// gEdge.In("...")), and a line in defaultConfig if its zero value is not
// its default.
type config struct {
	// The options a server of the config file may set for itself (its
	// keys), which the flags of the same names set for all.
	configfile.ServerOptions

	Listen         string   `envconfig:"BRIDGE_LISTEN"`
	Path           string   `envconfig:"BRIDGE_PATH"`
	AllowedOrigins []string `envconfig:"BRIDGE_ALLOWED_ORIGINS"`
	AllowedHosts   []string `envconfig:"BRIDGE_ALLOWED_HOSTS"`
	AuthTokenFile  string   `envconfig:"BRIDGE_AUTH_TOKEN_FILE"`
	// AuthTokens has no flag on purpose: a token on the command line is
	// visible to every user of the host in the process list.
	AuthTokens      []string       `envconfig:"BRIDGE_AUTH_TOKENS"`
	InsecureNoAuth  bool           `envconfig:"BRIDGE_INSECURE_NO_AUTH"`
	AcceptSessionID bool           `envconfig:"BRIDGE_ACCEPT_SESSION_ID"`
	TLSCert         string         `envconfig:"BRIDGE_TLS_CERT"`
	TLSKey          string         `envconfig:"BRIDGE_TLS_KEY"`
	TLSClientCA     string         `envconfig:"BRIDGE_TLS_CLIENT_CA"`
	LogFormat       logx.Format    `envconfig:"BRIDGE_LOG_FORMAT"`
	LogLevel        string         `envconfig:"BRIDGE_LOG_LEVEL"`
	LogMessages     bool           `envconfig:"BRIDGE_LOG_MESSAGES"`
	ShutdownGrace   time.Duration  `envconfig:"BRIDGE_SHUTDOWN_GRACE"`
	SSEKeepAlive    units.Interval `envconfig:"BRIDGE_SSE_KEEPALIVE"`
	// Zero: the sandbox package's defaults.
	StderrLinesPerSecond float64  `envconfig:"BRIDGE_STDERR_LINES_PER_SECOND"`
	StderrBurst          int      `envconfig:"BRIDGE_STDERR_BURST"`
	Env                  []string `envconfig:"BRIDGE_ENV"`
	EnvInherit           bool     `envconfig:"BRIDGE_ENV_INHERIT"`
	LocalUnsupervised    bool     `envconfig:"BRIDGE_LOCAL_UNSUPERVISED"`

	BodyReadTimeout         units.Duration `envconfig:"BRIDGE_BODY_READ_TIMEOUT"`
	WriteTimeout            units.Duration `envconfig:"BRIDGE_WRITE_TIMEOUT"`
	HTTPIdleTimeout         units.Duration `envconfig:"BRIDGE_HTTP_IDLE_TIMEOUT"`
	MaxConnections          int            `envconfig:"BRIDGE_MAX_CONNECTIONS"`
	MaxConnectionsPerClient int            `envconfig:"BRIDGE_MAX_CONNECTIONS_PER_CLIENT"`
	MaxBodyBytesInFlight    units.Bytes    `envconfig:"BRIDGE_MAX_BODY_BYTES_IN_FLIGHT"`

	// Zero means session.DefaultLogMaxTotalBytes (defaultConfig).
	LogMaxTotalBytes units.Bytes `envconfig:"BRIDGE_LOG_MAX_TOTAL_BYTES"`

	SecretsDir string `envconfig:"BRIDGE_SECRETS_DIR"`
	Instance   string `envconfig:"BRIDGE_INSTANCE"`

	NoMetrics           bool        `envconfig:"BRIDGE_NO_METRICS"`
	MetricsListen       string      `envconfig:"BRIDGE_METRICS_LISTEN"`
	OTLPEndpoint        string      `envconfig:"BRIDGE_OTLP_ENDPOINT"`
	MaxDescriptionBytes units.Bytes `envconfig:"BRIDGE_MAX_DESCRIPTION_BYTES"`
	AllowHiddenUnicode  bool        `envconfig:"BRIDGE_ALLOW_HIDDEN_UNICODE"`
	AuditArgs           bool        `envconfig:"BRIDGE_AUDIT_ARGS"`

	Config             string `envconfig:"BRIDGE_CONFIG"`
	NoLegacySSE        bool   `envconfig:"BRIDGE_NO_LEGACY_SSE"`
	AggregateSeparator string `envconfig:"BRIDGE_AGGREGATE_SEPARATOR"`
	NoAggregate        bool   `envconfig:"BRIDGE_NO_AGGREGATE"`

	AffinityAddr       string `envconfig:"BRIDGE_AFFINITY_ADDR"`
	AffinitySecretFile string `envconfig:"BRIDGE_AFFINITY_SECRET_FILE"`
	// AffinitySecret has no flag, like AuthTokens.
	AffinitySecret string `envconfig:"BRIDGE_AFFINITY_SECRET"`

	OAuthIssuer           string   `envconfig:"BRIDGE_OAUTH_ISSUER"`
	ResourceURL           string   `envconfig:"BRIDGE_RESOURCE_URL"`
	OAuthScopes           []string `envconfig:"BRIDGE_OAUTH_SCOPES"`
	OAuthTokenTypes       []string `envconfig:"BRIDGE_OAUTH_TOKEN_TYPES"`
	OAuthIntrospectionURL string   `envconfig:"BRIDGE_OAUTH_INTROSPECTION_URL"`
	OAuthClientID         string   `envconfig:"BRIDGE_OAUTH_CLIENT_ID"`
	OAuthClientSecretFile string   `envconfig:"BRIDGE_OAUTH_CLIENT_SECRET_FILE"`
	// OAuthClientSecret has no flag, like AuthTokens.
	OAuthClientSecret string `envconfig:"BRIDGE_OAUTH_CLIENT_SECRET"`

	// Derived.
	given          []string // the flags (--name) and variables (BRIDGE_NAME) set, flags last
	command        []string
	tokens         []string
	logLevel       slog.Level
	memory         int64
	affinitySecret []byte
	env            []string // Env resolved: NAME=VALUE entries
	policy         *policy.Policy
	lock           *pin.Lock
	file           *configfile.File // --config, read

	userVars []endpoint.UserVar // UserEnv, parsed

	// Of one server of the config file (serverConfig).
	serverName string
	serverEnv  []string         // the server's "env", NAME=VALUE
	serverDir  string           // its "cwd"
	remote     *connect.Options // its "url", "type", "headers" and "headerFiles" (a remote server)
	// guardFiles is a digest of the policy and pin files the server names
	// itself: a reload replaces the server when they changed.
	guardFiles string
}

// Defaults of what cmd/bridge itself uses; the others are the packages'.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultLogFormat     = logx.Text
	DefaultLogLevel      = "info"
	DefaultShutdownGrace = 10 * time.Second
	DefaultSandbox       = endpoint.SandboxLocal
)

// defaultConfig is the configuration before the environment and the flags.
func defaultConfig() *config {
	return &config{
		ServerOptions: configfile.ServerOptions{
			SessionIdleTimeout: units.Duration(session.DefaultIdleTimeout),
			MaxSessions:        session.DefaultMaxSessions,
			MaxMessageBytes:    peer.DefaultMaxMessageBytes,
			StopGrace:          sandbox.DefaultStopGrace,
			SSERetry:           bridge.DefaultSSERetry,
			LogMaxEvents:       session.DefaultLogMaxEvents,
			LogMaxBytes:        session.DefaultLogMaxBytes,
			StderrLineBytes:    sandbox.DefaultStderrLineBytes,
			Sandbox:            DefaultSandbox,
			Pull:               sandbox.DefaultDockerPull,
			SandboxNetwork:     sandbox.DefaultDockerNetwork,
			SandboxMemory:      sandbox.DefaultDockerMemory,
			SandboxCPUs:        sandbox.DefaultDockerCPUs,
			SandboxPids:        sandbox.DefaultDockerPids,
			SandboxUser:        sandbox.DefaultDockerUser,
			ChildEra:           pool.EraAuto,
			PoolMin:            pool.DefaultMin,
			PoolMax:            pool.DefaultMax,
			PoolEvictIdle:      pool.DefaultEvictIdle,
			RequestStateTTL:    pool.DefaultStateTTL,
			OnPinViolation:     pin.Drop,
		},
		Listen:             DefaultListen,
		Path:               bridge.DefaultPath,
		LogFormat:          DefaultLogFormat,
		LogLevel:           DefaultLogLevel,
		ShutdownGrace:      DefaultShutdownGrace,
		SSEKeepAlive:       units.Interval(bridge.DefaultSSEKeepAlive),
		LogMaxTotalBytes:   session.DefaultLogMaxTotalBytes,
		AggregateSeparator: aggregate.DefaultSeparator,

		BodyReadTimeout:         units.Duration(bridge.DefaultBodyReadTimeout),
		WriteTimeout:            units.Duration(bridge.DefaultWriteTimeout),
		HTTPIdleTimeout:         units.Duration(bridge.DefaultIdleTimeout),
		MaxConnections:          bridge.DefaultMaxConnections,
		MaxConnectionsPerClient: bridge.DefaultMaxConnectionsPerClient,
		MaxBodyBytesInFlight:    units.Bytes(bridge.DefaultMaxBodyBytesInFlight),

		MaxDescriptionBytes: pin.DefaultMaxDescriptionBytes,
	}
}

// optionFlags maps each library option that a flag sets to that flag, so
// that a message about an option (a library error that names its option, a
// warning) names what the user types. TestOptionFlagsExist keeps it true.
var optionFlags = map[string]string{
	"bridge.Options.Path":                   "path",
	"bridge.Options.AllowedOrigins":         "allowed-origins",
	"bridge.Options.AllowedHosts":           "allowed-hosts",
	"bridge.Options.AuthTokens":             "auth-token-file",
	"bridge.Options.JSONResponse":           "json-response",
	"bridge.Options.AcceptSessionID":        "accept-session-id",
	"bridge.Options.SSEPollAfter":           "sse-poll-after",
	"bridge.Options.SSERetry":               "sse-retry",
	"bridge.Options.SSEKeepAlive":           "sse-keepalive",
	"session.Options.IdleTimeout":           "session-idle-timeout",
	"session.Options.MaxSessions":           "max-sessions",
	"session.Options.MaxMessageBytes":       "max-message-bytes",
	"session.Options.LogMaxEvents":          "log-max-events",
	"session.Options.LogMaxBytes":           "log-max-bytes",
	"session.Options.LogMaxTotalBytes":      "log-max-total-bytes",
	"sandbox.LocalOptions.StopGrace":        "stop-grace",
	"sandbox.LocalOptions.StderrLineBytes":  "stderr-line-bytes",
	"sandbox.DockerOptions.Image":           "image",
	"sandbox.DockerOptions.Pull":            "pull",
	"sandbox.DockerOptions.Network":         "sandbox-network",
	"sandbox.DockerOptions.Mounts":          "sandbox-mount",
	"sandbox.DockerOptions.Env":             "sandbox-env",
	"sandbox.DockerOptions.Memory":          "sandbox-memory",
	"sandbox.DockerOptions.CPUs":            "sandbox-cpus",
	"sandbox.DockerOptions.Pids":            "sandbox-pids",
	"sandbox.DockerOptions.User":            "sandbox-user",
	"sandbox.DockerOptions.StderrLineBytes": "stderr-line-bytes",
	"sandbox.DockerOptions.StopGrace":       "stop-grace",
	"sandbox.DockerOptions.Instance":        "instance",
	"sandbox.DockerOptions.Egress":          "sandbox-egress",
	"sandbox.DockerOptions.Runtime":         "sandbox-runtime",
	"sandbox.DockerOptions.ImageDigest":     "pin-file",
	"affinity.Options.Self":                 "affinity-addr",
	"affinity.Options.Secret":               "affinity-secret-file",
	"auth.Options.Issuer":                   "oauth-issuer",
	"auth.Options.ResourceURL":              "resource-url",
	"auth.Options.Scopes":                   "oauth-scopes",
	"auth.Options.IntrospectionURL":         "oauth-introspection-url",
	"auth.Options.TokenTypes":               "oauth-token-types",
	"auth.Options.ClientID":                 "oauth-client-id",
	"pin.Inspection.AllowHiddenUnicode":     "allow-hidden-unicode",
	"pin.Inspection.MaxDescriptionBytes":    "max-description-bytes",
	"endpoint.ServerOptions.AuditArgs":      "audit-args",
	"endpoint.ServerOptions.AuditLog":       "audit-log",
	"endpoint.ServerOptions.Warm":           "warm",
	"peer.Limits.MaxRequests":               "max-requests-per-session",
	"peer.Limits.MaxQueuedBytes":            "max-queued-bytes",
	"pool.Options.Min":                      "pool-min",
	"pool.Options.Max":                      "pool-max",
	"pool.Options.StateTTL":                 "request-state-ttl",
}

// explain names the flag in a library error about one option. A library
// error names its option with an Option method ("sandbox.DockerOptions.User").
func explain(err error) error {
	var oe interface {
		error
		Option() string
	}
	if errors.As(err, &oe) {
		if f, ok := optionFlags[oe.Option()]; ok {
			return fmt.Errorf("--%s: %w", f, err)
		}
	}
	return err
}

const envPrefix = "BRIDGE"

// envName is the variable of a flag: listen → BRIDGE_LISTEN.
func envName(flagName string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet binds every flag to c. Defaults shown are those in effect
// (built-in, or from the environment). The flag package prints nothing:
// parseFlags turns its errors into one line, and --help goes to stdout.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.Listen, "listen", c.Listen, gEdge.In("`address` to listen on; a non-loopback address requires auth tokens, --oauth-issuer, --tls-client-ca or --insecure-no-auth"))
	fs.StringVar(&c.Path, "path", c.Path, gEdge.In("HTTP `path` of the MCP endpoint"))
	fs.TextVar(&c.SessionIdleTimeout, "session-idle-timeout", c.SessionIdleTimeout, gSessions.In("end a session after this long without a client message, whatever streams are open (never or negative: never)"))
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, gSessions.In("most sessions alive at once; beyond it initialize gets 503"))
	fs.TextVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, gEdge.In("largest message in `bytes`, either way: a larger POST gets 413, a larger answer from the server fails its request with a JSON-RPC error (the session and server go on)"))
	fs.Var(&flagx.List{Dst: &c.AllowedOrigins}, "allowed-origins", gEdge.In("browser `origins` allowed besides loopback ones (comma-separated or repeated; * allows any); a request without Origin is not from a browser and is allowed"))
	fs.Var(&flagx.List{Dst: &c.AllowedHosts}, "allowed-hosts", gEdge.In("Host header `names` accepted (comma-separated or repeated; * allows any); default: the loopback names when --listen is loopback, else any"))
	fs.StringVar(&c.AuthTokenFile, "auth-token-file", c.AuthTokenFile, gAuth.In("`file` of accepted bearer tokens, one per line (BRIDGE_AUTH_TOKENS also takes them, comma-separated)"))
	fs.BoolVar(&c.InsecureNoAuth, "insecure-no-auth", c.InsecureNoAuth, gAuth.In("allow a non-loopback --listen address without auth tokens (anyone who reaches it runs your server)"))
	fs.BoolVar(&c.AcceptSessionID, "accept-session-id", c.AcceptSessionID, gSessions.In("start a session under the Mcp-Session-Id an initialize request carries (a platform's, e.g. Bedrock AgentCore Runtime): the client then chooses its session ID, which is only as unguessable as it makes it"))
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, gEdge.In("serve HTTPS with this PEM certificate `file` (chain included); reloaded with --tls-key on SIGHUP"))
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, gEdge.In("PEM private key `file` of --tls-cert"))
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, gAuth.In("require client certificates signed by a CA in this PEM `file` (mutual TLS); a non-loopback --listen then needs no auth tokens"))
	fs.TextVar(&c.LogFormat, "log-format", c.LogFormat, gObs.In("log `format`: text or json"))
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, gObs.In("log `level`: debug, info, warn or error"))
	fs.BoolVar(&c.LogMessages, "log-messages", c.LogMessages, gObs.In("log each JSON-RPC message both ways (session, method, id, size, body cut at "+strconv.Itoa(msglog.DefaultMaxBody)+" bytes), at info; message bodies hold what users and tools exchange; tokens and headers are never logged"))
	fs.DurationVar(&c.StopGrace, "stop-grace", c.StopGrace, gProcs.In("when stopping a server: wait this long after closing stdin before SIGTERM, and again before SIGKILL"))
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, gEdge.In("at SIGINT/SIGTERM: how long requests in flight may still finish"))
	fs.BoolVar(&c.JSONResponse, "json-response", c.JSONResponse, gSessions.In("answer requests with one application/json body instead of an SSE stream (not resumable)"))
	fs.TextVar(&c.SSEPollAfter, "sse-poll-after", c.SSEPollAfter, gSessions.In("close SSE connections after this long (sending retry:); clients resume with Last-Event-ID (0 or never: never; 2025-11-25 clients only)"))
	fs.DurationVar(&c.SSERetry, "sse-retry", c.SSERetry, gSessions.In("reconnection delay announced in the SSE retry field with --sse-poll-after"))
	fs.TextVar(&c.SSEKeepAlive, "sse-keepalive", c.SSEKeepAlive, gSessions.In("write an SSE comment on a stream quiet for this long, so that proxies with an idle timeout keep it open (0 or never: never)"))
	fs.IntVar(&c.LogMaxEvents, "log-max-events", c.LogMaxEvents, gLog.In("most events each session's resumption log holds"))
	fs.TextVar(&c.LogMaxBytes, "log-max-bytes", c.LogMaxBytes, gLog.In("most `bytes` each session's resumption log holds"))
	fs.TextVar(&c.LogMaxTotalBytes, "log-max-total-bytes", c.LogMaxTotalBytes, gLog.In("most `bytes` all sessions' resumption logs hold together; beyond it the largest logs lose their oldest already-delivered events, and when events no client read exceed it alone, the sessions holding the most of them are ended (their clients get 404; metric mcp_bridge_sessions_ended_total{reason=\"log_budget\"})"))
	fs.TextVar(&c.StderrLineBytes, "stderr-line-bytes", c.StderrLineBytes, gProcs.In("longest server stderr line logged, in `bytes`; longer lines are cut"))
	fs.Float64Var(&c.StderrLinesPerSecond, "stderr-lines-per-second", c.StderrLinesPerSecond, gProcs.In(fmt.Sprintf("server stderr lines logged per second and session, on average; more are dropped (counted in the log) (0: %d; negative: no limit)", sandbox.DefaultStderrLinesPerSecond)))
	fs.IntVar(&c.StderrBurst, "stderr-burst", c.StderrBurst, gProcs.In(fmt.Sprintf("server stderr lines a session may log at once above --stderr-lines-per-second (0: %d)", sandbox.DefaultStderrBurst)))
	fs.Var(&flagx.Repeat{Dst: &c.Env}, "env", gProcs.In("set `NAME=VALUE` for local servers, or NAME alone to pass the bridge's value (repeatable; the variable is comma-separated); besides these they get only "+sandbox.DefaultEnvAllow+" of the bridge's environment, never a BRIDGE_* variable"))
	fs.BoolVar(&c.EnvInherit, "env-inherit", c.EnvInherit, gProcs.In("give local servers the bridge's whole environment but its "+sandbox.ReservedEnvPrefix+"* variables and any variable holding one of its secrets, as other bridges do: API keys, cloud credentials and tokens of the bridge's environment then reach every server (logged as a WARN); --env NAME passes one variable instead"))
	fs.BoolVar(&c.LocalUnsupervised, "local-unsupervised", c.LocalUnsupervised, gProcs.In("run local servers without the supervisor (this binary, started once and shared by every session, which ends everything a server started when it exits, is stopped, or the bridge dies): saves that one process, but what a server starts may then outlive it or a killed bridge"))
	fs.TextVar(&c.BodyReadTimeout, "body-read-timeout", c.BodyReadTimeout, gEdge.In("a POST body must arrive within this long after its headers, else 408 (never or negative: no limit)"))
	fs.TextVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, gEdge.In("each SSE event or JSON answer must reach the client within this long, else the connection closes; time between events does not count (never or negative: no limit)"))
	fs.TextVar(&c.HTTPIdleTimeout, "http-idle-timeout", c.HTTPIdleTimeout, gEdge.In("close a keep-alive connection after this long without a request (never or negative: never); keep it above the idle timeout of a proxy in front"))
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, gEdge.In("most connections open at once, lowered to what the open-file limit leaves after --max-sessions servers; beyond it a connection gets 503 (negative: only the open-file limit)"))
	fs.IntVar(&c.MaxConnectionsPerClient, "max-connections-per-client", c.MaxConnectionsPerClient, gEdge.In("most connections open at once from one client IP address (a proxy in front is one address); beyond it 503 (negative: no limit)"))
	fs.TextVar(&c.MaxBodyBytesInFlight, "max-body-bytes-in-flight", c.MaxBodyBytesInFlight, gEdge.In("most `bytes` held by POST bodies being read, all clients together; beyond it 503 (negative: no limit; else at least --max-message-bytes)"))
	fs.TextVar(&c.InitializeTimeout, "initialize-timeout", c.InitializeTimeout,
		gSessions.In(fmt.Sprintf("end a session whose server has not answered initialize after this long, with an error and its last stderr lines; bounds too the initialize the bridge sends a legacy child of the 2026-07-28 pool (0: %s; never or negative: never)", session.DefaultInitializeTimeout)))
	fs.TextVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout,
		gSessions.In(fmt.Sprintf("answer a request the server has not answered after this long with error -32001, and cancel it at the server; a progress notification restarts it; both eras (0: %s; never or negative: never)", session.DefaultRequestTimeout)))
	fs.IntVar(&c.MaxRequestsPerSession, "max-requests-per-session", c.MaxRequestsPerSession,
		gSessions.In(fmt.Sprintf("most requests in flight in one session; beyond it a POST gets 429; a server's 2026-07-28 pool admits this many for each child it may run (--pool-max) (0: %d)", session.DefaultMaxRequests)))
	fs.TextVar(&c.MaxQueuedBytes, "max-queued-bytes", c.MaxQueuedBytes,
		gSessions.In(fmt.Sprintf("most `bytes` of one session, or of one child of the 2026-07-28 pool, waiting to be written to its stdin; beyond it a POST gets 503 (0: %d)", session.DefaultMaxQueuedBytes)))
	fs.TextVar(&c.Sandbox, "sandbox", c.Sandbox, gProcs.In("where servers run: local (a process per session) or docker (a container per session)"))
	fs.StringVar(&c.Image, "image", c.Image, gDocker.In("Docker `image` of the server (--sandbox docker); without COMMAND its entrypoint runs"))
	fs.TextVar(&c.Pull, "pull", c.Pull, gDocker.In("when to pull --image: never, missing or always"))
	fs.StringVar(&c.SandboxNetwork, "sandbox-network", c.SandboxNetwork, gDocker.In("Docker network of server containers; anything but none lets an untrusted server reach the network"))
	fs.Var(&flagx.List{Dst: &c.SandboxMounts}, "sandbox-mount", gDocker.In("bind mount `SRC:DST[:rw]` into server containers, read-only unless :rw (repeatable); exposes host files to the server"))
	fs.Var(&flagx.List{Dst: &c.SandboxEnv}, "sandbox-env", gDocker.In("`NAME=VALUE` set in server containers (repeatable); the server can read it"))
	fs.TextVar(&c.SandboxMemory, "sandbox-memory", c.SandboxMemory, gDocker.In("memory limit of each server container (swap equals it), e.g. 512m, 1g"))
	fs.Float64Var(&c.SandboxCPUs, "sandbox-cpus", c.SandboxCPUs, gDocker.In("CPU limit of each server container"))
	fs.Int64Var(&c.SandboxPids, "sandbox-pids", c.SandboxPids, gDocker.In("process limit of each server container"))
	fs.Var(&flagx.List{Dst: &c.SandboxEgress}, "sandbox-egress", gDocker.In("let server containers reach `host[:port]` through the bridge's filtering proxy, and nothing else (comma-separated or repeated; port 443 unless given): an exact name, *.example.com for its subdomains (not example.com itself: list it too), or a literal IP, the only way to allow a private, loopback or link-local address; without it a container has no network (--sandbox-network); the local sandbox cannot filter egress"))
	fs.StringVar(&c.SandboxRuntime, "sandbox-runtime", c.SandboxRuntime, gDocker.In("container runtime `name` of server containers (Docker's --runtime), e.g. runsc for gVisor; refused at start if the engine does not list it (default: the engine's)"))
	fs.Var(&flagx.List{Dst: &c.UserEnv}, "user-env", gProcs.In("give each session's server the variable NAME holding its user's credential `NAME=SECRET` (repeatable): with authentication from --secrets-dir/PRINCIPAL/SECRET, without it from the bridge's "+envPrefix+"_SECRET_<SECRET> variable; a user without one cannot start a session"))
	fs.StringVar(&c.SecretsDir, "secrets-dir", c.SecretsDir, gProcs.In("`directory` of per-user credentials for --user-env: one file per principal and secret, DIR/PRINCIPAL/SECRET (PRINCIPAL: the token's sub, or static-<hex> for a static token, logged at start), mode 0600, owned by the bridge's user"))
	fs.StringVar(&c.SandboxUser, "sandbox-user", c.SandboxUser, gDocker.In("`uid:gid` servers run as in containers; 0 (root) weakens the sandbox"))
	fs.StringVar(&c.Instance, "instance", c.Instance, gDocker.In("`name` of this bridge on the Docker host, in container labels (default: a random bridge-<hex>); a restarted bridge of the same name removes its predecessor's containers"))
	fs.IntVar(&c.Warm, "warm", c.Warm, gProcs.In("keep `N` MCP servers (processes or containers) started ahead of sessions, so that a new session does not wait for a launch (0: none)"))
	fs.BoolVar(&c.NoMetrics, "no-metrics", c.NoMetrics, gObs.In("serve no /metrics (by default it is served on --listen, behind the same Host and authentication checks as the MCP endpoint)"))
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, gObs.In("serve /metrics on this `address` instead, without authentication (e.g. a port only the Prometheus scraper reaches)"))
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, gObs.In("export OpenTelemetry traces over OTLP/HTTP to this collector base `URL`, e.g. http://collector:4318 (default: OTEL_EXPORTER_OTLP_ENDPOINT; unset: tracing off)"))
	fs.StringVar(&c.AffinityAddr, "affinity-addr", c.AffinityAddr, gMulti.In("`host:port` other instances reach this one at, or ecs (from the ECS task metadata); with an affinity secret, session IDs name their owner and any instance forwards a request to it"))
	fs.StringVar(&c.AffinitySecretFile, "affinity-secret-file", c.AffinitySecretFile, gMulti.In("`file` holding the secret (32 bytes or more) shared by all instances, which authenticates owners in session IDs (BRIDGE_AFFINITY_SECRET also takes it)"))
	fs.StringVar(&c.OAuthIssuer, "oauth-issuer", c.OAuthIssuer, gAuth.In("issuer `URL` of the OAuth 2.1 authorization server whose access tokens are accepted (needs --resource-url)"))
	fs.StringVar(&c.ResourceURL, "resource-url", c.ResourceURL, gAuth.In("canonical `URL` clients reach the MCP endpoint at, e.g. https://mcp.example.com/mcp: the audience every OAuth token must carry"))
	fs.Var(&flagx.List{Dst: &c.OAuthScopes}, "oauth-scopes", gAuth.In("`scopes` every OAuth token must carry, advertised to clients (comma-separated or repeated)"))
	fs.Var(&flagx.List{Dst: &c.OAuthTokenTypes}, "oauth-token-types", gAuth.In("JWS `typ` values of JWT access tokens accepted (comma-separated or repeated; * accepts any); default: at+jwt, application/at+jwt (RFC 9068)"))
	fs.StringVar(&c.OAuthIntrospectionURL, "oauth-introspection-url", c.OAuthIntrospectionURL, gAuth.In("RFC 7662 introspection endpoint `URL` for opaque (non-JWT) tokens; needs --oauth-client-id and a client secret"))
	fs.StringVar(&c.OAuthClientID, "oauth-client-id", c.OAuthClientID, gAuth.In("the bridge's client `ID` at the introspection endpoint"))
	fs.StringVar(&c.OAuthClientSecretFile, "oauth-client-secret-file", c.OAuthClientSecretFile, gAuth.In("`file` holding the bridge's client secret at the introspection endpoint (BRIDGE_OAUTH_CLIENT_SECRET also takes it)"))
	fs.TextVar(&c.ChildEra, "child-era", c.ChildEra, gStateless.In("era of the server for revision 2026-07-28 clients: auto (ask a throwaway process with server/discover once), legacy (needs initialize; the bridge translates) or modern"))
	fs.IntVar(&c.PoolMin, "pool-min", c.PoolMin, gStateless.In("servers kept running for revision 2026-07-28 clients when the server is modern (-1: none)"))
	fs.IntVar(&c.PoolMax, "pool-max", c.PoolMax, gStateless.In("most servers running for revision 2026-07-28 clients, across all principals (separate from --max-sessions); beyond one per CPU, a pool grows only while its servers have stopped answering"))
	fs.IntVar(&c.PoolMaxPerPrincipal, "pool-max-per-principal", c.PoolMaxPerPrincipal, gStateless.In("most of the --pool-max servers one authenticated principal may have (its legacy servers, and the modern ones its requests with a log level hold alone or its slow calls occupy); beyond it a request needing one more gets 429 (or waits behind its own); 0: half of --pool-max with authentication, all of it without (every client is then one principal)"))
	fs.DurationVar(&c.PoolEvictIdle, "pool-evict-idle", c.PoolEvictIdle, gStateless.In("at --pool-max, a legacy server of another principal is stopped to make room only once idle this long; meanwhile the request waits (503 if none comes free within --request-timeout), so principals taking turns start at most --pool-max servers per this time (0: stop at once)"))
	fs.DurationVar(&c.RequestStateTTL, "request-state-ttl", c.RequestStateTTL, gStateless.In("how long a call that asked the client something (elicitation, sampling, roots) waits for the client's retry before it is cancelled"))
	fs.StringVar(&c.Policy, "policy", c.Policy, gGuards.In("policy `file` (YAML): which tools, prompts and resources callers see and may use, and the scopes each needs"))
	fs.StringVar(&c.PinFile, "pin-file", c.PinFile, gGuards.In("lock `file` written by bridge pin: a tool, prompt or resource template that is new or changed since is hidden and refused"))
	fs.TextVar(&c.OnPinViolation, "on-pin-violation", c.OnPinViolation, gGuards.In("what a server offering what --pin-file refuses does besides the refusal: drop, or end-session"))
	fs.TextVar(&c.MaxDescriptionBytes, "max-description-bytes", c.MaxDescriptionBytes, gGuards.In("a tool, prompt or resource template with a longer description is hidden and refused (negative: no limit)"))
	fs.BoolVar(&c.AllowHiddenUnicode, "allow-hidden-unicode", c.AllowHiddenUnicode, gGuards.In("accept descriptions and schemas holding invisible or direction-changing Unicode (tag characters, zero-width, bidi controls), which can hide instructions from reviewers"))
	fs.StringVar(&c.AuditLog, "audit-log", c.AuditLog, gGuards.In("append one JSON line per request, either way, to this `file` (- for standard output)"))
	fs.BoolVar(&c.AuditArgs, "audit-args", c.AuditArgs, gGuards.In("record the arguments of each request in the audit log, not only their SHA-256"))
	fs.StringVar(&c.Config, "config", c.Config, gMulti.In("serve the MCP servers of this JSON `file` (the mcpServers format of desktop clients), each at /servers/NAME/mcp, instead of one COMMAND; SIGHUP reloads it"))
	fs.StringVar(&c.AggregateSeparator, "aggregate-separator", c.AggregateSeparator, gMulti.In("with --config, what joins a server's prefix (its name, or its \"prefix\" key) and a tool's or prompt's name in the aggregates at /mcp and /groups/NAME/mcp: 1 to 4 of A-Z a-z 0-9 _ - ."))
	fs.BoolVar(&c.NoAggregate, "no-aggregate", c.NoAggregate, gMulti.In("with --config, do not serve every server aggregated at /mcp (which runs one catalog server per member from the start, and gives every client of the bridge every server's tools at one URL); groups (/groups/NAME/mcp) are still served"))
	fs.BoolVar(&c.NoLegacySSE, "no-legacy-sse", c.NoLegacySSE, gSessions.In("do not serve the legacy HTTP+SSE transport (revision 2024-11-05), otherwise at /sse and /message beside each MCP endpoint"))
	return fs
}

// parseConfig reads the environment, then the flags, and checks the result.
// It returns flag.ErrHelp for -h, --help and help.
func parseConfig(args []string) (*config, error) {
	c, err := loadConfig(args)
	if err != nil {
		return nil, err
	}
	return c, c.finish()
}

// loadConfig reads the environment, then the flags.
func loadConfig(args []string) (*config, error) {
	c := defaultConfig()
	if err := envconfig.Process("", c); err != nil {
		return nil, envError(err)
	}
	fs := newFlagSet(c)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		c.command = fs.Args()
	}
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && v != "" {
			c.given = append(c.given, envName(f.Name))
		}
	})
	fs.Visit(func(f *flag.Flag) { c.given = append(c.given, "--"+f.Name) })
	if err := c.readFile(fs); err != nil {
		return nil, err
	}
	return c, nil
}

// helpConfig is the configuration --help shows defaults from: the built-in
// ones and the environment's, if it can be read.
func helpConfig() *config {
	c := defaultConfig()
	if envconfig.Process("", c) != nil {
		c = defaultConfig()
	}
	return c
}

// envError says which variable envconfig could not read, and why, as
// parseFlags does for flags.
func envError(err error) error {
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(pe.KeyName, envPrefix+"_"), "_", "-"))
		if f := newFlagSet(defaultConfig()).Lookup(name); f != nil {
			return fmt.Errorf("%s=%s: %s", pe.KeyName, pe.Value, flagx.Problem(f.Value, pe.Value, pe.Err))
		}
		return fmt.Errorf("%s=%s: %v", pe.KeyName, pe.Value, pe.Err)
	}
	return fmt.Errorf("reading %s_* environment variables: %w", envPrefix, err)
}

// parseFlags parses args with fs (flagx.Parse), with the hints of
// unknownFlag.
func parseFlags(fs *flag.FlagSet, args []string) error { return flagx.Parse(fs, args, unknownFlag) }

// A limitError is a value of a flag a server may also set for itself in the
// config file, outside what it allows. Its rule is written once
// (checkLimits) and said in the words of each place: on the command line
// (--max-sessions 0: want 1 or more) and after the file's key (key
// "max-sessions": 0: want 1 or more).
type limitError struct {
	key  string // the flag, and the file's key, of the value at fault
	flag string // the message on the command line
	file string // the message after the file's key
	err  error  // what it wraps, if anything
}

func (e *limitError) Error() string { return e.flag }
func (e *limitError) Unwrap() error { return e.err }

// checkLimits checks the values of the flags a server may also set for
// itself (configfile.ServerKeys): those of the command line (finish), then those of
// each server of the config file (serverConfig). Each package refuses what
// is invalid for it (endpoint.ServerOptions.Validate asks each); what is
// left here is the command's own form: these flags have their defaults
// filled in already (defaultConfig), so a 0 or a negative that a package
// would take for its default is a mistake for some of them (a negative
// --stderr-line-bytes was the default line length), and values a package takes
// with a meaning the flag does not offer (a negative --pool-evict-idle or
// --pool-max-per-principal).
func (c *config) checkLimits() error {
	for _, p := range []struct {
		key string
		v   int64
	}{
		{"max-sessions", int64(c.MaxSessions)},
		{"max-message-bytes", int64(c.MaxMessageBytes)},
		{"log-max-events", int64(c.LogMaxEvents)},
		{"log-max-bytes", int64(c.LogMaxBytes)},
		{"pool-max", int64(c.PoolMax)},
		{"stderr-line-bytes", int64(c.StderrLineBytes)},
	} {
		if p.v <= 0 {
			msg := fmt.Sprintf("%d: want 1 or more", p.v)
			return &limitError{key: p.key, flag: "--" + p.key + " " + msg, file: msg}
		}
	}
	if c.RequestStateTTL == 0 {
		return &limitError{key: "request-state-ttl", flag: "--request-state-ttl 0s: want a positive duration", file: "0s: want a positive duration"}
	}
	if c.LogMaxTotalBytes <= 0 {
		return &limitError{key: "log-max-total-bytes", flag: fmt.Sprintf("--log-max-total-bytes %d: want a positive number of bytes", c.LogMaxTotalBytes)}
	}
	if c.SandboxMemory <= 0 {
		msg := fmt.Sprintf("%s: want a positive size such as 512m or 1g", c.SandboxMemory)
		return &limitError{key: "sandbox-memory", flag: "--sandbox-memory " + msg, file: msg}
	}
	if c.PoolEvictIdle < 0 {
		msg := fmt.Sprintf("%s: want a duration, 0 to stop at once", c.PoolEvictIdle)
		return &limitError{key: "pool-evict-idle", flag: "--pool-evict-idle " + msg, file: msg}
	}
	if c.PoolMaxPerPrincipal < 0 {
		msg := fmt.Sprintf("%d: want 0 (the default) or a number of servers", c.PoolMaxPerPrincipal)
		return &limitError{key: "pool-max-per-principal", flag: "--pool-max-per-principal " + msg, file: msg}
	}
	return optionError(endpointOptions(c).Validate())
}

// optionError says err, a package's OptionError about an option a flag
// sets, in the words of each place: its Option names the flag and the
// file's key (optionFlags), its message the value and what is wanted
// (--max-sessions -1: want 1 or more; key "max-sessions": -1: want 1 or
// more). Other errors are returned as they are.
func optionError(err error) error {
	var oe interface {
		error
		Option() string
	}
	if !errors.As(err, &oe) {
		return err
	}
	key, ok := optionFlags[oe.Option()]
	if !ok {
		return err
	}
	var bounds *pool.BoundsError
	switch {
	case errors.As(err, &bounds):
		max := optionFlags["pool.Options.Max"]
		return &limitError{key: key, err: err,
			flag: fmt.Sprintf("--%s %d is above --%s %d", key, bounds.Min, max, bounds.Max),
			file: fmt.Sprintf("%s %d is above %s %d", key, bounds.Min, max, bounds.Max)}
	case errors.Is(err, endpoint.ErrAuditArgsWithoutLog):
		return &limitError{key: key, err: err, flag: "--audit-args needs --audit-log",
			file: "empty, but audit-args is on: give the server an audit log, or turn audit-args off"}
	}
	return &limitError{key: key, flag: "--" + key + " " + oe.Error(), file: oe.Error(), err: err}
}

// checkSandboxOnly refuses options of the Docker sandbox with --sandbox
// local: they would be silently ignored, and a user who asked for a
// network-less server would get one with the host's network.
func checkSandboxOnly(c *config) error {
	if c.Sandbox != "local" {
		return nil
	}
	var given []string
	for _, g := range c.given {
		name := strings.TrimPrefix(g, "--")
		if g == name { // BRIDGE_SANDBOX_USER
			name = strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(g, envPrefix+"_"), "_", "-"))
		}
		if name == "sandbox-egress" {
			return localEgressError(g)
		}
		if sandboxOnly(name) && !slices.Contains(given, g) {
			given = append(given, g)
		}
	}
	switch len(given) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s only applies to --sandbox docker (with --sandbox local, the default, the server is a process of the bridge's user); remove it or add --sandbox docker", given[0])
	}
	return fmt.Errorf("%s only apply to --sandbox docker (with --sandbox local, the default, the server is a process of the bridge's user); remove them or add --sandbox docker",
		strings.Join(given, ", "))
}

// checkEgress says sandbox.CheckEgress's refusal of an egress allow-list
// or of the network beside it in the flags' words.
func checkEgress(list []string, network string) error {
	switch err := sandbox.CheckEgress(list, network); {
	case errors.Is(err, sandbox.ErrEgressNetwork):
		return fmt.Errorf("--sandbox-egress and --sandbox-network %s exclude each other: with an allow-list the server sits on an internal network whose only way out is the filtering proxy", network)
	case err != nil:
		return fmt.Errorf("--sandbox-egress: %w", err)
	}
	return nil
}

// checkUserEnv parses --user-env and checks what goes with it.
func (c *config) checkUserEnv() error {
	vars, err := endpoint.ParseUserEnv(c.UserEnv)
	if err != nil {
		return err
	}
	c.userVars = vars
	if len(vars) > 0 && c.Warm > 0 {
		return errors.New("--user-env and --warm exclude each other: a spare server starts before anyone knows whose credentials it needs")
	}
	if c.SecretsDir != "" {
		if st, err := os.Stat(c.SecretsDir); err != nil || !st.IsDir() {
			return fmt.Errorf("--secrets-dir %s: not a directory", c.SecretsDir)
		}
	}
	return nil
}

// localEgressError refuses an egress allow-list (given by what, a flag, a
// variable or a key) for a local server, which no proxy can filter: it is a
// process of the bridge's user, with the host's network.
func localEgressError(what string) error {
	return fmt.Errorf("%s: the local sandbox cannot filter egress: a local server has the bridge's own network access; run the server with --sandbox docker, or remove %s", what, what)
}

// sandboxOnly reports whether a flag configures the Docker sandbox only.
func sandboxOnly(name string) bool {
	return strings.HasPrefix(name, "sandbox-") || name == "image" || name == "pull" || name == "instance"
}

func (c *config) finish() error {
	if c.Config != "" && len(c.command) > 0 {
		return fmt.Errorf("--config %s and a command after -- exclude each other: add the command to the file as a server", c.Config)
	}
	if len(c.command) == 0 && c.Config == "" && !(c.Sandbox == "docker" && c.Image != "") {
		return errors.New("no server command: give it after --, as in: bridge -- npx -y @modelcontextprotocol/server-everything")
	}
	if err := checkSandboxOnly(c); err != nil {
		return err
	}
	if err := checkEgress(c.SandboxEgress, c.SandboxNetwork); err != nil {
		return err
	}
	if err := c.checkUserEnv(); err != nil {
		return err
	}
	if err := bridge.CheckListenAddr(c.Listen); err != nil {
		return fmt.Errorf("--listen %w", err)
	}
	hopts := bridge.Options{Path: c.Path, AllowedOrigins: c.AllowedOrigins, SSERetry: c.SSERetry}
	if err := hopts.Validate(); err != nil {
		return optionError(err)
	}
	if c.Sandbox == "docker" && c.Image == "" && c.Config == "" {
		return errors.New("--sandbox docker needs --image")
	}
	if c.AggregateSeparator == "" {
		// Its default is filled in: an empty one is a mistake, not the
		// default it means to the aggregate package.
		return errors.New(`--aggregate-separator "": want 1 to 4 of A-Z a-z 0-9 _ - .`)
	}
	var err error
	if c.logLevel, err = logx.ParseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("--log-level %q: %w", c.LogLevel, err)
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	if err := c.finishGuards(); err != nil {
		return err
	}
	if c.MaxBodyBytesInFlight >= 0 && c.MaxBodyBytesInFlight < c.MaxMessageBytes {
		return fmt.Errorf("--max-body-bytes-in-flight %d is below --max-message-bytes %d: a message that large could never be read", c.MaxBodyBytesInFlight, c.MaxMessageBytes)
	}
	if c.MaxConnections == 0 || c.MaxConnectionsPerClient == 0 {
		return errors.New("--max-connections and --max-connections-per-client must not be 0 (negative: no limit)")
	}
	if c.BodyReadTimeout == 0 || c.WriteTimeout == 0 || c.HTTPIdleTimeout == 0 {
		return errors.New("--body-read-timeout, --write-timeout and --http-idle-timeout must not be 0 (negative: no limit)")
	}
	c.memory = int64(c.SandboxMemory)
	if c.env, err = sandbox.ParseEnv(c.Env, nil); err != nil {
		return err
	}

	for _, t := range c.AuthTokens {
		// An empty token must never be accepted: BRIDGE_AUTH_TOKENS=""
		// means no tokens, not a token that is empty.
		if t = strings.TrimSpace(t); t != "" {
			c.tokens = append(c.tokens, t)
		}
	}
	if c.AuthTokenFile != "" {
		toks, err := auth.ReadTokenFile(c.AuthTokenFile)
		if err != nil {
			return fmt.Errorf("--auth-token-file: %w", err)
		}
		c.tokens = append(c.tokens, toks...)
	}
	if c.AffinitySecret, err = readSecret("affinity-secret-file", c.AffinitySecretFile, c.AffinitySecret); err != nil {
		return err
	}
	secret := []byte(c.AffinitySecret)
	switch {
	case len(secret) > 0 && c.AffinityAddr == "":
		return errors.New("an affinity secret needs --affinity-addr (this instance's address, or ecs)")
	case len(secret) == 0 && c.AffinityAddr != "":
		return fmt.Errorf("--affinity-addr needs a secret: --affinity-secret-file or %s_AFFINITY_SECRET", envPrefix)
	case c.AcceptSessionID && c.AffinityAddr != "":
		// Affinity routes by the owner an ID names, which a chosen ID
		// does not; a platform that mints IDs routes sessions itself.
		return errors.New("--accept-session-id cannot be combined with --affinity-addr: a session ID the client chose names no owning instance")
	case c.OAuthIssuer != "" && c.AffinityAddr != "":
		// A forwarded request carries the client's principal, signed for
		// the owner, which maps it back to one of the static tokens; an
		// OAuth access token has no such mapping, so the owner would get
		// the request without credentials and answer 401.
		return fmt.Errorf("--oauth-issuer cannot be combined with --affinity-addr yet: a request forwarded to the instance owning its session would arrive without the client's access token; run one instance, or use static tokens (%s_AUTH_TOKENS, --auth-token-file) with session affinity", envPrefix)
	}
	c.affinitySecret = secret
	if len(c.AllowedHosts) == 0 && bridge.IsLoopbackAddr(c.Listen) {
		// DNS rebinding protection: a browser tricked into calling a
		// loopback bridge sends the attacker's host name.
		c.AllowedHosts = bridge.LoopbackHosts
	}
	if c.OAuthClientSecret, err = readSecret("oauth-client-secret-file", c.OAuthClientSecretFile, c.OAuthClientSecret); err != nil {
		return err
	}
	if c.EnvInherit {
		if c.Sandbox == "docker" {
			return errors.New("--env-inherit applies to local servers only: give a container its variables with --sandbox-env")
		}
		// After the secrets are read: a variable holding one stays out.
		c.env = append(sandbox.InheritedEnv(os.Environ(), c.secrets()), c.env...)
	}
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	case c.TLSCert != "" && c.AffinityAddr != "":
		// Instances forward to each other over plain HTTP.
		return errors.New("--tls-cert with session affinity is not supported: terminate TLS at the load balancer")
	}
	// With mutual TLS only holders of a certificate the CA signed connect:
	// that authenticates them as well as a token would.
	if len(c.tokens) == 0 && c.OAuthIssuer == "" && !c.InsecureNoAuth && c.TLSClientCA == "" && !bridge.IsLoopbackAddr(c.Listen) {
		return fmt.Errorf("refusing to listen on %s without authentication: anyone who reaches it could run your server; "+
			"give tokens with --auth-token-file or %s_AUTH_TOKENS, an authorization server with --oauth-issuer, require client certificates with --tls-client-ca, or pass --insecure-no-auth", c.Listen, envPrefix)
	}
	if c.ChildEra, err = endpoint.UserEnvEra(len(c.userVars) > 0 && c.authenticates(), c.ChildEra); err != nil {
		return err
	}
	return c.checkServers()
}

// readSecret is a secret given in the file of a flag (file set) or by its
// variable (value), without the spaces around it.
func readSecret(flag, file, value string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flag, err)
		}
		value = string(b)
	}
	return strings.TrimSpace(value), nil
}

// finishGuards checks the flags of the interception point and reads the
// policy and pin files: a bad one stops the bridge before it serves.
func (c *config) finishGuards() error {
	return c.readGuardFiles(func(string) bool { return true }, nil)
}

// readGuardFiles reads the policy and pin files of c that own says to read
// (the global ones all; a server of the config file those it names
// itself) into c.policy and c.lock, and adds the name and content of each
// to digest, if set. Its errors are limitErrors, said on the command line
// (--policy: ...) or after the file's key.
func (c *config) readGuardFiles(own func(key string) bool, digest hash.Hash) error {
	fail := func(key string, err error) error {
		return &limitError{key: key, flag: "--" + key + ": " + err.Error(), file: err.Error(), err: err}
	}
	if own("policy") {
		c.policy = nil
		if c.Policy != "" {
			p, err := policy.Load(c.Policy)
			if err != nil {
				return fail("policy", err)
			}
			c.policy = p
			if digest != nil {
				configfile.Digest(digest, c.Policy)
			}
		}
	}
	if own("pin-file") {
		c.lock = nil
		if c.PinFile != "" {
			l, err := pin.ReadLock(c.PinFile)
			if err != nil {
				return fail("pin-file", err)
			}
			c.lock = l
			if digest != nil {
				configfile.Digest(digest, c.PinFile)
			}
		}
	}
	return nil
}

// poolEvictIdle is pool.Options.EvictIdle: 0 (stop at once) is negative
// there.
func (c *config) poolEvictIdle() time.Duration {
	if c.PoolEvictIdle == 0 {
		return -1
	}
	return c.PoolEvictIdle
}

// authenticates reports whether the HTTP edge authenticates requests:
// only then do messages carry a principal.
func (c *config) authenticates() bool {
	return (&auth.Options{StaticTokens: c.tokens, Issuer: c.OAuthIssuer}).Enabled()
}

package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"github.com/kelseyhightower/envconfig"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// config is the bridge's configuration. envconfig fills it from BRIDGE_*
// variables (the envconfig tag names each one), then flags of the same name
// in kebab case override it: flag --session-idle-timeout is variable
// BRIDGE_SESSION_IDLE_TIMEOUT. The tags hold whole names and Process gets no
// prefix because envconfig falls back to a tag without its prefix: with
// prefix BRIDGE and tag PATH, it would read the shell's $PATH.
type config struct {
	Listen             string        `envconfig:"BRIDGE_LISTEN" default:"127.0.0.1:8080"`
	Path               string        `envconfig:"BRIDGE_PATH" default:"/mcp"`
	SessionIdleTimeout time.Duration `envconfig:"BRIDGE_SESSION_IDLE_TIMEOUT" default:"30m"`
	MaxSessions        int           `envconfig:"BRIDGE_MAX_SESSIONS" default:"1000"`
	MaxMessageBytes    int           `envconfig:"BRIDGE_MAX_MESSAGE_BYTES" default:"4194304"`
	AllowedOrigins     []string      `envconfig:"BRIDGE_ALLOWED_ORIGINS"`
	AllowedHosts       []string      `envconfig:"BRIDGE_ALLOWED_HOSTS"`
	AuthTokenFile      string        `envconfig:"BRIDGE_AUTH_TOKEN_FILE"`
	// AuthTokens has no flag on purpose: a token on the command line is
	// visible to every user of the host in the process list.
	AuthTokens      []string      `envconfig:"BRIDGE_AUTH_TOKENS"`
	InsecureNoAuth  bool          `envconfig:"BRIDGE_INSECURE_NO_AUTH"`
	LogFormat       string        `envconfig:"BRIDGE_LOG_FORMAT" default:"text"`
	LogLevel        string        `envconfig:"BRIDGE_LOG_LEVEL" default:"info"`
	StopGrace       time.Duration `envconfig:"BRIDGE_STOP_GRACE" default:"5s"`
	ShutdownGrace   time.Duration `envconfig:"BRIDGE_SHUTDOWN_GRACE" default:"10s"`
	JSONResponse    bool          `envconfig:"BRIDGE_JSON_RESPONSE"`
	SSEPollAfter    time.Duration `envconfig:"BRIDGE_SSE_POLL_AFTER"`
	SSERetry        time.Duration `envconfig:"BRIDGE_SSE_RETRY" default:"1s"`
	LogMaxEvents    int           `envconfig:"BRIDGE_LOG_MAX_EVENTS" default:"1024"`
	LogMaxBytes     int64         `envconfig:"BRIDGE_LOG_MAX_BYTES" default:"8388608"`
	StderrLineBytes int           `envconfig:"BRIDGE_STDERR_LINE_BYTES" default:"4096"`
	// Zero means the session package's default, named in --help.
	InitializeTimeout     time.Duration `envconfig:"BRIDGE_INITIALIZE_TIMEOUT"`
	RequestTimeout        time.Duration `envconfig:"BRIDGE_REQUEST_TIMEOUT"`
	MaxRequestsPerSession int           `envconfig:"BRIDGE_MAX_REQUESTS_PER_SESSION"`
	MaxQueuedBytes        int64         `envconfig:"BRIDGE_MAX_QUEUED_BYTES"`

	BodyReadTimeout         time.Duration `envconfig:"BRIDGE_BODY_READ_TIMEOUT" default:"30s"`
	WriteTimeout            time.Duration `envconfig:"BRIDGE_WRITE_TIMEOUT" default:"30s"`
	HTTPIdleTimeout         time.Duration `envconfig:"BRIDGE_HTTP_IDLE_TIMEOUT" default:"90s"`
	MaxConnections          int           `envconfig:"BRIDGE_MAX_CONNECTIONS" default:"8192"`
	MaxConnectionsPerClient int           `envconfig:"BRIDGE_MAX_CONNECTIONS_PER_CLIENT" default:"1024"`
	MaxBodyBytesInFlight    int64         `envconfig:"BRIDGE_MAX_BODY_BYTES_IN_FLIGHT" default:"268435456"`

	Sandbox        string   `envconfig:"BRIDGE_SANDBOX" default:"local"`
	Image          string   `envconfig:"BRIDGE_IMAGE"`
	Pull           string   `envconfig:"BRIDGE_PULL" default:"missing"`
	SandboxNetwork string   `envconfig:"BRIDGE_SANDBOX_NETWORK" default:"none"`
	SandboxMounts  []string `envconfig:"BRIDGE_SANDBOX_MOUNT"`
	SandboxEnv     []string `envconfig:"BRIDGE_SANDBOX_ENV"`
	SandboxMemory  string   `envconfig:"BRIDGE_SANDBOX_MEMORY" default:"512m"`
	SandboxCPUs    float64  `envconfig:"BRIDGE_SANDBOX_CPUS" default:"1"`
	SandboxPids    int64    `envconfig:"BRIDGE_SANDBOX_PIDS" default:"256"`
	SandboxUser    string   `envconfig:"BRIDGE_SANDBOX_USER" default:"65534:65534"`
	Instance       string   `envconfig:"BRIDGE_INSTANCE"`

	Warm int `envconfig:"BRIDGE_WARM"`

	Config      string `envconfig:"BRIDGE_CONFIG"`
	NoLegacySSE bool   `envconfig:"BRIDGE_NO_LEGACY_SSE"`

	AffinityAddr       string `envconfig:"BRIDGE_AFFINITY_ADDR"`
	AffinitySecretFile string `envconfig:"BRIDGE_AFFINITY_SECRET_FILE"`
	// AffinitySecret has no flag, like AuthTokens.
	AffinitySecret string `envconfig:"BRIDGE_AFFINITY_SECRET"`

	// Derived.
	command        []string
	tokens         []string
	logLevel       slog.Level
	memory         int64
	affinitySecret []byte
	file           *configFile // --config, read

	// Of one server of the config file (serverConfig).
	serverName string
	serverEnv  []string // the server's "env", NAME=VALUE
	serverDir  string   // its "cwd"
}

const envPrefix = "BRIDGE"

// envName is the variable of a flag: listen → BRIDGE_LISTEN.
func envName(flagName string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// listFlag is a flag that may be repeated or given comma-separated values.
type listFlag struct {
	dst *[]string
	set bool
}

func (l *listFlag) String() string {
	if l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l *listFlag) Set(v string) error {
	if !l.set {
		*l.dst = nil // flags replace what the environment said
		l.set = true
	}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.dst = append(*l.dst, p)
		}
	}
	return nil
}

// newFlagSet binds every flag to c. Defaults shown are those in effect
// (built-in, or from the environment).
func newFlagSet(c *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bridge", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Listen, "listen", c.Listen, "`address` to listen on; a non-loopback address requires auth tokens or --insecure-no-auth")
	fs.StringVar(&c.Path, "path", c.Path, "HTTP `path` of the MCP endpoint")
	fs.DurationVar(&c.SessionIdleTimeout, "session-idle-timeout", c.SessionIdleTimeout, "end a session after this long without a client message, whatever streams are open (negative: never)")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "most sessions alive at once; beyond it initialize gets 503")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest message in `bytes`, either way: a larger POST gets 413, a larger server line ends the session")
	fs.Var(&listFlag{dst: &c.AllowedOrigins}, "allowed-origins", "browser `origins` allowed besides loopback ones (comma-separated or repeated; * allows any); a request without Origin is not from a browser and is allowed")
	fs.Var(&listFlag{dst: &c.AllowedHosts}, "allowed-hosts", "Host header `names` accepted (comma-separated or repeated; * allows any); default: the loopback names when --listen is loopback, else any")
	fs.StringVar(&c.AuthTokenFile, "auth-token-file", c.AuthTokenFile, "`file` of accepted bearer tokens, one per line (BRIDGE_AUTH_TOKENS also takes them, comma-separated)")
	fs.BoolVar(&c.InsecureNoAuth, "insecure-no-auth", c.InsecureNoAuth, "allow a non-loopback --listen address without auth tokens (anyone who reaches it runs your server)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: debug, info, warn or error")
	fs.DurationVar(&c.StopGrace, "stop-grace", c.StopGrace, "when stopping a server: wait this long after closing stdin before SIGTERM, and again before SIGKILL")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "at SIGINT/SIGTERM: how long requests in flight may still finish")
	fs.BoolVar(&c.JSONResponse, "json-response", c.JSONResponse, "answer requests with one application/json body instead of an SSE stream (not resumable)")
	fs.DurationVar(&c.SSEPollAfter, "sse-poll-after", c.SSEPollAfter, "close SSE connections after this long (sending retry:); clients resume with Last-Event-ID (0: never; 2025-11-25 clients only)")
	fs.DurationVar(&c.SSERetry, "sse-retry", c.SSERetry, "reconnection delay announced in the SSE retry field with --sse-poll-after")
	fs.IntVar(&c.LogMaxEvents, "log-max-events", c.LogMaxEvents, "most events each session's resumption log holds")
	fs.Int64Var(&c.LogMaxBytes, "log-max-bytes", c.LogMaxBytes, "most `bytes` each session's resumption log holds")
	fs.IntVar(&c.StderrLineBytes, "stderr-line-bytes", c.StderrLineBytes, "longest server stderr line logged, in `bytes`; longer lines are cut")
	fs.DurationVar(&c.BodyReadTimeout, "body-read-timeout", c.BodyReadTimeout, "a POST body must arrive within this long after its headers, else 408 (negative: no limit)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "each SSE event or JSON answer must reach the client within this long, else the connection closes; time between events does not count (negative: no limit)")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", c.HTTPIdleTimeout, "close a keep-alive connection after this long without a request (negative: never); keep it above the idle timeout of a proxy in front")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "most connections open at once, lowered to what the open-file limit leaves after --max-sessions servers; beyond it a connection gets 503 (negative: only the open-file limit)")
	fs.IntVar(&c.MaxConnectionsPerClient, "max-connections-per-client", c.MaxConnectionsPerClient, "most connections open at once from one client IP address (a proxy in front is one address); beyond it 503 (negative: no limit)")
	fs.Int64Var(&c.MaxBodyBytesInFlight, "max-body-bytes-in-flight", c.MaxBodyBytesInFlight, "most `bytes` held by POST bodies being read, all clients together; beyond it 503 (negative: no limit; else at least --max-message-bytes)")
	fs.DurationVar(&c.InitializeTimeout, "initialize-timeout", c.InitializeTimeout,
		fmt.Sprintf("end a session whose server has not answered initialize after this long, with an error and its last stderr lines (0: %s; negative: never)", session.DefaultInitializeTimeout))
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout,
		fmt.Sprintf("answer a request the server has not answered after this long with an error, and cancel it at the server; a progress notification restarts it (0: %s; negative: never)", session.DefaultRequestTimeout))
	fs.IntVar(&c.MaxRequestsPerSession, "max-requests-per-session", c.MaxRequestsPerSession,
		fmt.Sprintf("most requests in flight in one session; beyond it a POST gets 429 (0: %d)", session.DefaultMaxRequests))
	fs.Int64Var(&c.MaxQueuedBytes, "max-queued-bytes", c.MaxQueuedBytes,
		fmt.Sprintf("most `bytes` of one session waiting to be written to its server's stdin; beyond it a POST gets 503 (0: %d)", session.DefaultMaxQueuedBytes))
	fs.StringVar(&c.Sandbox, "sandbox", c.Sandbox, "where servers run: local (a process per session) or docker (a container per session)")
	fs.StringVar(&c.Image, "image", c.Image, "Docker `image` of the server (--sandbox docker); without COMMAND its entrypoint runs")
	fs.StringVar(&c.Pull, "pull", c.Pull, "when to pull --image: never, missing or always")
	fs.StringVar(&c.SandboxNetwork, "sandbox-network", c.SandboxNetwork, "Docker network of server containers; anything but none lets an untrusted server reach the network")
	fs.Var(&listFlag{dst: &c.SandboxMounts}, "sandbox-mount", "bind mount `SRC:DST[:rw]` into server containers, read-only unless :rw (repeatable); exposes host files to the server")
	fs.Var(&listFlag{dst: &c.SandboxEnv}, "sandbox-env", "`NAME=VALUE` set in server containers (repeatable); the server can read it")
	fs.StringVar(&c.SandboxMemory, "sandbox-memory", c.SandboxMemory, "memory limit of each server container (swap equals it), e.g. 512m, 1g")
	fs.Float64Var(&c.SandboxCPUs, "sandbox-cpus", c.SandboxCPUs, "CPU limit of each server container")
	fs.Int64Var(&c.SandboxPids, "sandbox-pids", c.SandboxPids, "process limit of each server container")
	fs.StringVar(&c.SandboxUser, "sandbox-user", c.SandboxUser, "`uid:gid` servers run as in containers; 0 (root) weakens the sandbox")
	fs.StringVar(&c.Instance, "instance", c.Instance, "`name` of this bridge on the Docker host, in container labels (default: a random bridge-<hex>); a restarted bridge of the same name removes its predecessor's containers")
	fs.IntVar(&c.Warm, "warm", c.Warm, "keep `N` MCP servers (processes or containers) started ahead of sessions, so that a new session does not wait for a launch (0: none)")
	fs.StringVar(&c.AffinityAddr, "affinity-addr", c.AffinityAddr, "`host:port` other instances reach this one at, or ecs (from the ECS task metadata); with an affinity secret, session IDs name their owner and any instance forwards a request to it")
	fs.StringVar(&c.AffinitySecretFile, "affinity-secret-file", c.AffinitySecretFile, "`file` holding the secret (32 bytes or more) shared by all instances, which authenticates owners in session IDs (BRIDGE_AFFINITY_SECRET also takes it)")
	fs.StringVar(&c.Config, "config", c.Config, "serve the MCP servers of this JSON `file` (the mcpServers format of desktop clients), each at /servers/NAME/mcp, instead of one COMMAND; SIGHUP reloads it")
	fs.BoolVar(&c.NoLegacySSE, "no-legacy-sse", c.NoLegacySSE, "do not serve the legacy HTTP+SSE transport (revision 2024-11-05), otherwise at /sse and /message beside each MCP endpoint")
	fs.Usage = func() { usage(fs, out) }
	return fs
}

func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, `Usage:
  bridge [flags] -- COMMAND [ARGS...]     serve MCP Streamable HTTP in front of a stdio MCP server
  bridge image build --from SPEC [...]    build an image bundling the bridge and a server
  bridge deploy aws --stack NAME [...]    deploy to AWS ECS behind a load balancer

Each session gets its own server: COMMAND runs once per session.

Flags (each also read from the environment variable shown; flags win):
`)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	for _, n := range names {
		f := fs.Lookup(n)
		name, text := flag.UnquoteUsage(f)
		fmt.Fprintf(out, "  --%s %s\n", n, name)
		fmt.Fprintf(out, "        %s\n", text)
		fmt.Fprintf(out, "        env %s", envName(n))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(out, "   default %s", f.DefValue)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "  env %s_AUTH_TOKENS\n        accepted bearer tokens, comma-separated (no flag: tokens on a command line are visible to every local user)\n", envPrefix)
	fmt.Fprintf(out, "  env %s_AFFINITY_SECRET\n        the session-affinity secret (no flag, for the same reason)\n", envPrefix)
	fmt.Fprint(out, `
Go runtime:
  env GOMAXPROCS
        unset: the bridge runs on one processor while at most one request is in flight,
        and on all of them (Go's default) from the moment a second one is, back to one
        after a second without (not with session affinity, whose forwarded requests
        it would not see); set it to fix the number and turn that off
`)
}

// parseConfig reads the environment, then the flags, and checks the result.
func parseConfig(args []string, out io.Writer) (*config, error) {
	c, err := loadConfig(args, out)
	if err != nil {
		return nil, err
	}
	return c, c.finish()
}

// loadConfig reads the environment, then the flags.
func loadConfig(args []string, out io.Writer) (*config, error) {
	c := &config{}
	if err := envconfig.Process("", c); err != nil {
		return nil, fmt.Errorf("reading %s_* environment variables: %w", envPrefix, err)
	}
	fs := newFlagSet(c, out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		c.command = fs.Args()
	}
	if err := c.readFile(fs); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *config) finish() error {
	if c.Config != "" && len(c.command) > 0 {
		return fmt.Errorf("--config %s and a command after -- exclude each other: add the command to the file as a server", c.Config)
	}
	if len(c.command) == 0 && c.Config == "" && !(c.Sandbox == "docker" && c.Image != "") {
		return errors.New("no server command: give it after --, as in: bridge -- npx -y @modelcontextprotocol/server-everything")
	}
	switch c.Sandbox {
	case "local", "docker":
	default:
		return fmt.Errorf("--sandbox %q: want local or docker", c.Sandbox)
	}
	if c.Sandbox == "docker" && c.Image == "" && c.Config == "" {
		return errors.New("--sandbox docker needs --image")
	}
	switch c.Pull {
	case "never", "missing", "always":
	default:
		return fmt.Errorf("--pull %q: want never, missing or always", c.Pull)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	if err := c.logLevel.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if !strings.HasPrefix(c.Path, "/") {
		return fmt.Errorf("--path %q must start with /", c.Path)
	}
	if c.Warm < 0 {
		return fmt.Errorf("--warm %d: want 0 or more", c.Warm)
	}
	if c.MaxBodyBytesInFlight >= 0 && c.MaxBodyBytesInFlight < int64(c.MaxMessageBytes) {
		return fmt.Errorf("--max-body-bytes-in-flight %d is below --max-message-bytes %d: a message that large could never be read", c.MaxBodyBytesInFlight, c.MaxMessageBytes)
	}
	if c.MaxConnections == 0 || c.MaxConnectionsPerClient == 0 {
		return errors.New("--max-connections and --max-connections-per-client must not be 0 (negative: no limit)")
	}
	if c.BodyReadTimeout == 0 || c.WriteTimeout == 0 || c.HTTPIdleTimeout == 0 {
		return errors.New("--body-read-timeout, --write-timeout and --http-idle-timeout must not be 0 (negative: no limit)")
	}
	if c.MaxSessions <= 0 || c.MaxMessageBytes <= 0 || c.LogMaxEvents <= 0 || c.LogMaxBytes <= 0 {
		return errors.New("--max-sessions, --max-message-bytes, --log-max-events and --log-max-bytes must be positive")
	}
	if c.MaxRequestsPerSession < 0 || c.MaxQueuedBytes < 0 {
		return errors.New("--max-requests-per-session and --max-queued-bytes must be positive (or 0 for the default)")
	}
	mem, err := units.RAMInBytes(c.SandboxMemory)
	if err != nil || mem <= 0 {
		return fmt.Errorf("--sandbox-memory %q: want a size such as 512m or 1g", c.SandboxMemory)
	}
	c.memory = mem

	for _, t := range c.AuthTokens {
		// An empty token must never be accepted: BRIDGE_AUTH_TOKENS=""
		// means no tokens, not a token that is empty.
		if t = strings.TrimSpace(t); t != "" {
			c.tokens = append(c.tokens, t)
		}
	}
	if c.AuthTokenFile != "" {
		toks, err := readTokens(c.AuthTokenFile)
		if err != nil {
			return err
		}
		c.tokens = append(c.tokens, toks...)
	}
	secret := []byte(strings.TrimSpace(c.AffinitySecret))
	if c.AffinitySecretFile != "" {
		b, err := os.ReadFile(c.AffinitySecretFile)
		if err != nil {
			return fmt.Errorf("--affinity-secret-file: %w", err)
		}
		secret = bytes.TrimSpace(b)
	}
	switch {
	case len(secret) > 0 && c.AffinityAddr == "":
		return errors.New("an affinity secret needs --affinity-addr (this instance's address, or ecs)")
	case len(secret) == 0 && c.AffinityAddr != "":
		return fmt.Errorf("--affinity-addr needs a secret: --affinity-secret-file or %s_AFFINITY_SECRET", envPrefix)
	}
	c.affinitySecret = secret
	if len(c.AllowedHosts) == 0 && isLoopback(c.Listen) {
		// DNS rebinding protection: a browser tricked into calling a
		// loopback bridge sends the attacker's host name.
		c.AllowedHosts = bridge.LoopbackHosts
	}
	if len(c.tokens) == 0 && !c.InsecureNoAuth && !isLoopback(c.Listen) {
		return fmt.Errorf("refusing to listen on %s without authentication: anyone who reaches it could run your server; "+
			"give tokens with --auth-token-file or %s_AUTH_TOKENS, or pass --insecure-no-auth", c.Listen, envPrefix)
	}
	return c.checkServers()
}

func readTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	defer f.Close()
	var toks []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			toks = append(toks, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--auth-token-file %s: %w", path, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("--auth-token-file %s holds no token (one per line)", path)
	}
	return toks, nil
}

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

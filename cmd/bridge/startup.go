package main

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// warnLoosenings logs a WARN line for each option that loosens a safe
// default, with its risk as README's tables state it: a loosening must never
// be on unnoticed. Those of the process and of the command's form are
// here; those of a server's options are endpoint.ServerOptions.Loosenings.
func warnLoosenings(cfg *config, logger *slog.Logger) {
	warn := func(flag, value, risk string) {
		logger.Warn("loosened: "+risk, "flag", "--"+flag, "value", value)
	}
	warnWeakTokens(cfg, logger)
	if cfg.EnvInherit && cfg.Sandbox != "docker" {
		warn("env-inherit", "true", "every local server gets the bridge's environment (but "+sandbox.ReservedEnvPrefix+"* variables): API keys, cloud credentials and tokens in it reach every server")
	}
	if cfg.InsecureNoAuth && len(cfg.tokens) == 0 && !bridge.IsLoopbackAddr(cfg.Listen) {
		warn("insecure-no-auth", "true", "no authentication on "+cfg.Listen+": anyone who reaches it can run your server")
	}
	if slices.Contains(cfg.AllowedOrigins, "*") {
		warn("allowed-origins", "*", "any web page open in a browser that reaches the bridge can call your server")
	}
	if slices.Contains(cfg.AllowedHosts, "*") && bridge.IsLoopbackAddr(cfg.Listen) {
		warn("allowed-hosts", "*", "no DNS-rebinding protection: a web page can reach this loopback bridge under its own host name")
	}
	// The server's own.
	for _, l := range endpointOptions(cfg).Loosenings() {
		warn(optionFlags[l.Option], l.Value, l.Risk)
	}
}

// authMode names the authentication in force, for the start-up line:
// tokens, oauth, mtls, several joined by "+", or none (the line
// said auth=false with --oauth-issuer on).
func authMode(cfg *config) string {
	var modes []string
	if len(cfg.tokens) > 0 {
		modes = append(modes, "tokens")
	}
	if cfg.OAuthIssuer != "" {
		modes = append(modes, "oauth")
	}
	if cfg.TLSClientCA != "" {
		modes = append(modes, "mtls")
	}
	if len(modes) == 0 {
		return "none"
	}
	return strings.Join(modes, "+")
}

// minTokenChars is the length under which a bearer token is called
// guessable at start-up; 32 random hex characters are what README advises.
const minTokenChars = 16

// warnWeakTokens warns of a static token short enough to guess and of a
// --auth-token-file other users of the host can read (both were
// accepted silently). Neither stops the bridge; a token is never logged.
func warnWeakTokens(cfg *config, logger *slog.Logger) {
	for _, t := range cfg.tokens {
		if n := len([]rune(t)); n < minTokenChars {
			logger.Warn(fmt.Sprintf("a bearer token is too short to resist guessing (%d of at least %d characters): use 32 random characters or more (openssl rand -hex 32)", n, minTokenChars))
		}
	}
	if cfg.AuthTokenFile == "" {
		return
	}
	if fi, err := os.Stat(cfg.AuthTokenFile); err == nil && fi.Mode().Perm()&0o044 != 0 {
		logger.Warn(fmt.Sprintf("--auth-token-file %s is readable by other users of this host (mode %04o): they can read the tokens; chmod 600 it", cfg.AuthTokenFile, fi.Mode().Perm()))
	}
}

// otherBridgesFlags are flags that users of other stdio bridges (and of
// servers' own HTTP modes) type, with what to type here instead.
var otherBridgesFlags = map[string]string{
	"port":  "the bridge takes the address and port together: --listen 127.0.0.1:8080 (0.0.0.0:8080 for every interface, with authentication)",
	"p":     "the bridge takes the address and port together: --listen 127.0.0.1:8080 (0.0.0.0:8080 for every interface, with authentication)",
	"host":  "the bridge takes the address and port together: --listen 127.0.0.1:8080 (0.0.0.0:8080 for every interface, with authentication)",
	"token": "a token on the command line is visible to every local user: put tokens in a file for --auth-token-file, or in " + envPrefix + "_AUTH_TOKENS",
	"debug": "use --log-level debug",
	"stdio": "the server always speaks stdio to the bridge; give its command after --, as in: bridge -- npx -y @modelcontextprotocol/server-everything",
}

// unknownFlag is the error for a flag that does not exist, with a hint when
// it is one of another bridge's. A one-letter flag is shown with
// one dash, as it was most likely typed.
func unknownFlag(name string) error {
	shown := "--" + name
	if len(name) == 1 {
		shown = "-" + name
	}
	if hint, ok := otherBridgesFlags[name]; ok {
		return fmt.Errorf("unknown flag %s: %s", shown, hint)
	}
	return fmt.Errorf("unknown flag %s", shown)
}

// secrets are the bridge's own secrets, which never reach a server.
func (c *config) secrets() []string {
	out := slices.Clone(c.tokens)
	if c.OAuthClientSecret != "" {
		out = append(out, c.OAuthClientSecret)
	}
	if len(c.affinitySecret) > 0 {
		out = append(out, string(c.affinitySecret))
	}
	return out
}

// logServerEnv says at start what local servers get of the bridge's
// environment and how to pass more (a server that needed
// PYTHONUNBUFFERED, an API key or a proxy variable hung or failed, and
// nothing said why). Names only: values may be secrets.
func logServerEnv(cfg *config, logger *slog.Logger) {
	if cfg.Sandbox == "docker" {
		return
	}
	var names []string
	for _, e := range cfg.Env {
		name, _, _ := strings.Cut(e, "=")
		names = append(names, name)
	}
	if cfg.EnvInherit {
		logger.Info("local MCP servers get the bridge's environment but "+sandbox.ReservedEnvPrefix+"* variables and those holding its secrets (--env-inherit)",
			"env", strings.Join(names, ","))
		return
	}
	logger.Info("local MCP servers get only these variables of the bridge's environment, and those of --env; pass another with --env NAME, or all but "+sandbox.ReservedEnvPrefix+"* with --env-inherit",
		"passed", sandbox.DefaultEnvAllow, "env", strings.Join(names, ","))
}

package main

// The --config file (read by internal/configfile) mapped onto the
// configuration: its global options ("bridge") set the flags neither the
// command line nor a BRIDGE_* variable gave; each server's configuration
// is the global one with its own keys.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"sort"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// readFile reads --config and sets its global options ("bridge") that
// neither a flag nor a BRIDGE_* variable gave.
// fs is the flag set that parsed the command line.
func (c *config) readFile(fs *flag.FlagSet) error {
	if c.Config == "" {
		return nil
	}
	f, err := configfile.Read(c.Config)
	if err != nil {
		return err
	}
	c.file = f
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	return configfile.ApplyKeys(fs, f.Path, "", f.Global, func(k string) bool {
		if given[k] {
			return true
		}
		v, ok := os.LookupEnv(envName(k))
		return ok && v != ""
	})
}

// serverConfig is the configuration of one server: the global one with the
// server's keys, command and environment.
func serverConfig(global *config, path string, s *configfile.Server) (*config, error) {
	sc := *global
	sc.serverName = s.Name
	s.Opts.ApplyTo(&sc.ServerOptions)
	sc.command = s.Command
	sc.serverDir = s.Cwd
	envKeys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		envKeys = append(envKeys, k)
	}
	sort.Strings(envKeys)
	sc.serverEnv = nil
	for _, k := range envKeys {
		sc.serverEnv = append(sc.serverEnv, k+"="+s.Env[k])
	}
	bad := func(key, format string, args ...any) error {
		return configfile.Errorf(path, s.Name, key, format, args...)
	}
	kind, headerFiles := sc.Sandbox, ""
	if s.Remote != nil {
		kind = "remote"
	}
	switch kind {
	case "remote":
		var err error
		if sc.remote, headerFiles, err = configfile.ReadRemote(path, s); err != nil {
			return nil, err
		}
	case "local":
		if len(sc.command) == 0 {
			return nil, bad("command", "missing: a local server needs its program (or give \"sandbox\": \"docker\" and an image)")
		}
		if s.Opts.Has("sandbox-egress") && len(sc.SandboxEgress) > 0 {
			key := "sandbox-egress"
			if s.AllowHosts {
				key = "allowHosts"
			}
			return nil, bad(key, "%s", strings.TrimPrefix(localEgressError(key).Error(), key+": "))
		}
		// Known now, not at the first session's 502.
		if err := sandbox.CheckCommand(sc.command[0]); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is in the message already
			}
			return nil, bad("command", "%q cannot be run: %v; give a program that exists and is executable (a path, or a name on PATH)", sc.command[0], err)
		}
	case "docker":
		if err := checkEgress(sc.SandboxEgress, sc.SandboxNetwork); err != nil {
			key := "sandbox-egress"
			if s.AllowHosts {
				key = "allowHosts"
			}
			return nil, bad(key, "%v", err)
		}
		if sc.Image == "" {
			return nil, bad("image", "missing: \"sandbox\": \"docker\" needs an image")
		}
		if sc.cwdSet() {
			return nil, bad("cwd", "applies to local servers only (a container's working directory is its image's)")
		}
	}
	if err := sc.checkLimits(); err != nil {
		var le *limitError
		if errors.As(err, &le) && le.file != "" {
			key := le.key
			if !s.Opts.Has(key) && key == "pool-min" {
				key = "pool-max" // the server's own pool-max is below the global pool-min
			}
			return nil, bad(key, "%s", le.file)
		}
		return nil, err
	}
	sc.memory = int64(sc.SandboxMemory)
	if err := sc.checkUserEnv(); err != nil {
		return nil, bad("userEnv", "%v", err)
	}
	var err error
	if sc.ChildEra, err = endpoint.UserEnvEra(len(sc.userVars) > 0 && sc.authenticates(), sc.ChildEra); err != nil {
		return nil, bad("userEnv", "%v", err)
	}
	if err := serverGuardKeys(&sc, s, bad); err != nil {
		return nil, err
	}
	sc.guardFiles += headerFiles
	return &sc, nil
}

// serverGuardKeys checks a server's keys of the interception point and the
// stateless pool, and reads the policy and pin files it names itself (the
// global ones were read with the global options).
func serverGuardKeys(sc *config, s *configfile.Server, bad func(key, format string, args ...any) error) error {
	digest := sha256.New()
	if err := sc.readGuardFiles(s.Opts.Has, digest); err != nil {
		var le *limitError
		if errors.As(err, &le) {
			return bad(le.key, "%s", le.file)
		}
		return err
	}
	sc.guardFiles = hex.EncodeToString(digest.Sum(nil))
	return nil
}

// checkServers checks the configuration of each server of the file, once
// the global one is complete.
func (c *config) checkServers() error {
	if c.file == nil {
		return nil
	}
	for _, s := range c.file.Servers {
		if _, err := serverConfig(c, c.file.Path, s); err != nil {
			return err
		}
	}
	return c.checkAggregates(c.file)
}

func (c *config) cwdSet() bool { return c.serverDir != "" }

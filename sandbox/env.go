package sandbox

import (
	"fmt"
	"os"
	"strings"
)

// DefaultEnvAllow lists the variables of the bridge's environment that a
// local server gets, comma-separated; a name ending in *
// stands for every name with that prefix. Everything else, tokens and
// secrets included, stays with the bridge: the server gets these, OwnerEnv,
// and what the operator passes with LocalOptions.Env (--env).
//
// They are what programs need to find their tools, files and locale: PATH
// (npx, uvx, node), HOME (caches such as ~/.npm), USER, LOGNAME, SHELL, the
// locale (LANG, LANGUAGE, LC_*), TZ, and TMPDIR.
const DefaultEnvAllow = "PATH,HOME,USER,LOGNAME,SHELL,LANG,LANGUAGE,LC_*,TZ,TMPDIR"

// ReservedEnvPrefix starts the names of the bridge's own variables, which
// hold its tokens and secrets: never passed to a server, even when asked.
const ReservedEnvPrefix = "BRIDGE_"

// ParseEnv turns the operator's --env values into "NAME=VALUE" entries: a
// value "NAME=VALUE" is kept, a bare "NAME" takes the bridge's value from
// lookup (and is left out if the bridge has none, as docker run -e does).
// It refuses an empty name and any name of the bridge's own (BRIDGE_*).
func ParseEnv(specs []string, lookup func(string) (string, bool)) ([]string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var out []string
	for _, s := range specs {
		name, value, hasValue := strings.Cut(s, "=")
		if err := checkEnvName(name); err != nil {
			return nil, fmt.Errorf("--env %q: %w", s, err)
		}
		if !hasValue {
			v, ok := lookup(name)
			if !ok {
				continue
			}
			value = v
		}
		out = append(out, name+"="+value)
	}
	return out, nil
}

func checkEnvName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("the variable name is empty; want NAME=VALUE or NAME")
	case strings.HasPrefix(strings.ToUpper(name), ReservedEnvPrefix):
		return fmt.Errorf("%s* variables are the bridge's own (tokens, secrets) and are never passed to a server; pass the value under another name", ReservedEnvPrefix)
	case name == OwnerEnv:
		return fmt.Errorf("%s is set by the bridge", OwnerEnv)
	}
	return nil
}

// serverEnv builds a local server's environment from the bridge's: the
// allowed variables, then extra (later entries win in exec), then OwnerEnv.
// No BRIDGE_* variable passes, whatever extra says.
func serverEnv(environ, extra []string) []string {
	allow := strings.Split(DefaultEnvAllow, ",")
	out := make([]string, 0, len(allow)+len(extra)+1)
	pass := func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return checkEnvName(name) == nil
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		for _, a := range allow {
			if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(name, p) || name == a {
				if pass(kv) {
					out = append(out, kv)
				}
				break
			}
		}
	}
	for _, kv := range extra {
		if pass(kv) {
			out = append(out, kv)
		}
	}
	return append(out, OwnerEnv+"="+ownerMark())
}

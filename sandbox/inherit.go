package sandbox

import "strings"

// InheritedEnv is what a local server gets of environ when the operator
// passes the bridge's whole environment (cmd/bridge's --env-inherit):
// every variable but the bridge's own (ReservedEnvPrefix, OwnerEnv) and
// those whose value holds one of secrets (a copy of a token under another
// name). Empty secrets are ignored.
func InheritedEnv(environ, secrets []string) []string {
	var out []string
next:
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if name == "" || strings.HasPrefix(strings.ToUpper(name), ReservedEnvPrefix) || name == OwnerEnv {
			continue
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(value, s) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

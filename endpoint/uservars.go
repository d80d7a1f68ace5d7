package endpoint

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// secretName is what a secret may be called: it is a file name.
var secretName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ParseUserEnv checks per-user variables, NAME=SECRET each (the
// --user-env flag's values, or a server's "userEnv" key's).
func ParseUserEnv(list []string) ([]UserVar, error) {
	var out []UserVar
	for _, e := range list {
		name, secret, ok := strings.Cut(e, "=")
		if !ok || !secretName.MatchString(secret) {
			return nil, fmt.Errorf("--user-env %q: want NAME=SECRET, SECRET a file name (letters, digits, '.', '_', '-')", e)
		}
		if _, err := sandbox.ParseEnv([]string{name + "=x"}, nil); err != nil {
			return nil, fmt.Errorf("--user-env %q: %v", e, errors.Unwrap(err))
		}
		out = append(out, UserVar{Name: name, Secret: secret})
	}
	return out, nil
}

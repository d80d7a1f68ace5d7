package endpoint

// Per-user credentials: a server declares which of its
// environment variables hold a credential of the user its session acts for
// (--user-env NAME=SECRET, a server's "userEnv" key), and each session's
// child gets exactly its principal's values, read when it is launched:
//
//   - with authentication, from --secrets-dir: the file DIR/PRINCIPAL/SECRET,
//     refused unless it is a regular file of mode 0600 owned by the bridge's
//     user; PRINCIPAL is the token's sub, or for a static token
//     "static-" and the hex digest of its tag (logged at start);
//   - without authentication (one user), from the bridge's environment
//     variable BRIDGE_SECRET_<SECRET> (upper case, other characters as _);
//     a BRIDGE_* variable never reaches a server by itself.
//
// A principal without a value gets a JSON-RPC error at initialize (2025),
// or at its first call (2026-07-28: the pool runs the server's children
// as legacy ones, keyed by principal). The values are
// never logged, audited or put in an error.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// maxSecretBytes bounds one secret file.
const maxSecretBytes = 64 << 10

// SecretEnvPrefix starts the name of the variable of the bridge's
// environment that holds a secret of UserEnv without authentication.
const SecretEnvPrefix = "BRIDGE_SECRET_"

// SecretEnvName is the variable of a secret in the single-user case.
func SecretEnvName(secret string) string {
	return SecretEnvPrefix + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' {
			return r - 'a' + 'A'
		}
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, secret)
}

// principalDir is the directory name of a principal under --secrets-dir.
func principalDir(p *auth.Principal) (string, error) {
	name := p.Subject
	if name == "" {
		name = strings.ReplaceAll(string(p.Tag), ":", "-")
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", fmt.Errorf("principal %q cannot name a directory", name)
	}
	return name, nil
}

// errNoSecret: the principal has no value for a secret.
var errNoSecret = errors.New("no such secret")

// readSecret reads DIR/PRINCIPAL/SECRET, refusing a file that others could
// read or write.
func readSecret(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", errNoSecret
	}
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	case st.Mode().Perm() != 0o600:
		return "", fmt.Errorf("%s has mode %04o: refused, want 0600 (chmod 600 it)", path, st.Mode().Perm())
	case sys == nil || sys.Uid != uint32(os.Getuid()):
		return "", fmt.Errorf("%s is not owned by the bridge's user (uid %d): refused", path, os.Getuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("%s is larger than %d bytes", path, maxSecretBytes)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// userEnvLauncher gives each child its principal's values (sandbox.WithLaunchEnv).
type userEnvLauncher struct {
	sandbox.Launcher
	vars  []UserVar
	dir   string // --secrets-dir
	authn bool   // the edge authenticates: values are per principal
	// legacy: the 2026-07-28 pool runs this server's children as legacy
	// ones, which it keys by principal (ServerOptions.ChildEra); a modern child would
	// be shared by every principal.
	legacy bool
	logger *slog.Logger
}

func (l *userEnvLauncher) Launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	env, err := l.values(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	return l.Launcher.Launch(sandbox.WithLaunchEnv(ctx, env), sessionID)
}

// values are the child's variables for the principal of ctx. Its errors
// reach the client: they name the variable and the secret, never a path.
func (l *userEnvLauncher) values(ctx context.Context, sessionID string) ([]string, error) {
	env := make([]string, 0, len(l.vars))
	if !l.authn {
		for _, v := range l.vars {
			val, ok := os.LookupEnv(SecretEnvName(v.Secret))
			if !ok {
				l.logger.Error("no value for a per-user variable", "session", sessionID, "variable", v.Name, "secret", v.Secret,
					"hint", "set "+SecretEnvName(v.Secret)+" in the bridge's environment")
				return nil, fmt.Errorf("%w for session %s: the server needs %s, and the bridge has no value for it (secret %q); ask its operator",
					sandbox.ErrLaunch, sessionID, v.Name, v.Secret)
			}
			env = append(env, v.Name+"="+val)
		}
		return env, nil
	}
	p := auth.FromContext(ctx)
	if p == nil || (ctx.Value(statelessKey{}) != nil && !l.legacy) {
		// The 2026-07-28 pool shares a modern child among principals, and
		// starts some children apart from any request (spares, the era
		// probe): no such child may hold one user's credentials. A legacy
		// child it starts for a request is that request's principal's
		// alone.
		return nil, fmt.Errorf("%w for session %s: this server takes per-user credentials (%s), which the bridge gives to sessions of the 2025 revisions only; connect with protocol version 2025-11-25",
			sandbox.ErrLaunch, sessionID, l.names())
	}
	who, err := principalDir(p)
	if err != nil {
		return nil, fmt.Errorf("%w for session %s: %v", sandbox.ErrLaunch, sessionID, err)
	}
	for _, v := range l.vars {
		var val string
		err := errNoSecret
		if l.dir != "" {
			val, err = readSecret(filepath.Join(l.dir, who, v.Secret))
		}
		if err != nil {
			l.logger.Error("no usable value for a per-user variable", "session", sessionID, "principal", who, "variable", v.Name, "secret", v.Secret,
				"err", err, "hint", "put it in --secrets-dir/PRINCIPAL/SECRET, mode 0600, owned by the bridge's user")
			return nil, fmt.Errorf("%w for session %s: the server needs %s, and no credential %q is set up for you (principal %s); ask the bridge's operator",
				sandbox.ErrLaunch, sessionID, v.Name, v.Secret, who)
		}
		env = append(env, v.Name+"="+val)
	}
	return env, nil
}

func (l *userEnvLauncher) names() string {
	var n []string
	for _, v := range l.vars {
		n = append(n, v.Name)
	}
	return strings.Join(n, ", ")
}

type statelessKey struct{}

// statelessLaunch marks the context of a launch by the 2026-07-28 pool.
func statelessLaunch(ctx context.Context) context.Context {
	return context.WithValue(ctx, statelessKey{}, true)
}

// UserEnvEra is the child era of a server's 2026-07-28 pool once it has
// per-user variables served to authenticated principals (perUser): the
// pool must then run legacy children, which it keys by principal, so auto
// becomes legacy and modern is refused.
func UserEnvEra(perUser bool, era pool.Era) (pool.Era, error) {
	switch {
	case !perUser:
		return era, nil
	case era == pool.EraModern:
		return era, errors.New("--user-env with authentication needs --child-era legacy (or auto): a modern child serves every user of the pool")
	case era == pool.EraAuto:
		return pool.EraLegacy, nil
	}
	return era, nil
}

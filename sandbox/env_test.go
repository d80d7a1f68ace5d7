package sandbox

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
)

func init() {
	// Prints its whole environment, one entry per line, and exits.
	children["environ"] = func() {
		for _, kv := range os.Environ() {
			io.WriteString(os.Stdout, kv+"\n")
		}
	}
}

// A local server gets the allowlist, what the operator passes, and the
// owner mark: never the bridge's tokens or secrets.
func TestLocalEnvScrubbed(t *testing.T) {
	t.Setenv("BRIDGE_AUTH_TOKENS", "token-secret")
	t.Setenv("BRIDGE_AFFINITY_SECRET", "affinity-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
	t.Setenv("LC_TIME", "C")
	t.Setenv("TZ", "UTC")
	t.Setenv(childEnv, "environ")
	t.Setenv("GORACE", os.Getenv("GORACE")+" atexit_sleep_ms=0")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, supervised := range []bool{false, true} {
		opts := &LocalOptions{
			Command: exe,
			// What the operator passes: the test's child mode, and a
			// BRIDGE_ name that must not pass even so.
			Env:    []string{childEnv + "=environ", "GORACE=" + os.Getenv("GORACE"), "GIVEN=yes", "BRIDGE_SNEAKY=1"},
			Logger: slog.New(newLogRecorder()),
		}
		if supervised {
			opts.Supervisor = []string{exe, SuperviseArg}
		}
		l := NewLocal(opts)
		defer l.Close()
		p, err := l.Launch(t.Context(), "sess-env")
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(p.Stdout())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		p.Stop(bounded(t))
		allow := strings.Split(DefaultEnvAllow, ",")
		got := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, value, _ := strings.Cut(kv, "=")
			got[name] = value
			allowed := slices.ContainsFunc(allow, func(a string) bool {
				p, ok := strings.CutSuffix(a, "*")
				return name == a || ok && strings.HasPrefix(name, p)
			})
			if !allowed && !slices.Contains([]string{childEnv, "GORACE", "GIVEN", OwnerEnv}, name) {
				t.Errorf("supervised=%v: the server got %s, which is neither allowed nor given", supervised, kv)
			}
		}
		if got["GIVEN"] != "yes" || got["LC_TIME"] != "C" || got["TZ"] != "UTC" {
			t.Errorf("supervised=%v: GIVEN=%q LC_TIME=%q TZ=%q, want yes, C, UTC", supervised, got["GIVEN"], got["LC_TIME"], got["TZ"])
		}
		// Under the supervisor, each server's mark is the bridge's and its
		// own number (the session of its orphans).
		if supervised {
			n, ok := strings.CutPrefix(got[OwnerEnv], ownerMark()+"/")
			if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
				t.Errorf("supervised: %s=%q, want %q/<number>", OwnerEnv, got[OwnerEnv], ownerMark())
			}
		} else if got[OwnerEnv] != ownerMark() {
			t.Errorf("unsupervised: %s=%q, want %q", OwnerEnv, got[OwnerEnv], ownerMark())
		}
		if strings.Contains(string(out), "secret") || strings.Contains("\n"+string(out), "\nBRIDGE_") {
			t.Errorf("supervised=%v: the server's environment holds a secret or a BRIDGE_ variable:\n%s", supervised, out)
		}
	}
}

func TestParseEnv(t *testing.T) {
	lookup := func(n string) (string, bool) {
		if n == "SET" {
			return "from-bridge", true
		}
		return "", false
	}
	got, err := ParseEnv([]string{"A=1", "B=x=y", "SET", "UNSET", "E="}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "B=x=y", "SET=from-bridge", "E="}; !slices.Equal(got, want) {
		t.Errorf("ParseEnv = %q, want %q", got, want)
	}
	for _, bad := range []string{"BRIDGE_AUTH_TOKENS", "bridge_affinity_secret=x", "=x", "", OwnerEnv + "=x"} {
		if _, err := ParseEnv([]string{bad}, lookup); err == nil {
			t.Errorf("ParseEnv(%q) succeeded, want an error", bad)
		} else {
			t.Logf("ParseEnv(%q): %v", bad, err)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// readmeCommands returns the shell commands of README.md's ```sh blocks:
// one per line, a line ending in "\" joined to the next, comments cut.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, pending := false, ""
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```sh":
			in = true
			continue
		case in && trimmed == "```":
			in = false
			continue
		case !in:
			continue
		}
		if c, ok := strings.CutSuffix(trimmed, `\`); ok {
			pending += c + " "
			continue
		}
		cmd := strings.TrimSpace(shellComment.ReplaceAllString(pending+trimmed, ""))
		pending = ""
		if cmd != "" {
			cmds = append(cmds, strings.Join(strings.Fields(cmd), " "))
		}
	}
	return cmds
}

// A comment after a command: " # ..." (no "#" inside README's quoted
// arguments is preceded by a blank).
var shellComment = regexp.MustCompile(`\s+#\s.*$`)

// readmeRule says what TestREADMECommands does with the commands that
// match: skip them (skip, the reason), run them to their end (exit 0,
// stdout holding want), or serve (start them, wait for "bridge
// listening", call tools/list at path with the Go SDK client, stop them).
type readmeRule struct {
	match string // a regular expression over the whole command
	skip  string
	run   bool
	want  string // run: in the output
	serve bool
	path  string // serve: the MCP endpoint
	needs string // a program the command needs: skipped without it
}

// readmeRules classify every command of README.md. A command that matches
// none fails the test: a new command gets a rule, run or skipped with its
// reason.
var readmeRules = []readmeRule{
	{match: `^go test `, skip: "the test suite this test is part of"},
	{match: `example\.com`, skip: "needs a deployed bridge or an authorization server at example.com"},
	{match: `^claude `, skip: "Claude Code's CLI: not installed here, and it would change the user's client configuration"},
	{match: `^npx `, skip: "npx fetches @modelcontextprotocol/inspector from the npm registry, which this machine cannot reach"},
	{match: `^(bin/)?bridge .*-- uvx `, skip: "uvx fetches the server from PyPI, which this machine cannot reach"},
	{match: `^CGO_ENABLED=0 go build -o bin/ \./cmd/bridge \./examples/hello$`, run: true},
	{match: `^\(umask 077; openssl rand -hex 32 > tokens\.txt\)$`, run: true, needs: "openssl"},
	{match: `^printf '\{"mcpServers": .*' > servers\.json$`, run: true},
	{match: `^printf 'FROM scratch.*\| docker build -t mcp-hello -f - bin$`, run: true, needs: "docker"},
	{match: `^bin/bridge deploy aws .*--dry-run$`, run: true, want: "aws "},
	{match: `^bin/bridge --(help|version)$`, run: true},
	{match: `^bin/bridge --sandbox docker --image mcp-hello --pull never$`, serve: true, path: "/mcp", needs: "docker"},
	{match: `^bin/bridge --config servers\.json$`, serve: true, path: "/servers/hello/mcp"},
	{match: `^bin/bridge .*-- bin/hello$`, serve: true, path: "/mcp"},
}

// TestREADMECommands runs every shell command of README.md that can run
// here, as written, in order (README's deploy command failed as
// written): builds, files they write, dry runs, and bridges, each called
// with the Go SDK client at the URL README names. Commands joined with &&
// are run one by one. The bridges get BRIDGE_LISTEN=127.0.0.1:0 (a free
// port; the test runs beside others) and BRIDGE_LOG_FORMAT=json from the
// environment, their command lines are README's. The commands run in the
// repository's root, so they write bin/ (ignored by git) and, in a
// temporary directory holding a link to bin/, tokens.txt and servers.json.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bridge")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "bin"), filepath.Join(work, "bin")); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, full := range readmeCommands(t) {
		for _, cmd := range strings.Split(full, " && ") {
			r := ruleOf(cmd)
			switch {
			case r == nil:
				t.Errorf("README command without a rule in readmeRules (run it here, or skip it with its reason): %s", cmd)
				continue
			case r.skip != "":
				skipped = append(skipped, cmd+"\n    skipped: "+r.skip)
				continue
			case r.needs != "" && !have(r.needs):
				skipped = append(skipped, cmd+"\n    skipped: needs "+r.needs+", not found here")
				continue
			}
			dir := work
			if strings.HasPrefix(cmd, "CGO_ENABLED=0 go build") {
				dir = root
			}
			c := exec.Command("bash", "-c", cmd)
			c.Dir = dir
			c.Env = append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"),
				"BRIDGE_LISTEN=127.0.0.1:0", "BRIDGE_LOG_FORMAT=json")
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if r.run {
				out, err := c.CombinedOutput()
				if err != nil || !strings.Contains(string(out), r.want) {
					t.Errorf("README command failed as written: %s\n%v\n%s", cmd, err, out)
				}
				continue
			}
			serveREADME(t, c, cmd, r.path)
		}
	}
	t.Logf("README commands not run here (%d):\n  %s", len(skipped), strings.Join(skipped, "\n  "))
}

func ruleOf(cmd string) *readmeRule {
	for i := range readmeRules {
		if regexp.MustCompile(readmeRules[i].match).MatchString(cmd) {
			return &readmeRules[i]
		}
	}
	return nil
}

func have(program string) bool {
	if _, err := exec.LookPath(program); err != nil {
		return false
	}
	if program == "docker" {
		return exec.Command("docker", "version").Run() == nil
	}
	return true
}

// serveREADME starts a bridge of README, calls tools/list on it at path,
// and stops it with SIGTERM, which it must obey (exit 0).
func serveREADME(t *testing.T, c *exec.Cmd, cmd, path string) {
	t.Helper()
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			c.Wait()
		}
	}()
	url, lines := "", []string{}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		var rec struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "bridge listening" {
			url = rec.URL
			break
		}
	}
	go func() { // the rest of the log, until the bridge exits
		for sc.Scan() {
		}
	}()
	if url == "" {
		t.Errorf("README command did not start a bridge: %s\n%s", cmd, strings.Join(lines, "\n"))
		return
	}
	endpoint := strings.TrimSuffix(url, "/mcp") + path
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var httpClient *http.Client
	if strings.Contains(cmd, "--auth-token-file tokens.txt") {
		tok, err := os.ReadFile(filepath.Join(c.Dir, "tokens.txt"))
		if err != nil {
			t.Fatal(err)
		}
		httpClient = &http.Client{Transport: bearerTransport{strings.TrimSpace(string(tok))}}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "readme", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: httpClient}, nil)
	if err != nil {
		t.Errorf("README command %s: connecting to %s: %v", cmd, endpoint, err)
	} else {
		if res, err := cs.ListTools(ctx, nil); err != nil || len(res.Tools) == 0 {
			t.Errorf("README command %s: tools/list at %s: %v", cmd, endpoint, err)
		}
		cs.Close()
	}
	syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	stopped = true
	if err := c.Wait(); err != nil {
		t.Errorf("README command %s: after SIGTERM: %v", cmd, err)
	}
}

// README.md links only to files of the repository (it once linked to
// ../shared/..., which a clone does not have) and to its own headings.
func TestREADMELinks(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			// GitHub's anchors: lower case, punctuation dropped, blanks to "-".
			a := strings.Map(func(r rune) rune {
				switch {
				case r == ' ':
					return '-'
				case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f:
					return r
				}
				return -1
			}, strings.ToLower(h))
			anchors[a] = true
		}
	}
	if strings.Contains(string(data), "../") {
		t.Errorf("README.md names a path outside the repository (../)")
	}
	for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(data), -1) {
		target := m[1]
		switch {
		case strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://"):
		case strings.HasPrefix(target, "#"):
			if !anchors[target[1:]] {
				t.Errorf("README.md links to %s, which is no heading of it", target)
			}
		default:
			path, _, _ := strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join("../..", path)); err != nil {
				t.Errorf("README.md links to %s, which is not in the repository", target)
			}
		}
	}
}

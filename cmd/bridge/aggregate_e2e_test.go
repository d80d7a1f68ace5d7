package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// authRecorder is a reverse proxy in front of a remote member that
// records the Authorization header of every request it forwards.
type authRecorder struct {
	mu   sync.Mutex
	seen []string
	next http.Handler
}

func (a *authRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Header.Get("Authorization"))
	a.mu.Unlock()
	a.next.ServeHTTP(w, r)
}

func (a *authRecorder) auths() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// remoteMember runs a second bridge binary serving examples/hello behind
// a static token, reached through an authRecorder; it returns the URL of
// its MCP endpoint.
func remoteMember(t *testing.T, bridgeBin, helloBin, token string) (string, *authRecorder) {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBridgeBinary(t, bridgeBin, "--auth-token-file", tokens, "--", helloBin)
	u, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	rec := &authRecorder{next: httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + u.Path, rec
}

// aggConnect opens a session of revision version on tr.
func aggConnect(t *testing.T, tr mcp.Transport, version string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting (%s): %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolNames(t *testing.T, ctx context.Context, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var out []string
	for _, tool := range res.Tools {
		out = append(out, tool.Name)
	}
	slices.Sort(out)
	return out
}

func echoAs(ctx context.Context, cs *mcp.ClientSession, tool, s string) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": s}})
	if err != nil {
		return err
	}
	if res.IsError || len(res.Content) == 0 {
		return fmt.Errorf("%s: an error result %+v", tool, res.Content)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(got, s) {
		return fmt.Errorf("%s %q answered %q", tool, s, got)
	}
	return nil
}

// The real binary with a config file of two local members and a remote
// one (another bridge binary): /mcp lists every member's tools under
// PREFIX__NAME and routes calls, in 2025 sessions, in revision
// 2026-07-28 and over the legacy HTTP+SSE transport; a group serves its
// members only; the client's token never reaches the remote member, which
// gets the token of the configuration (from the bridge's environment);
// a reload adding a member lists its tools.
func TestConfigFileAggregate(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	remoteURL, rec := remoteMember(t, bridgeBin, helloBin, "member-token")
	t.Setenv("AGG_E2E_MEMBER_TOKEN", "member-token")
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("client-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := fmt.Sprintf(`"a": {"command": %q},
			"b": {"command": %q, "prefix": "bee"},
			"far": {"url": %q, "type": "http", "headers": {"Authorization": "Bearer ${AGG_E2E_MEMBER_TOKEN}"}}`, helloBin, helloBin, remoteURL)
	file := `{"mcpServers": {` + servers + `}, "groups": {"pair": {"servers": ["a", "far"]}}}`
	b := startConfigBridge(t, bridgeBin, file, "--auth-token-file", tokens)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	client := &http.Client{Transport: bearerTransport{"client-token"}}

	// Each aggregate path in every era: /mcp all members, the group its own
	// only (b's calls refused there).
	all := []string{"a__count", "a__countdown", "a__echo", "bee__count", "bee__countdown", "bee__echo", "far__count", "far__countdown", "far__echo"}
	pair := []string{"a__count", "a__countdown", "a__echo", "far__count", "far__countdown", "far__echo"}
	for _, p := range []struct {
		name, mcpPath, ssePath string
		want                   []string
	}{{"", "/mcp", "/sse", all}, {"group ", "/groups/pair/mcp", "/groups/pair/sse", pair}} {
		for _, c := range []struct {
			name string
			tr   mcp.Transport
			ver  string
		}{
			{p.name + "2025", &mcp.StreamableClientTransport{Endpoint: b.base + p.mcpPath, HTTPClient: client}, "2025-11-25"},
			{p.name + "2026-07-28", &mcp.StreamableClientTransport{Endpoint: b.base + p.mcpPath, HTTPClient: client}, "2026-07-28"},
			{p.name + "legacy SSE", &mcp.SSEClientTransport{Endpoint: b.base + p.ssePath, HTTPClient: client}, "2025-11-25"},
		} {
			t.Run(c.name, func(t *testing.T) {
				cs := aggConnect(t, c.tr, c.ver)
				if got := toolNames(t, ctx, cs); !slices.Equal(got, p.want) {
					t.Fatalf("%s tools/list: %v, want %v", p.mcpPath, got, p.want)
				}
				for _, tool := range []string{"a__echo", "bee__echo", "far__echo"} {
					err := echoAs(ctx, cs, tool, "via "+c.name)
					switch {
					case slices.Contains(p.want, tool) && err != nil:
						t.Fatal(err)
					case !slices.Contains(p.want, tool) && err == nil:
						t.Fatalf("%s answered through %s, which does not hold its member", tool, p.mcpPath)
					}
				}
			})
		}
	}
	t.Run("remote alone", func(t *testing.T) {
		cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/servers/far/mcp", HTTPClient: client}, "2025-11-25")
		if err := echoAs(ctx, cs, "echo", "alone"); err != nil {
			t.Fatal(err)
		}
	})
	seen := rec.auths()
	if len(seen) == 0 {
		t.Fatal("the remote member got no request")
	}
	for _, a := range seen {
		if a != "Bearer member-token" {
			t.Fatalf("the remote member got Authorization %q, want the member's own token only", a)
		}
	}

	// A reload adding a member: its tools join /mcp's list.
	b.rewrite(t, `{"mcpServers": {`+servers+fmt.Sprintf(`, "c": {"command": %q}`, helloBin)+`}, "groups": {"pair": {"servers": ["a", "far"]}}}`)
	b.waitLog(t, "configuration reloaded")
	cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp", HTTPClient: client}, "2025-11-25")
	if got := toolNames(t, ctx, cs); !slices.Contains(got, "c__echo") || !slices.Contains(got, "a__echo") {
		t.Fatalf("/mcp tools/list after the reload: %v, want c__echo among them", got)
	}
	if err := echoAs(ctx, cs, "c__echo", "new"); err != nil {
		t.Fatal(err)
	}
}

// Two servers whose prefixes would give one advertised name: the binary
// refuses to start, with one line naming both, the file, the server and
// the key; in a group, the group.
func TestConfigFileAggregateCollision(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	dir := t.TempDir()
	for _, c := range []struct{ name, file, want string }{
		{"prefix", fmt.Sprintf(`{"mcpServers": {"a": {"command": %q}, "b": {"command": %q, "prefix": "a"}}}`, helloBin, helloBin),
			`config F: server "b": key "prefix": in the aggregate at /mcp: aggregate members "a" and "b" would advertise the same names (prefixes "a" and "a" with separator "__"): give one of them another Prefix`},
		{"group", fmt.Sprintf(`{"bridge": {"no-aggregate": true}, "mcpServers": {"a": {"command": %q}, "a__b": {"command": %q}}, "groups": {"g": {"servers": ["a", "a__b"]}}}`, helloBin, helloBin),
			`config F: group "g": key "servers": aggregate members "a" and "a__b" would advertise the same names (prefixes "a" and "a__b" with separator "__"): give one of them another Prefix`},
		{"unknown member", fmt.Sprintf(`{"mcpServers": {"a": {"command": %q}}, "groups": {"g": {"servers": ["a", "z"]}}}`, helloBin),
			`config F: group "g": key "servers": "z" is not a server of mcpServers`},
		{"remote with local keys", `{"mcpServers": {"r": {"url": "http://127.0.0.1:1/mcp", "env": {"A": "1"}}}}`,
			`config F: server "r": key "env": applies to local servers only; this one is remote (url)`},
		{"header variable unset", `{"mcpServers": {"r": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${AGG_E2E_UNSET}"}}}}`,
			`config F: server "r": key "headers": Authorization names the variable AGG_E2E_UNSET, which the bridge's environment does not set`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".json")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bridgeBin, "--config", path).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; output:\n%s", err, out)
			}
			want := "bridge: " + strings.Replace(c.want, "config F", "config "+path, 1) + "\n"
			if !strings.HasPrefix(string(out), want) {
				t.Fatalf("output\n%s\nwant it to start with\n%s", out, want)
			}
		})
	}
}

// Fifty sessions of /mcp that each call one member start fifty servers of
// that member and none of the others: the others run their catalog server
// only, one for the whole bridge (issue 31: MetaMCP#162's 2,018
// processes). The bridge's own log lines count the processes.
func TestConfigFileAggregateFiftySessions(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	file := fmt.Sprintf(`{"mcpServers": {"a": {"command": %q}, "b": {"command": %q}, "c": {"command": %q}}}`, helloBin, helloBin, helloBin)
	b := startConfigBridge(t, bridgeBin, file, "--max-sessions", "100")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const sessions = 50
	for i := range sessions {
		cs := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, "2025-11-25")
		if err := echoAs(ctx, cs, "a__echo", fmt.Sprint("session ", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A reload of the same file logs a line after every start above.
	b.rewrite(t, file)
	started, catalog := map[string]int{}, map[string]int{}
	for rec := range b.logs {
		if rec["msg"] == "configuration reloaded" {
			break
		}
		if rec["msg"] == "MCP server started" {
			name, _ := rec["server_name"].(string)
			session, _ := rec["session"].(string)
			if strings.HasPrefix(session, "aggregate-catalog") {
				catalog[name]++ // may come before "bridge listening": at most one
				continue
			}
			started[name]++
		}
	}
	if want := map[string]int{"a": sessions}; fmt.Sprint(started) != fmt.Sprint(want) {
		t.Fatalf("servers started for sessions: %v, want %v", started, want)
	}
	for name, n := range catalog {
		if n > 1 {
			t.Errorf("%d catalog servers of %s, want one", n, name)
		}
	}
	t.Logf("%d sessions of /mcp calling a__echo started %v for sessions, and catalog servers %v (those logged after listening)", sessions, started, catalog)
}

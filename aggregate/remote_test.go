package aggregate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// remoteBridge serves internal/testserver through another real bridge
// (an endpoint's handler), recording the Authorization headers it gets.
func remoteBridge(t *testing.T) (url string, auths func() []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lg := logger(t)
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), testserver.Env+"=1"), StopGrace: 2 * time.Second, Logger: lg})
	e, err := endpoint.New(&endpoint.Options{
		Session: &session.Options{Launcher: session.LauncherOf(local), Logger: lg},
		Pool: &pool.Options{
			Launch: func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) },
			Era:    pool.EraLegacy, OtherVersions: bridge.SessionVersions(), Logger: lg,
		},
		Handler: &bridge.Options{Path: "/mcp", Logger: lg},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		e.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return srv.URL + "/mcp", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// A remote member (another bridge, reached with connect's launcher) is
// listed and called through the aggregate like a local one, in both eras,
// with the credentials of its configuration: the client's own
// Authorization never reaches it.
func TestRemoteMember(t *testing.T) {
	url, auths := remoteBridge(t)
	f := newFixture(t, func(o *aggregate.Options) {
		l, err := connect.NewLauncher(&connect.Options{URL: url, Token: "member-token", Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		o.Members = append(o.Members, aggregate.Member{Name: "remote", Launcher: l})
	})
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "aggregate-test", Version: "1"}, nil).
				Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{"client-token"}}},
					&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			names := listed(t, cs)
			if !slices.Contains(names, "remote__echo") || !slices.Contains(names, "test__echo") {
				t.Fatalf("tools/list: %v, want remote__echo and test__echo", names)
			}
			if got := callText(t, cs, "remote__echo", map[string]any{"text": "far"}); got != "far" {
				t.Errorf("remote__echo answered %q", got)
			}
		})
	}
	for _, a := range auths() {
		if a != "Bearer member-token" {
			t.Fatalf("the remote member got Authorization %q, want the member's own token only", a)
		}
	}
	if len(auths()) == 0 {
		t.Fatal("the remote member got no request")
	}
}

package bridge_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/affinity"
	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// statelessInstance is one bridge of a deployment: its pool signs
// requestStates with the shared secret and names its own address.
type statelessInstance struct {
	url       string
	forwarded atomic.Int64 // requests another instance forwarded here
}

func startStatelessInstance(t *testing.T, secret []byte) *statelessInstance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	self := ln.Addr().String()
	exe, _ := os.Executable()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: exe, Env: append(os.Environ(), childEnv+"=server"), StopGrace: 2 * time.Second, Logger: logger})
	p, err := pool.New(&pool.Options{
		Launch:   func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) },
		Era:      pool.EraLegacy,
		Secret:   secret,
		Instance: self,
		Logger:   logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := affinity.New(&affinity.Options{Self: self, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	fwd := bridge.NewForwarder(inst, &bridge.ForwarderOptions{Logger: logger})
	reg := session.NewRegistry(&session.Options{Launcher: session.LauncherOf(local), Logger: logger})
	h := bridge.NewHandler(reg, &bridge.Options{Stateless: p, Forward: fwd.Forward, Logger: logger})
	in := &statelessInstance{}
	srv := httptest.NewUnstartedServer(fwd.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(bridge.HopHeader) != "" {
			in.forwarded.Add(1)
		}
		h.ServeHTTP(w, r)
	})))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	in.url = srv.URL + h.Path()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		fwd.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = reg.Shutdown(ctx)
		if err := p.Close(ctx); err != nil {
			t.Errorf("closing the pool: %v", err)
		}
	})
	return in
}

// Two bridges behind a round-robin proxy: every retry of an MRTR call lands
// on the other instance, which verifies its requestState and forwards it
// to the one holding the parked call.
func TestStatelessTwoInstances(t *testing.T) {
	secret := []byte("a secret shared by both instances, 32+ bytes")
	a, b := startStatelessInstance(t, secret), startStatelessInstance(t, secret)
	var n atomic.Int64
	targets := []*url.URL{mustURL(t, a.url), mustURL(t, b.url)}
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := targets[n.Add(1)%2]
			pr.SetURL(u)
			pr.Out.URL.Path = u.Path
		},
		FlushInterval: -1,
	})
	defer proxy.Close()
	cs := connect(t, proxy.URL, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Hopper"}}, nil
		},
	})
	for i := range 4 {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"text": "who?"}})
		if err != nil || res.Content[0].(*mcp.TextContent).Text != "accept: Hopper" {
			t.Fatalf("call %d: %+v %v", i, res, err)
		}
	}
	if a.forwarded.Load()+b.forwarded.Load() == 0 {
		t.Fatal("no retry was forwarded: the round-robin proxy should have sent some to the other instance")
	}

	// A state from a deployment with another secret names its own
	// instance: b refuses it, and never forwards it there.
	other := startStatelessInstance(t, []byte("another deployment's secret, 32+ bytes long"))
	state := firstRound(t, other.url, statelessHeaders("tools/call", "elicit"))
	_, ans := postAnswer(t, b.url, elicitCall(2, "who?", state, `{"input-1":{"action":"accept","content":{"name":"x"}}}`), statelessHeaders("tools/call", "elicit"))
	if ans.Error == nil || ans.Error.Code != -32602 || !strings.Contains(ans.Error.Message, "failed verification") {
		t.Fatalf("foreign state: %+v", ans.Error)
	}
	if n := other.forwarded.Load(); n != 0 {
		t.Fatalf("a foreign state was forwarded %d times", n)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

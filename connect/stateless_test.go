package connect_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/connect"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

var (
	everythingOnce sync.Once
	everythingBin  string
	everythingErr  error
)

// everythingServer builds the Go SDK's conformance everything-server, a
// stdio server of both eras with a tool whose region argument carries the
// x-mcp-header annotation "Region".
func everythingServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the SDK's everything-server")
	}
	everythingOnce.Do(func() {
		everythingBin = filepath.Join(binDir, "everything-server")
		out, err := exec.Command("go", "build", "-o", everythingBin,
			"github.com/modelcontextprotocol/go-sdk/conformance/everything-server").CombinedOutput()
		if err != nil {
			everythingErr = &buildError{err, string(out)}
		}
	})
	if everythingErr != nil {
		t.Fatalf("building the everything-server: %v", everythingErr)
	}
	return everythingBin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// startStatelessBridge serves a real bridge with both front ends (sessions
// for 2025 clients, the stateless one of 2026-07-28) in front of the
// everything-server, with one accepted token.
func startStatelessBridge(t *testing.T, token string) string {
	t.Helper()
	server := everythingServer(t)
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	local := sandbox.NewLocal(&sandbox.LocalOptions{Command: server, Env: os.Environ(), StopGrace: 2 * time.Second, Logger: logger})
	p, err := pool.New(&pool.Options{
		Launch:        func(ctx context.Context, name string) (peer.Process, error) { return local.Launch(ctx, name) },
		Logger:        logger,
		OtherVersions: bridge.SessionVersions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := session.NewRegistry(&session.Options{Launcher: session.LauncherOf(local), Logger: logger})
	h := bridge.NewHandler(reg, &bridge.Options{Stateless: p, AuthTokens: []string{token}, Logger: logger})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the registry: %v", err)
		}
		if err := p.Close(ctx); err != nil {
			t.Errorf("closing the pool: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + h.Path()
}

// TestConnectBothEras: the Go SDK's stdio client reaches the bridge
// through bridge connect in 2026-07-28 (its default: server/discover, the
// headers of the revision derived by bridge connect, Mcp-Param-Region in
// Base64 form for a value that needs it, before the client listed the
// tools and after, an elicitation as an MRTR round)
// and in 2025-11-25 (a session).
func TestConnectBothEras(t *testing.T) {
	url := startStatelessBridge(t, "tok")
	for _, tc := range []struct{ version, want string }{
		{"", "2026-07-28"},
		{"2025-11-25", "2025-11-25"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cmd, stderr := connectCmd(t, url, []string{"BRIDGE_CONNECT_TOKEN=tok"})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "connect-test-client", Version: "1.0.0"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada", "username": "ada"}}, nil
				},
			})
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				if cmd.ProcessState == nil {
					cmd.Wait()
				}
				t.Fatalf("connecting through bridge connect: %v; its stderr:\n%s", err, stderr)
			}
			defer cs.Close()
			if v := cs.InitializeResult().ProtocolVersion; v != tc.want {
				t.Fatalf("negotiated %q, want %q; stderr:\n%s", v, tc.want, stderr)
			}
			call := func(name string, args map[string]any, want string) {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
				if err != nil {
					t.Fatalf("%s: %v; stderr:\n%s", name, err, stderr)
				}
				var texts []string
				for _, c := range res.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						texts = append(texts, tc.Text)
					}
				}
				if got := strings.Join(texts, " "); res.IsError || !strings.Contains(got, want) {
					t.Errorf("%s: %q (error %v), want %q in it", name, got, res.IsError, want)
				}
			}
			// Called before any tools/list of the client's: bridge connect
			// lists the tools itself for the annotations.
			call("test_x_mcp_header", map[string]any{"region": "eu-west 3 ü", "level": 2}, "region=eu-west 3 ü")
			if _, err := cs.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			call("test_simple_text", nil, "simple text")
			call("test_x_mcp_header", map[string]any{"region": "us-east1"}, "region=us-east1")
			if tc.want == "2026-07-28" {
				call("test_input_required_result_elicitation", nil, "Ada")
			} else {
				call("test_elicitation", map[string]any{"message": "who?"}, "accept")
			}
		})
	}
}

// TestConnectStatelessCancel: a request of revision 2026-07-28 that its
// client cancels has its stream closed ("closing the SSE response stream
// is itself the cancellation signal"), and the notification is not sent;
// the request carried the headers of the revision.
func TestConnectStatelessCancel(t *testing.T) {
	type seen struct {
		method, name, version string
		body                  string
	}
	posts := make(chan seen, 10)
	closed := make(chan struct{})
	var closeOnce sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Mcp-Method") == "tools/list" {
			// bridge connect's own listing, for the annotations of "slow".
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":"bridge-connect-1","result":{"tools":[{"name":"slow","inputSchema":{"type":"object"}}]}}`)
			return
		}
		posts <- seen{r.Header.Get("Mcp-Method"), r.Header.Get("Mcp-Name"), r.Header.Get("Mcp-Protocol-Version"), string(body)}
		sseHeader(w)
		io.WriteString(w, ": working\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		closeOnce.Do(func() { close(closed) })
	}))
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()
	inR, inW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(ctx, inR, io.Discard, &connect.Options{URL: srv.URL, Transport: connect.TransportStreamable,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	}()
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	io.WriteString(inW, `{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"slow","arguments":{},`+meta+`}}`+"\n")
	got := <-posts
	if got.method != "tools/call" || got.name != "slow" || got.version != "2026-07-28" {
		t.Errorf("headers Mcp-Method %q, Mcp-Name %q, Mcp-Protocol-Version %q", got.method, got.name, got.version)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1"}}`+"\n")
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the stream of the cancelled request stayed open")
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	select {
	case p := <-posts:
		t.Errorf("another POST: %+v", p)
	default:
	}
}

// TestConnectTSClient: the TypeScript SDK 2.4 stdio client reaches the
// bridge through bridge connect in 2026-07-28, pinned to it and in auto
// mode (which probes with server/discover on a sibling process).
func TestConnectTSClient(t *testing.T) {
	peers := npmPeers(t)
	url := startStatelessBridge(t, "tok")
	bin := bridgeBin(t)
	for _, mode := range []string{"pin", "auto"} {
		t.Run(mode, func(t *testing.T) {
			script, err := os.ReadFile("testdata/ts-stdio-client.mjs")
			if err != nil {
				t.Fatal(err)
			}
			// Node resolves packages from the script's directory.
			dst := filepath.Join(peers, "connect-ts-stdio-client.mjs")
			if err := os.WriteFile(dst, script, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(peers, "node22"), dst, mode, bin, url)
			cmd.Env = append(os.Environ(), "BRIDGE_CONNECT_TOKEN=tok")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var got map[string]any
			if jerr := json.Unmarshal(out, &got); jerr != nil || err != nil {
				t.Fatalf("TS client: %v\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			t.Logf("the TS client saw %v", got)
			if got["version"] != "2026-07-28" {
				t.Errorf("negotiated %v, want 2026-07-28", got["version"])
			}
			for k, want := range map[string]string{"simple": "simple text", "header": "region=eu-west 3 ü", "elicit": "ts-"} {
				if s, _ := got[k].(string); !strings.Contains(s, want) {
					t.Errorf("%s = %q, want %q in it", k, got[k], want)
				}
			}
		})
	}
}

func npmPeers(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Node peers")
	}
	dir := os.Getenv("MCP_PEERS_DIR")
	if dir == "" {
		t.Skip("MCP_PEERS_DIR is not set: install the npm peers with ../shared/npm-peers/install DIR and set MCP_PEERS_DIR=DIR (.ci/run does)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node22")); err != nil {
		t.Skipf("no npm peers in %s (install them with ../shared/npm-peers/install %s)", dir, dir)
	}
	return dir
}

// TestConnectListsToolsForHeaders: a 2026-07-28 tools/call for a tool no
// tools/list answer has shown makes bridge connect list the tools itself
// (here answered on an SSE stream, after a notification), and the call
// carries its Mcp-Param header; nothing of the listing reaches stdout.
func TestConnectListsToolsForHeaders(t *testing.T) {
	var region atomic.Value
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(body, &m)
		switch r.Header.Get("Mcp-Method") {
		case "tools/list":
			sseHeader(w)
			io.WriteString(w, `data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"listing"}}`+"\n\n")
			io.WriteString(w, `data: {"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[{"name":"geo","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}]}}`+"\n\n")
		case "tools/call":
			region.Store(r.Header.Get("Mcp-Param-Region"))
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	got, _ := runHostile(t, handler, connect.Options{},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"geo","arguments":{"region":"eu-west1"},`+meta+`}}`)
	if got != `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}` {
		t.Errorf("stdout got %q, want the call's answer only", got)
	}
	if v, _ := region.Load().(string); v != "eu-west1" {
		t.Errorf("Mcp-Param-Region %q, want eu-west1", v)
	}
}

// TestConnectRetriesHeaderMismatch: the tool's schema changed since the
// tools/list answer bridge connect saw (it now declares Region); the
// remote refuses the call with HeaderMismatch, and bridge connect lists
// the tools again and retries it with the header, once.
func TestConnectRetriesHeaderMismatch(t *testing.T) {
	var lists, calls atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(body, &m)
		w.Header().Set("Content-Type", "application/json")
		switch r.Header.Get("Mcp-Method") {
		case "tools/list":
			schema := `{"type":"object","properties":{"region":{"type":"string"}}}`
			if lists.Add(1) > 1 {
				schema = `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`
			}
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[{"name":"geo","inputSchema":`+schema+`}]}}`)
		case "tools/call":
			calls.Add(1)
			if r.Header.Get("Mcp-Param-Region") != "eu-west1" {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32020,"message":"Header mismatch: exactly one Mcp-Param-Region header is required"}}`)
				return
			}
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	got, _ := runHostile(t, handler, connect.Options{},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"geo","arguments":{"region":"eu-west1"},`+meta+`}}`)
	if got != `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}` {
		t.Errorf("stdout got %q, want the call's answer", got)
	}
	if lists.Load() != 2 || calls.Load() != 2 {
		t.Errorf("%d listings and %d calls, want 2 and 2", lists.Load(), calls.Load())
	}
}

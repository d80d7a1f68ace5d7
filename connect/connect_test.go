package connect_test

// The tests run the real `bridge connect` binary as the stdio server of the
// Go SDK's stdio client (mcp.CommandTransport), in front of a real bridge
// (its handler in-process) whose stdio server is this test binary
// re-executed, and in front of the SDK's legacy SSE handler.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

const childEnv = "CONNECT_TEST_CHILD"

var binDir string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := newServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var err error
	if binDir, err = os.MkdirTemp("", "connect-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type textArgs struct {
	Text string `json:"text"`
}

type nArgs struct {
	N int `json:"n"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// newServer is the MCP server behind the remote: echo, progress (n
// notifications, then an answer) and elicit (a request to the client during
// the call).
func newServer() *mcp.Server {
	var server *mcp.Server
	// A change of the client's roots, a notification, makes the server ask
	// for them (a request outside any call: it travels on the standalone
	// stream) and add a tool named after the first, which it announces
	// with notifications/tools/list_changed, again outside any call.
	server = mcp.NewServer(&mcp.Implementation{Name: "connect-test-server", Version: "1.0.0"}, &mcp.ServerOptions{
		RootsListChangedHandler: func(ctx context.Context, req *mcp.RootsListChangedRequest) {
			res, err := req.Session.ListRoots(ctx, nil)
			if err != nil || len(res.Roots) == 0 {
				fmt.Fprintln(os.Stderr, "child: roots/list:", err)
				return
			}
			mcp.AddTool(server, &mcp.Tool{Name: "root:" + res.Roots[0].URI}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text("rooted"), nil, nil
			})
		},
	})
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		return text("echo: " + a.Text), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, a nArgs) (*mcp.CallToolResult, any, error) {
		for i := range a.N {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: float64(a.N),
			}); err != nil {
				return nil, nil, err
			}
		}
		return text(fmt.Sprintf("sent %d", a.N)), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "elicit"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: a.Text,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
				"name": map[string]any{"type": "string"}}},
		})
		if err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("%s: %v", res.Action, res.Content["name"])), nil, nil
	})
	return server
}

var (
	buildOnce sync.Once
	buildErr  error
)

// bridgeBin builds the bridge binary once per test run.
func bridgeBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the bridge binary")
	}
	bin := filepath.Join(binDir, "bridge")
	buildOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", bin, "../cmd/bridge").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ../cmd/bridge: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// startBridge serves a real bridge in front of this test binary as its
// stdio server, with one accepted token.
func startBridge(t *testing.T, token string) (string, *session.Registry) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := session.NewRegistry(&session.Options{
		Launcher: session.LauncherOf(sandbox.NewLocal(&sandbox.LocalOptions{
			Command: exe, Env: append(os.Environ(), childEnv+"=1"), StopGrace: 2 * time.Second, Logger: logger,
		})),
		Logger: logger,
	})
	h := bridge.NewHandler(reg, &bridge.Options{AuthTokens: []string{token}, Logger: logger})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutting down the registry: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + h.Path(), reg
}

// testWriter sends logs to t.Log, and drops them once the test is over.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// connectCmd is `bridge connect URL args...` with env added; its stderr is
// kept in the returned buffer (safe to read once the process has exited).
func connectCmd(t *testing.T, url string, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(bridgeBin(t), append([]string{"connect", url}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// exercise runs the calls every remote must carry: a tool call, a server →
// client request (elicitation) answered by the stdio client, and progress.
func exercise(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	progress := make(chan float64, 10)
	client := mcp.NewClient(&mcp.Implementation{Name: "connect-test-client", Version: "1.0.0"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "answer to " + req.Params.Message}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Progress
		},
	})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		if cmd.ProcessState == nil {
			cmd.Wait()
		}
		t.Fatalf("connecting through bridge connect: %v; its stderr:\n%s", err, cmd.Stderr)
	}
	defer cs.Close()

	wantText := func(name string, args any, want string) {
		t.Helper()
		params := &mcp.CallToolParams{Name: name, Arguments: args}
		if name == "progress" {
			params.Meta = mcp.Meta{"progressToken": "tok-1"}
		}
		res, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Fatalf("tools/call %s: %v", name, err)
		}
		if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != want {
			t.Fatalf("tools/call %s: got %+v, want %q", name, res.Content, want)
		}
	}
	wantText("echo", textArgs{"hi"}, "echo: hi")
	wantText("elicit", textArgs{"your name?"}, "accept: answer to your name?")
	wantText("progress", nArgs{3}, "sent 3")
	// Progress notifications travel on the call's stream ahead of its
	// answer; the SDK client hands them to the handler asynchronously.
	for want := 1.0; want <= 3; want++ {
		select {
		case got := <-progress:
			if got != want {
				t.Errorf("progress notification %v, want %v", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("progress notification %v never arrived", want)
		}
	}
}

// TestConnectBridge: the stdio client reaches the bridge's server through
// bridge connect, with the token from the environment; closing stdin
// ends the bridge session (DELETE) before bridge connect exits.
func TestConnectBridge(t *testing.T) {
	url, reg := startBridge(t, "s3cret")
	cmd, stderr := connectCmd(t, url, []string{"BRIDGE_CONNECT_TOKEN=s3cret"})
	exercise(t, cmd)
	// cs.Close closed stdin and waited for the process.
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("bridge connect exited %d; stderr:\n%s", code, stderr)
	}
	if n := reg.Len(); n != 0 {
		t.Errorf("%d bridge sessions alive after bridge connect exited, want 0 (no DELETE?)", n)
	}
}

// TestConnectTokenFile reads the token from --token-file.
func TestConnectTokenFile(t *testing.T) {
	url, _ := startBridge(t, "from-a-file")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("# the bridge's token\nfrom-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, _ := connectCmd(t, url, nil, "--token-file", file, "--transport", "streamable")
	exercise(t, cmd)
}

// TestConnectUnauthorized: a refused token ends bridge connect with status
// 1 and a message naming the variable that supplied it.
func TestConnectUnauthorized(t *testing.T) {
	url, _ := startBridge(t, "right")
	for _, tc := range []struct {
		name, env, want string
	}{
		{"wrong token", "BRIDGE_CONNECT_TOKEN=wrong", "answered 401 Unauthorized to server/discover (WWW-Authenticate: Bearer"},
		{"no token", "", "no token was sent: give one in BRIDGE_CONNECT_TOKEN or a file named by --token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, stderr := connectCmd(t, url, []string{tc.env})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "connect-test-client", Version: "1.0.0"}, nil)
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err == nil {
				cs.Close()
				t.Fatal("connected with a refused token")
			}
			if cmd.ProcessState == nil {
				cmd.Wait()
			}
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr:\n%s\nwant it to contain %q", stderr, tc.want)
			}
			if tc.env != "" && !strings.Contains(stderr.String(), "the token from BRIDGE_CONNECT_TOKEN is missing or invalid") {
				t.Errorf("stderr:\n%s\nwant it to name BRIDGE_CONNECT_TOKEN", stderr)
			}
		})
	}
}

// TestConnectLegacySSE: with --transport auto, a 2024-11-05 HTTP+SSE
// server refuses the initialize POST with a 4xx status, and bridge connect
// falls back to its GET stream; the extra header reaches it.
func TestConnectLegacySSE(t *testing.T) {
	server := newServer()
	var mu sync.Mutex
	var seen []string
	sse := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Header.Get("X-Tenant"))
		mu.Unlock()
		sse.ServeHTTP(w, r)
	}))
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()
	cmd, stderr := connectCmd(t, srv.URL, nil, "--header", "X-Tenant: blue")
	exercise(t, cmd)
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("bridge connect exited %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "falling back to HTTP+SSE") {
		t.Errorf("stderr:\n%s\nwant the fallback logged", stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if !strings.HasSuffix(s, " blue") {
			t.Errorf("a request without the extra header: %q", s)
		}
	}
	if len(seen) == 0 || !strings.HasPrefix(seen[len(seen)-1], "POST") {
		t.Errorf("requests seen: %q", seen)
	}
}

// cutProxy forwards to a remote, and cuts the connection of the POST whose
// body holds cut right after passing on its first message event, the way
// a network failure would; it counts the GETs that resume a stream.
type cutProxy struct {
	target  string
	cut     string
	mu      sync.Mutex
	cutDone bool
	resumes []string // the Last-Event-ID of each resuming GET
}

func (p *cutProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p.mu.Lock()
		p.resumes = append(p.resumes, id)
		p.mu.Unlock()
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	p.mu.Lock()
	cut := r.Method == http.MethodPost && !p.cutDone && bytes.Contains(body, []byte(p.cut))
	if cut {
		p.cutDone = true
	}
	p.mu.Unlock()
	rc := http.NewResponseController(w)
	br := bufio.NewReader(resp.Body)
	sawData := false
	for {
		line, err := br.ReadBytes('\n')
		w.Write(line)
		rc.Flush()
		if err != nil {
			return
		}
		if bytes.HasPrefix(line, []byte("data:")) && len(bytes.TrimSpace(line)) > len("data:") {
			sawData = true
		}
		if cut && sawData && len(bytes.TrimSpace(line)) == 0 {
			panic(http.ErrAbortHandler) // the event is through; the connection breaks
		}
	}
}

// TestConnectResumesBrokenStream: the connection of a call's stream breaks
// right after the server's elicitation request; bridge connect resumes the
// stream with GET and Last-Event-ID, and the call's answer arrives on it.
func TestConnectResumesBrokenStream(t *testing.T) {
	url, _ := startBridge(t, "tok")
	p := &cutProxy{target: url, cut: `"name":"elicit"`}
	srv := httptest.NewServer(p)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()
	cmd, stderr := connectCmd(t, srv.URL+"/mcp", []string{"BRIDGE_CONNECT_TOKEN=tok"})
	exercise(t, cmd)
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("bridge connect exited %d; stderr:\n%s", code, stderr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cutDone || len(p.resumes) == 0 {
		t.Fatalf("cut %v, resumes %q: want the elicit stream cut and resumed", p.cutDone, p.resumes)
	}
}

// TestConnectStandaloneStream: what the server sends outside any request
// (a roots/list request, a tools/list_changed notification) reaches the
// stdio client through the standalone GET stream bridge connect opens.
func TestConnectStandaloneStream(t *testing.T) {
	url, _ := startBridge(t, "tok")
	cmd, _ := connectCmd(t, url, []string{"BRIDGE_CONNECT_TOKEN=tok"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	changed := make(chan struct{}, 10)
	client := mcp.NewClient(&mcp.Implementation{Name: "connect-test-client", Version: "1.0.0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting through bridge connect: %v", err)
	}
	defer cs.Close()
	client.AddRoots(&mcp.Root{URI: "file:///work"})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no tools/list_changed notification")
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "root:file:///work"})
	if err != nil || res.IsError {
		t.Fatalf("calling the tool named after the root: %v %+v", err, res)
	}
}

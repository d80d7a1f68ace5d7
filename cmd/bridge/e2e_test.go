package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The bridge supervises its local servers with its own binary: in
	// tests that call serve, the test binary (see sandbox/supervise.go).
	if len(os.Args) > 1 && os.Args[1] == sandbox.SuperviseArg {
		sandbox.Supervise(os.Args[2:])
	}
	// It also plays a bridge that logs many lines and exits
	// (TestBridgeBinaryLogKeepsLastLines).
	if os.Getenv(fakeLoggerEnv) != "" {
		runFakeLogger()
	}
	// The test binary also plays servers (local_e2e_test.go).
	if mode := os.Getenv(e2eChildEnv); mode != "" {
		runE2EChild(mode)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	}))
}

// The binaries the end-to-end tests run, built once per test binary (each
// build took seconds of a loaded machine, and every test built its own).
// Static Linux binaries for this machine, so that a FROM scratch image can
// run them too. binDir is removed at the end of TestMain.
var (
	binOnce  sync.Once
	binDir   string
	binErr   error
	bridgeSt string // the bridge
	helloSt  string // examples/hello
)

// sharedBinaries returns the bridge and the example server, building them
// on the first call.
func sharedBinaries(t testing.TB) (bridgeBin, helloBin string) {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "bridge-e2e-")
		if binErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{{"bridge", "."}, {"hello", "../../examples/hello"}} {
			// GOFLAGS from the environment (build tags, overlays) apply to
			// these builds as to the test binary's.
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, b.out), b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		bridgeSt, helloSt = filepath.Join(binDir, "bridge"), filepath.Join(binDir, "hello")
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bridgeSt, helloSt
}

// buildBinaries is sharedBinaries for the end-to-end tests that -short skips.
func buildBinaries(t testing.TB) (bridgeBin, helloBin string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds binaries")
	}
	return sharedBinaries(t)
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc: cannot find child processes")
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; cut at the last ')'.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// bridgeProc is the bridge binary running in a test.
type bridgeProc struct {
	cmd     *exec.Cmd
	url     string
	started chan int      // the pid of each MCP server the bridge logs as started
	stderr  chan string   // the servers' stderr lines, as the bridge logs them
	done    chan []string // the log lines, once the process closed stderr
}

// startBridgeBinary runs the bridge with --listen 127.0.0.1:0 and JSON logs,
// and returns once it logged its URL.
func startBridgeBinary(t testing.TB, bin string, args ...string) *bridgeProc {
	t.Helper()
	args = append([]string{"--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
	cmd := exec.Command(bin, args...)
	// An os.Pipe, not StderrPipe: Wait closes StderrPipe's read end, which
	// may still hold the last lines when a test reads done after Wait.
	// This read end is the reader's: it gets end of file once the bridge
	// and every descendant holding the write end have exited (the test
	// closes its copy once the process has it), so done holds every line.
	stderr, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		stderr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		// A descendant may still hold the write end: the reader stops
		// here, at the end of the test, rather than leak.
		stderr.Close()
	})
	urls := make(chan string, 1)
	p := &bridgeProc{cmd: cmd, started: make(chan int, 1024), stderr: make(chan string, 1024), done: make(chan []string, 1)}
	go func() {
		var lines []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			var rec struct {
				Msg, URL, Line string
				PID            int
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				switch rec.Msg {
				case "bridge listening":
					urls <- rec.URL
				case "MCP server started":
					select {
					case p.started <- rec.PID:
					default:
					}
				case "server stderr":
					select {
					case p.stderr <- rec.Line:
					default:
					}
				}
			}
		}
		p.done <- lines
		close(urls)
	}()
	select {
	case url, ok := <-urls:
		if !ok {
			t.Fatalf("the bridge exited before listening:\n%s", strings.Join(<-p.done, "\n"))
		}
		p.url = url
	case <-time.After(120 * time.Second):
		t.Fatal("the bridge never said it was listening")
	}
	return p
}

// fakeLoggerEnv makes the test binary play a bridge that logs that it
// listens, then fakeLoggerLines lines, and exits.
const (
	fakeLoggerEnv   = "MCP_BRIDGE_E2E_FAKE_LOGGER"
	fakeLoggerLines = 20000
)

func runFakeLogger() {
	w := bufio.NewWriter(os.Stderr)
	fmt.Fprintln(w, `{"msg":"bridge listening","url":"http://127.0.0.1:1/mcp"}`)
	w.Flush()
	for i := range fakeLoggerLines {
		fmt.Fprintf(w, `{"msg":"line","n":%d}`+"\n", i)
	}
	fmt.Fprintln(w, `{"msg":"bridge stopped"}`)
	w.Flush()
	os.Exit(0)
}

// Tests read a bridge's log lines (done) after Wait, which closed the
// stderr pipe before they were all read: the last lines were lost under
// load ("bridge stopped" once in CI). done holds every line.
func TestBridgeBinaryLogKeepsLastLines(t *testing.T) {
	t.Setenv(fakeLoggerEnv, "1")
	p := startBridgeBinary(t, os.Args[0])
	if err := p.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	lines := <-p.done
	if len(lines) != fakeLoggerLines+2 || lines[len(lines)-1] != `{"msg":"bridge stopped"}` {
		last := ""
		if len(lines) > 0 {
			last = lines[len(lines)-1]
		}
		t.Fatalf("%d log lines read after Wait, want %d; the last: %s", len(lines), fakeLoggerLines+2, last)
	}
}

// TestShutdownOnSIGTERM runs the real binary: SIGTERM lets a call in flight
// finish, ends every session, stops every server and exits 0.
func TestShutdownOnSIGTERM(t *testing.T) {
	t.Parallel()
	bridgeBin, helloBin := buildBinaries(t)
	p := startBridgeBinary(t, bridgeBin, "--shutdown-grace", "30s", "--", helloBin)
	cmd, url := p.cmd, p.url

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	progressed := make(chan struct{}, 100)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	var sessions []*mcp.ClientSession
	for range 2 {
		// Sessions are a 2025 notion: the SDK v1.8 client speaks 2026-07-28
		// by default, and then gets the stateless front end.
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		sessions = append(sessions, cs)
	}
	// One supervisor, the bridge's only child, runs every server.
	children := childrenOf(t, cmd.Process.Pid)
	for range 2 {
		if pid := <-p.started; len(children) != 1 || !slices.Contains(childrenOf(t, children[0]), pid) {
			t.Fatalf("bridge has children %v, want one supervisor, the parent of the server %d it started", children, pid)
		}
	}

	callDone := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"from": 5}}
		params.SetProgressToken("c")
		res, err := sessions[0].CallTool(ctx, params)
		if err == nil && res.Content[0].(*mcp.TextContent).Text != "liftoff" {
			err = errors.New("unexpected result")
		}
		callDone <- err
	}()
	<-progressed // the call is in flight
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-callDone; err != nil {
		t.Fatalf("the call in flight at SIGTERM did not complete: %v", err)
	}
	// Every line first: Wait closes the stderr pipe, which may still hold
	// the last lines (end of file comes once the bridge and its
	// supervisor have exited).
	lines := <-p.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bridge exit: %v", err)
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server %d survived the bridge's shutdown", pid)
		}
	}
	log := strings.Join(lines, "\n")
	for _, want := range []string{`"msg":"shutting down"`, `"msg":"bridge stopped"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

// procState is the state letter of a process in /proc ("Z" for a zombie),
// or "" if it no longer exists.
func procState(pid int) string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return fields[0]
}

// A bridge killed with SIGKILL cannot stop its servers; the kernel kills
// them (parent-death signal), even one that ignores the end of its stdin.
func TestKill9LeavesNoServer(t *testing.T) {
	t.Parallel()
	bridgeBin, _ := buildBinaries(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	// "sleep" never reads stdin and never answers: the initialize below
	// waits, with the server running, until the bridge dies.
	p := startBridgeBinary(t, bridgeBin, "--", sleep, "1000")
	go func() {
		req, _ := http.NewRequest("POST", p.url, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	var pid int
	select {
	case pid = <-p.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the bridge never started its server")
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	// The kernel sends the parent-death signal as the bridge exits, but
	// delivers it to the child asynchronously; nothing announces the
	// child's death to this test (it is not its parent), so look until it
	// is dead or a zombie.
	deadline := time.Now().Add(30 * time.Second)
	for st := procState(pid); st != "" && st != "Z"; st = procState(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("server %d survived kill -9 of the bridge (state %s)", pid, st)
		}
		runtime.Gosched()
	}
}

// TestStatelessBinary runs the real binary with its default flags: the SDK
// v1.8 client with default options gets revision 2026-07-28 from a pool,
// and SIGTERM stops the pool's servers too.
func TestStatelessBinary(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	p := startBridgeBinary(t, bridgeBin, "--", helloBin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28", v)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "stateless"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "stateless" {
		t.Fatalf("echo: %v %v", res, err)
	}
	children := childrenOf(t, p.cmd.Process.Pid)
	if len(children) == 0 {
		t.Fatal("no pool servers under the bridge")
	}
	// A subscription open at shutdown ends gracefully: "it SHOULD respond
	// to the original subscriptions/listen request with a completion
	// result before closing the stream".
	resp := statelessPost(t, ctx, p.url, `"sub"`, "subscriptions/listen", `"notifications":{"toolsListChanged":true},`)
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if line, err := stream.ReadString('\n'); err != nil || !strings.Contains(line, "notifications/subscriptions/acknowledged") {
		t.Fatalf("listen: %q %v", line, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stream)
	if !strings.Contains(string(rest), `"id":"sub"`) || !strings.Contains(string(rest), `"resultType":"complete"`) {
		t.Errorf("the subscription did not end with a completion result: %q", rest)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("bridge exit: %v", err)
	}
	<-p.done
	for _, pid := range children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pool server %d survived the bridge's shutdown", pid)
		}
	}
}

// statelessPost sends a revision 2026-07-28 request (no session) of this
// id and method to url, with the headers and the _meta the revision
// requires; params are the members before _meta ("" or ending in a comma).
func statelessPost(t *testing.T, ctx context.Context, url, id, method, params string) *http.Response {
	t.Helper()
	return statelessPostAs(t, ctx, url, "", id, method, params)
}

// statelessPostAs is statelessPost with a bearer token ("": none).
func statelessPostAs(t *testing.T, ctx context.Context, url, token, id, method, params string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`","params":{`+params+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

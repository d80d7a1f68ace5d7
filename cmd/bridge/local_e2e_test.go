package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/proctest"
)

// e2eChildEnv selects the server the test binary plays; tests pass it to
// the bridge's servers with --env.
const e2eChildEnv = "MCP_BRIDGE_E2E_CHILD"

// runE2EChild is a server mode of the test binary. None of them answers:
// the bridge's initialize waits, with the server running, until the test
// is done with it.
func runE2EChild(mode string) {
	switch mode {
	case "forker":
		// Like npx → node, or a server that starts a browser: a child in
		// the server's group and one in a session of its own, both
		// ignoring SIGTERM and SIGHUP.
		pids := []string{strconv.Itoa(os.Getpid())}
		for _, setsid := range []bool{false, true} {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), e2eChildEnv+"=sleeper")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
			out, err := cmd.StdoutPipe()
			if err != nil {
				panic(err)
			}
			if err := cmd.Start(); err != nil {
				panic(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				panic(fmt.Sprintf("sleeper said %q, %v", line, err))
			}
			pids = append(pids, strconv.Itoa(cmd.Process.Pid))
		}
		fmt.Fprintf(os.Stderr, "pids %s\n", strings.Join(pids, " "))
	case "sleeper":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		fmt.Println("ready")
	case "environ":
		fmt.Fprintf(os.Stderr, "environ %s\n", strings.Join(os.Environ(), "\x1e"))
	case "dies":
		runDyingServer() // guards_e2e_test.go
	case "deaf":
		runDeafServer() // stalled_e2e_test.go
	case "mcp-go", "encoding-json":
		runCaseFoldChild(mode) // casefold_e2e_test.go
	case "userenv":
		runUserEnvServer() // egress_test.go
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		os.Exit(2)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// postInitialize sends an initialize that the test's servers never answer;
// it returns when the bridge is killed or the test ends.
func postInitialize(url, token string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// serverStderr returns the first server stderr line starting with prefix.
func serverStderr(t *testing.T, p *bridgeProc, prefix string) string {
	t.Helper()
	guard := time.After(60 * time.Second) // a guard against a hang, not a synchronization
	for {
		select {
		case line := <-p.stderr:
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
		case <-guard:
			t.Fatalf("the server never wrote %q on stderr", prefix)
		}
	}
}

// waitGone returns once process pid has exited, or fails the test after
// bound (proctest.WaitGone).
func waitGone(t *testing.T, pid int, bound time.Duration) {
	t.Helper()
	proctest.WaitGone(t, pid, bound, "after the bridge was killed", procState)
}

// forkerPIDs starts a session whose server forks two grandchildren and
// returns the supervisor's pid, then the server's and the grandchildren's.
func forkerPIDs(t *testing.T, p *bridgeProc) (supervisor int, pids []int) {
	t.Helper()
	go postInitialize(p.url, "")
	var server int
	select {
	case server = <-p.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the bridge never started its server")
	}
	if children := childrenOf(t, p.cmd.Process.Pid); len(children) != 1 || !slices.Contains(childrenOf(t, children[0]), server) {
		t.Fatalf("the bridge has children %v, want one supervisor, the parent of its server %d", children, server)
	} else {
		supervisor = children[0]
	}
	for _, f := range strings.Fields(serverStderr(t, p, "pids ")) {
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	}
	if len(pids) != 3 {
		t.Fatalf("the server reported pids %v, want its own and two", pids)
	}
	return supervisor, pids
}

// A bridge killed with SIGKILL leaves nothing behind: not its server, not
// what the server started, even in a session of its own.
func TestKill9EndsEveryDescendant(t *testing.T) {
	bridgeBin, _ := buildBinaries(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startBridgeBinary(t, bridgeBin, "--env", e2eChildEnv+"=forker", "--", exe)
	supervisor, pids := forkerPIDs(t, p)
	p.cmd.Process.Kill()
	p.cmd.Wait()
	for _, pid := range append([]int{supervisor}, pids...) {
		waitGone(t, pid, 30*time.Second)
	}
}

// When the supervisor dies with the bridge (kill -9 of both), what the
// server started is orphaned; the next bridge ends it before serving.
func TestRestartEndsLeftovers(t *testing.T) {
	bridgeBin, _ := buildBinaries(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startBridgeBinary(t, bridgeBin, "--env", e2eChildEnv+"=forker", "--", exe)
	supervisor, pids := forkerPIDs(t, p)
	syscall.Kill(supervisor, syscall.SIGKILL)
	p.cmd.Process.Kill()
	p.cmd.Wait()
	waitGone(t, supervisor, 30*time.Second)
	waitGone(t, pids[0], 30*time.Second) // the server: parent-death signal
	for _, pid := range pids[1:] {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("grandchild %d already gone (%v): the test cannot show that a restart ends it", pid, err)
		}
	}

	p2 := startBridgeBinary(t, bridgeBin, "--", exe)
	for _, pid := range pids[1:] {
		waitGone(t, pid, 30*time.Second)
	}
	p2.cmd.Process.Signal(syscall.SIGTERM)
	p2.cmd.Wait()
	if log := strings.Join(<-p2.done, "\n"); !strings.Contains(log, `"msg":"ended processes left by an earlier bridge","count":2`) {
		t.Errorf("the restarted bridge did not log ending the 2 leftovers:\n%s", log)
	}
}

// A local server's environment holds the allowlisted variables, what --env
// gives, and the owner mark: never the bridge's tokens or secrets, nor
// anything else of its environment.
func TestServerEnvironment(t *testing.T) {
	bridgeBin, _ := buildBinaries(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BRIDGE_AUTH_TOKENS", "tok-secret")
	t.Setenv("BRIDGE_AFFINITY_SECRET", "affinity-secret-affinity-secret-affinity-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
	t.Setenv("PASSED", "from-bridge")
	t.Setenv("TZ", "UTC")
	p := startBridgeBinary(t, bridgeBin, "--affinity-addr", "127.0.0.1:1",
		"--env", e2eChildEnv+"=environ", "--env", "GIVEN=a,b", "--env", "PASSED", "--", exe)
	go postInitialize(p.url, "tok-secret")
	env := strings.Split(serverStderr(t, p, "environ "), "\x1e")
	allowed := map[string]bool{e2eChildEnv: true, "GIVEN": true, "PASSED": true, "MCP_BRIDGE_OWNER": true}
	for _, a := range strings.Split("PATH,HOME,USER,LOGNAME,SHELL,LANG,LANGUAGE,TZ,TMPDIR", ",") {
		allowed[a] = true
	}
	got := map[string]string{}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		got[name] = value
		if !allowed[name] && !strings.HasPrefix(name, "LC_") {
			t.Errorf("the server got %s", kv)
		}
	}
	if got["GIVEN"] != "a,b" || got["PASSED"] != "from-bridge" || got["TZ"] != "UTC" || got["PATH"] != os.Getenv("PATH") {
		t.Errorf("the server got GIVEN=%q PASSED=%q TZ=%q PATH=%q", got["GIVEN"], got["PASSED"], got["TZ"], got["PATH"])
	}
}

// --env refuses the bridge's own variables.
func TestEnvFlagRefusesBridgeVariables(t *testing.T) {
	for _, v := range []string{"BRIDGE_AUTH_TOKENS", "BRIDGE_AFFINITY_SECRET=x", "=x"} {
		_, err := parseConfig([]string{"--env", v, "--", "server"})
		if err == nil || !strings.Contains(err.Error(), "--env") {
			t.Errorf("--env %s: err = %v, want an error naming --env", v, err)
		}
	}
}

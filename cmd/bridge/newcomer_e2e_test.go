package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A SIGHUP to a one-command bridge (nothing to reload) must not
// end it: the session open before it still works after it.
func TestSIGHUPKeepsOneCommandBridge(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	b := startLoggedBridge(t, bridgeBin, "--", helloBin)
	cs := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.url})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := echo(ctx, cs, "before"); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	b.waitLog(t, "SIGHUP: nothing to reload (reloads --config, --tls-cert and --tls-key when given)")
	if err := echo(ctx, cs, "after"); err != nil {
		t.Fatalf("the session open before SIGHUP: %v", err)
	}
}

// pythonServer is a minimal stdio MCP server in Python that prints its
// answers with print(): block-buffered when stdout is a pipe, so it is
// alive but silent unless run unbuffered.
const pythonServer = `import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "py", "version": "1"}}}))
    elif msg.get("method") == "tools/list":
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": []}}))
    elif "id" in msg and "method" in msg:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}))
`

// README's advice for a Python server that hangs works as
// written (--env PYTHONUNBUFFERED=1), and without it the initialize
// timeout's error says to run the server unbuffered and how to pass
// variables.
func TestPythonServerUnbuffered(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	bridgeBin, _ := buildBinaries(t)
	script := filepath.Join(t.TempDir(), "server.py")
	if err := os.WriteFile(script, []byte(pythonServer), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONUNBUFFERED", "") // the test's own environment must not decide
	os.Unsetenv("PYTHONUNBUFFERED")

	b := startLoggedBridge(t, bridgeBin, "--initialize-timeout", "3s", "--", python, script)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: b.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil {
		t.Fatal("a buffered Python server answered initialize")
	}
	for _, want := range []string{"--env NAME", "run it unbuffered, with python -u or --env PYTHONUNBUFFERED=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the initialize error lacks %q:\n%v", want, err)
		}
	}

	b = startLoggedBridge(t, bridgeBin, "--env", "PYTHONUNBUFFERED=1", "--", python, script)
	cs := sdkConnect(t, &mcp.StreamableClientTransport{Endpoint: b.url})
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("with --env PYTHONUNBUFFERED=1: %v", err)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// A request waiting to be written to the stdin of a
// server that stopped reading never timed out: its handler was blocked in
// the write, the requests after it behind that, and all returned only at
// DELETE. --request-timeout must answer each of them.
func TestStoppedServerRequestsTimeOut(t *testing.T) {
	bin, _ := buildBinaries(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startBridgeBinary(t, bin, "--request-timeout", "2s", "--env", e2eChildEnv+"=deaf", "--", exe)
	// A bound on a failing test, far beyond --request-timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sid := initSession(t, ctx, p.url, "2025-11-25")
	// Each call is larger than a quarter of a pipe's buffer (64 KiB): the
	// second or third blocks in its write, the others behind it.
	arg := strings.Repeat("x", 30<<10)
	const calls = 5
	answers := make([]string, calls)
	var wg sync.WaitGroup
	for i := range calls {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, 10+i, arg)
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			answers[i] = resp.Status + " " + string(out)
			if err != nil {
				answers[i] += " " + err.Error()
			}
		})
	}
	start := time.Now()
	wg.Wait()
	t.Logf("%d calls answered %s after they were sent (--request-timeout 2s)", calls, time.Since(start).Round(100*time.Millisecond))
	for i, a := range answers {
		if !strings.Contains(a, `"code":-32001`) && !strings.HasPrefix(a, "503") {
			t.Errorf("call %d: %.300s; want a timeout error (-32001) or 503 from --request-timeout", i, a)
		}
	}
}

// runDeafServer answers initialize, then never reads its stdin again, as
// a stopped or hung server.
func runDeafServer() {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"params"`
	}
	json.Unmarshal(line, &req)
	json.NewEncoder(os.Stdout).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
		"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
		"serverInfo": map[string]any{"name": "deaf", "version": "1"}}})
	for {
		time.Sleep(time.Hour)
	}
}

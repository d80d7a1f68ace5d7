package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// auditLines reads the audit log at path, line by line.
func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

// waitAuditLine waits until the audit log at path holds a line for which
// match holds (the log is written in order: the lines before it are
// there too), and returns every line.
func waitAuditLine(t *testing.T, ctx context.Context, path, what string, match func(map[string]any) bool) []map[string]any {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		lines := auditLines(t, path)
		for _, l := range lines {
			if match(l) {
				return lines
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no audit line %s; lines: %v", what, lines)
		}
	}
}

// A member that exits with a call of the client in flight (its processes
// killed while the call waits for the client's answer to its
// elicitation): the client's call gets an error naming the member, and
// the member's audit log holds that call once, "unanswered", under the
// member's name, as a session's unanswered requests are when its server
// stops.
func TestConfigFileAggregateMemberExitAudited(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "every-audit.log")
	mark := "every-" + filepath.Base(dir)
	file := fmt.Sprintf(`{"mcpServers": {"hello": {"command": %q}, "every": {"command": %q, "audit-log": %q, "env": {"AGG_E2E_MEMBER": %q}}}}`,
		helloBin, childtest.EverythingServer(t), auditFile, mark)
	b := startConfigBridge(t, bridgeBin, file)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	asked, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- struct{}{}
			<-release // the member is gone before this answer
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer letGo() // before Close, which waits for the handler
	errs := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "every__test_elicitation", Arguments: map[string]any{"message": "who?"}})
		errs <- err
	}()
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the member never asked for elicitation")
	}
	victims := processesWithEnv(t, "AGG_E2E_MEMBER="+mark)
	if len(victims) < 2 {
		t.Fatalf("processes of every: %v, want its catalog server and the session's", victims)
	}
	for _, p := range victims {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatalf("killing %d: %v", p, err)
		}
	}
	if err := <-errs; err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"every"`)) {
		t.Fatalf("the call in flight when the member exited: %v, want an error naming \"every\"", err)
	}
	letGo()
	// A later call of the member: its line comes after the unanswered
	// one's, in one log written in order.
	b.waitRecord(t, "every down", func(rec map[string]any) bool {
		return rec["msg"] == "aggregate member is down: its tools, prompts and resources are left out of the lists until it starts again" && rec["member"] == "every"
	})
	b.waitRecord(t, "every up again", func(rec map[string]any) bool {
		return rec["msg"] == "aggregate member is up" && rec["member"] == "every"
	})
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "every__test_simple_text"}); err != nil {
		t.Fatal(err)
	}
	lines := waitAuditLine(t, ctx, auditFile, "for test_simple_text", func(l map[string]any) bool { return l["tool"] == "test_simple_text" })
	n := 0
	for _, l := range lines {
		if l["tool"] != "test_elicitation" {
			continue
		}
		n++
		if l["outcome"] != "unanswered" || l["server"] != "every" || l["method"] != "tools/call" || l["advertised"] != "every__test_elicitation" {
			t.Errorf("audit line of the call the member left: %v, want outcome unanswered, server every, method tools/call, advertised every__test_elicitation", l)
		}
	}
	if n != 1 {
		t.Fatalf("%d audit lines for the call the member left unanswered, want 1; lines: %v", n, lines)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
)

// The bridge binary with a policy, a pin file written by bridge pin and an
// audit log, in front of the everything-server, driven by the Go SDK
// client: the lists show what the policy allows, a denied tool is refused,
// the tool test_trigger_tool_change adds after start stays hidden and is
// refused, and the audit log has a line for each of these.
func TestGuardsEndToEnd(t *testing.T) {
	bin, _ := buildBinaries(t)
	server := childtest.EverythingServer(t)
	lockFile, policyFile := guardFiles(t, bin, server, "tools:\n  deny: [test_image_content]\n  scopes:\n    test_audio_content: [audio]\n")
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	b := startBridgeBinary(t, bin, "--pin-file", lockFile, "--policy", policyFile, "--audit-log", auditFile, "--", server)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	changed := make(chan struct{}, 10)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	// A 2025 session here; a 2026-07-28 client (the SDK's default) below.
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	names := func() []string {
		t.Helper()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tool := range res.Tools {
			out = append(out, tool.Name)
		}
		return out
	}
	before := names()
	for _, hidden := range []string{"test_image_content", "test_audio_content"} {
		if slices.Contains(before, hidden) {
			t.Errorf("tools/list shows %s: %v", hidden, before)
		}
	}
	if !slices.Contains(before, "test_simple_text") {
		t.Fatalf("tools/list: %v", before)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_image_content"}); err == nil || !strings.Contains(err.Error(), "policy denies it") {
		t.Errorf("calling a denied tool: %v", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_audio_content"}); err == nil || !strings.Contains(err.Error(), "insufficient scope") {
		t.Errorf("calling a tool without its scope: %v", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_trigger_tool_change"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed")
	}
	const added = "__transient_tool_for_list_changed"
	if after := names(); !slices.Equal(after, before) {
		t.Errorf("after the change tools/list shows %v, want %v", after, before)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: added}); err == nil || !strings.Contains(err.Error(), "not in the pin file") {
		t.Errorf("calling the added tool: %v", err)
	}
	reads(t, ctx, cs)
	cs.Close()

	// A revision 2026-07-28 client, served by the stateless pool, meets the
	// same policy: its children hold the same chain.
	modern, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-modern", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer modern.Close()
	if v := modern.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the SDK's default client negotiated %s, want 2026-07-28", v)
	}
	res, err := modern.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "test_image_content" || tool.Name == "test_audio_content" {
			t.Errorf("a 2026-07-28 client's tools/list shows %s", tool.Name)
		}
	}
	if _, err := modern.CallTool(ctx, &mcp.CallToolParams{Name: "test_image_content"}); err == nil || !strings.Contains(err.Error(), "policy denies it") {
		t.Errorf("a 2026-07-28 client calling a denied tool: %v", err)
	}
	reads(t, ctx, modern)
	modern.Close()

	// Each line was written before its answer went on (refusals), or
	// before the server's next message was read (answers): every line is
	// in the file once the client has seen what followed it.
	recs := readAudit(t, auditFile)
	has := func(what string, pred func(r audit.Record) bool) {
		t.Helper()
		if !slices.ContainsFunc(recs, pred) {
			t.Errorf("the audit log has no line for %s:\n%+v", what, recs)
		}
	}
	has("the policy's denial", func(r audit.Record) bool {
		return r.Tool == "test_image_content" && r.Outcome == "denied" && r.DeniedBy == "policy: tools.deny test_image_content"
	})
	has("the missing scope", func(r audit.Record) bool { return r.Tool == "test_audio_content" && r.Outcome == "denied" })
	has("the trigger", func(r audit.Record) bool {
		return r.Tool == "test_trigger_tool_change" && r.Outcome == "ok" && r.Session != ""
	})
	has("the alert", func(r audit.Record) bool { return r.Event == "pin_violation" && r.Tool == added })
	has("the added tool's refusal", func(r audit.Record) bool {
		return r.Tool == added && r.Outcome == "denied" && strings.HasPrefix(r.DeniedBy, "pin: not in the pin file")
	})
	has("initialize", func(r audit.Record) bool { return r.Method == "initialize" && r.Outcome == "ok" })
	has("the read of an unpinned URI", func(r audit.Record) bool {
		return r.Resource == "test://elsewhere" && r.Outcome == "denied" && strings.HasPrefix(r.DeniedBy, "pin: matches no resource")
	})

	// The guards count what they refuse, under the one-command form's
	// label: three denials (two calls of the session, one of the
	// 2026-07-28 client), a pin violation for each alert of the audit log.
	fams := scrapeFamilies(t, strings.TrimSuffix(b.url, "/mcp")+"/metrics")
	if got, _ := metricValue(fams, "mcp_bridge_policy_denials_total", "server", "default"); got != 3 {
		t.Errorf("policy denials = %v, want 3", got)
	}
	alerts := 0
	for _, r := range readAudit(t, auditFile) {
		if r.Event == "pin_violation" {
			alerts++
		}
	}
	if got, _ := metricValue(fams, "mcp_bridge_pin_violations_total", "server", "default"); got != float64(alerts) || alerts == 0 {
		t.Errorf("pin violations = %v, want %d (the audit log's alerts)", got, alerts)
	}
}

// guardFiles pins server with bridge pin and writes policy: the files of
// --pin-file and --policy.
func guardFiles(t *testing.T, bin, server, policy string) (lockFile, policyFile string) {
	t.Helper()
	dir := t.TempDir()
	lockFile = filepath.Join(dir, "mcp-lock.json")
	if _, stderr, code := runBinary(t, bin, nil, "pin", "--output", lockFile, "--", server); code != 0 {
		t.Fatalf("bridge pin: %d %s", code, stderr)
	}
	policyFile = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	return lockFile, policyFile
}

// reads: with a pin file, a pinned resource and a URI of a pinned template
// are read; a URI that matches neither is refused.
func reads(t *testing.T, ctx context.Context, cs *mcp.ClientSession) {
	t.Helper()
	for _, uri := range []string{"test://static-text", "test://template/1/data"} {
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err != nil {
			t.Errorf("reading %s: %v", uri, err)
		}
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://elsewhere"}); err == nil || !strings.Contains(err.Error(), "matches no resource or resource template in the pin file") {
		t.Errorf("reading a URI the pin file does not cover: %v", err)
	}
}

func readAudit(t *testing.T, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("an audit line that is not a record: %q: %v", sc.Bytes(), err)
		}
		out = append(out, r)
	}
	return out
}

// runDyingServer is the test binary as a Go SDK server whose tool "die"
// kills its own process, with SIGKILL, in the middle of the call.
func runDyingServer() {
	server := mcp.NewServer(&mcp.Implementation{Name: "dies", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "die"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	_ = server.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

// A child of the stateless pool killed in the middle of a call leaves one
// audit line for that call, written before its client learns of it, with
// outcome "unanswered" and why.
func TestAuditOfPoolChildKilledMidCall(t *testing.T) {
	bin, _ := buildBinaries(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	b := startBridgeBinary(t, bin, "--audit-log", auditFile, "--env", e2eChildEnv+"=dies", "--", exe)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the SDK's default client negotiated %s, want 2026-07-28", v)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "die", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a call whose server was killed succeeded")
	}
	var lines []audit.Record
	for _, r := range readAudit(t, auditFile) {
		if r.Tool == "die" {
			lines = append(lines, r)
		}
	}
	if len(lines) != 1 || lines[0].Outcome != "unanswered" || lines[0].Reason == "" ||
		!strings.HasPrefix(lines[0].Session, "pool-") || lines[0].ArgsSHA256 == "" {
		t.Fatalf("the audit lines of the killed call: %+v", lines)
	}
}

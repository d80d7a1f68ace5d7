package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// processesWithEnv lists the processes whose environment holds kv, from
// /proc (a local server runs under a supervising process of the bridge:
// not a child of the bridge).
func processesWithEnv(t *testing.T, kv string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc: cannot find the member's processes")
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue // gone meanwhile, or not ours
		}
		if slices.Contains(strings.Split(string(env), "\x00"), kv) {
			out = append(out, p)
		}
	}
	return out
}

// membersDown is the aggregate's gauge of members down at path.
func membersDown(t *testing.T, b *configBridge, path string) float64 {
	t.Helper()
	v, ok := metricValue(scrapeFamilies(t, b.base+"/metrics"), "mcp_bridge_aggregate_members_down", "server", path)
	if !ok {
		t.Fatalf("no mcp_bridge_aggregate_members_down{server=%q}", path)
	}
	return v
}

// A member whose processes are killed mid-session (its catalog server and
// the session's own), and that cannot start again for a while: the other
// member answers without a failure in a 2025 session and in revision
// 2026-07-28; the session hears notifications/tools/list_changed and the
// member's tools leave every list; its calls get an error naming it; the
// gauge counts it down; once it can start again it comes back (logged,
// list_changed, its tools listed and answering) and the gauge is 0.
func TestConfigFileAggregateMemberCrash(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	dir := t.TempDir()
	// b's command refuses to start while the file "down" exists: its
	// retries fail until the test lets it come back.
	down := filepath.Join(dir, "down")
	wrapper := filepath.Join(dir, "b.sh")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\n[ -e %q ] && exit 1\nexec %q\n", down, helloBin)), 0o755); err != nil {
		t.Fatal(err)
	}
	// Tells b's processes from the others' (this test's only).
	mark := "b-" + filepath.Base(dir)
	file := fmt.Sprintf(`{"mcpServers": {"a": {"command": %q}, "b": {"command": %q, "env": {"AGG_E2E_MEMBER": %q}}}}`, helloBin, wrapper, mark)
	b := startConfigBridge(t, bridgeBin, file)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()

	changed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	s25, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer s25.Close()
	s26 := aggConnect(t, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp"}, "2026-07-28")
	all := []string{"a__count", "a__countdown", "a__echo", "b__count", "b__countdown", "b__echo"}
	for _, cs := range []*mcp.ClientSession{s25, s26} {
		if got := toolNames(t, ctx, cs); !slices.Equal(got, all) {
			t.Fatalf("tools/list: %v, want %v", got, all)
		}
	}
	// The 2025 session starts a server of b of its own.
	if err := echoAs(ctx, s25, "b__echo", "before"); err != nil {
		t.Fatal(err)
	}
	victims := processesWithEnv(t, "AGG_E2E_MEMBER="+mark)
	if len(victims) < 2 {
		t.Fatalf("processes of b: %v, want its catalog server and the session's", victims)
	}
	for len(changed) > 0 {
		<-changed
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLoad()
	callers := []*caller{newCaller("2025 session"), newCaller("2026-07-28")}
	callers[0].run(loadCtx, s25, "a__echo", &wg)
	callers[1].run(loadCtx, s26, "a__echo", &wg)
	for _, c := range callers {
		select {
		case <-c.first:
		case <-ctx.Done():
			t.Fatalf("%s: no call of a__echo answered", c.name)
		}
	}

	if err := os.WriteFile(down, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range victims {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatalf("killing %d: %v", p, err)
		}
	}
	b.waitRecord(t, "b down", func(rec map[string]any) bool {
		return rec["msg"] == "aggregate member is down: its tools, prompts and resources are left out of the lists until it starts again" && rec["member"] == "b"
	})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after b went down")
	}
	without := []string{"a__count", "a__countdown", "a__echo"}
	for i, cs := range []*mcp.ClientSession{s25, s26} {
		if got := toolNames(t, ctx, cs); !slices.Equal(got, without) {
			t.Fatalf("%s: tools/list with b down: %v, want %v", callers[i].name, got, without)
		}
		err := echoAs(ctx, cs, "b__echo", "down")
		if err == nil || !strings.Contains(err.Error(), `"b"`) {
			t.Fatalf("%s: b__echo with b down: %v, want an error naming \"b\"", callers[i].name, err)
		}
	}
	if n := membersDown(t, b, "/mcp"); n != 1 {
		t.Fatalf("mcp_bridge_aggregate_members_down{server=\"/mcp\"} = %v with b down, want 1", n)
	}

	// b may start again: its next retry brings it back.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	b.waitRecord(t, "b up", func(rec map[string]any) bool {
		return rec["msg"] == "aggregate member is up" && rec["member"] == "b"
	})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after b came back")
	}
	for i, cs := range []*mcp.ClientSession{s25, s26} {
		if got := toolNames(t, ctx, cs); !slices.Equal(got, all) {
			t.Fatalf("%s: tools/list with b back: %v, want %v", callers[i].name, got, all)
		}
		if err := echoAs(ctx, cs, "b__echo", "back"); err != nil {
			t.Fatalf("%s: %v", callers[i].name, err)
		}
	}
	if n := membersDown(t, b, "/mcp"); n != 0 {
		t.Fatalf("mcp_bridge_aggregate_members_down{server=\"/mcp\"} = %v with b back, want 0", n)
	}
	for _, c := range callers {
		c.waitCalls(t, ctx, 5)
	}
	stopLoad()
	wg.Wait()
	for _, c := range callers {
		c.noFailures(t, "while b crashed")
	}
}

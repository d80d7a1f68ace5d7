package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The local sandbox cannot filter what a server sends: asking it to is
// refused in one line that says so, for the flag, its variable and a
// server's allowHosts key (issue 29, item 6).
func TestSandboxEgressRefusedLocally(t *testing.T) {
	const want = "the local sandbox cannot filter egress: a local server has the bridge's own network access; run the server with --sandbox docker, or remove "
	_, err := parseConfig([]string{"--sandbox-egress", "api.github.com", "--", "sh"})
	if err == nil || err.Error() != "--sandbox-egress: "+want+"--sandbox-egress" {
		t.Errorf("--sandbox-egress with --sandbox local: %v", err)
	}
	t.Setenv("BRIDGE_SANDBOX_EGRESS", "api.github.com")
	_, err = parseConfig([]string{"--", "sh"})
	if err == nil || err.Error() != "BRIDGE_SANDBOX_EGRESS: "+want+"BRIDGE_SANDBOX_EGRESS" {
		t.Errorf("BRIDGE_SANDBOX_EGRESS with --sandbox local: %v", err)
	}
	t.Setenv("BRIDGE_SANDBOX_EGRESS", "")

	path := filepath.Join(t.TempDir(), "servers.json")
	os.WriteFile(path, []byte(`{"mcpServers": {"gh": {"command": "sh", "allowHosts": ["api.github.com"]}}}`), 0o600)
	_, err = parseConfig([]string{"--config", path})
	if err == nil || err.Error() != "config "+path+`: server "gh": key "allowHosts": `+want+"allowHosts" {
		t.Errorf("allowHosts of a local server: %v", err)
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, &out, io.Discard); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, s := range []string{"not example.com itself", "the local sandbox cannot filter egress"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help does not say %q", s)
		}
	}
}

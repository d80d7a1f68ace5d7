package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/pin"
)

// bridge pin writes a lock of the everything-server; --check finds no
// drift against it, and reports each kind of drift against an edited one
// with exit status 1.
func TestPinCommand(t *testing.T) {
	bin, _ := buildBinaries(t)
	server := childtest.EverythingServer(t)
	dir := t.TempDir()
	lockFile := filepath.Join(dir, "mcp-lock.json")

	stdout, stderr, code := runBinary(t, bin, nil, "pin", "--output", lockFile, "--", server)
	if code != 0 || !strings.Contains(stdout, "pinned ") {
		t.Fatalf("bridge pin: exit %d\n%s\n%s", code, stdout, stderr)
	}
	lock, err := pin.ReadLock(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lock.Tools["test_trigger_tool_change"]; !ok || len(lock.Prompts) == 0 || len(lock.ResourceTemplates) == 0 {
		t.Fatalf("the lock misses items: %+v", lock)
	}

	stdout, stderr, code = runBinary(t, bin, nil, "pin", "--check", "--pin-file", lockFile, "--", server)
	if code != 0 || !strings.Contains(stdout, "no drift") {
		t.Fatalf("bridge pin --check on an unchanged server: exit %d\n%s\n%s", code, stdout, stderr)
	}

	edited := filepath.Join(dir, "edited.json")
	delete(lock.Tools, "test_simple_text")
	// An item edited in the lock must keep its digest and members in
	// agreement (ReadLock refuses otherwise): Set pins both.
	changed := strings.Replace(string(lock.Item(pin.Kinds[0], "test_image_content")), `"name"`, `"title":"an older title","name"`, 1)
	if err := lock.Set(pin.Kinds[0], []byte(changed)); err != nil {
		t.Fatal(err)
	}
	if err := lock.Set(pin.Kinds[0], []byte(`{"name":"gone_tool","inputSchema":{"type":"object"}}`)); err != nil {
		t.Fatal(err)
	}
	delete(lock.Prompts, "test_simple_prompt")
	if err := lock.WriteFile(edited); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runBinary(t, bin, nil, "pin", "--check", "--pin-file", edited, "--", server)
	if code != 1 {
		t.Fatalf("bridge pin --check on drift: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{`tool "gone_tool" removed`, `tool "test_image_content" changed`, `tool "test_simple_text" added`, `prompt "test_simple_prompt" added`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--check output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "drifted from "+edited) {
		t.Errorf("stderr: %s", stderr)
	}
}

func TestPinUsageErrors(t *testing.T) {
	lockFile := filepath.Join(t.TempDir(), "l.json")
	if err := pin.NewLock().WriteFile(lockFile); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--", "srv"}, "give --output FILE"},
		{[]string{"--check", "--", "srv"}, "--check needs --pin-file"},
		{[]string{"--check", "--pin-file", lockFile, "--output", "x", "--", "srv"}, "drop --output"},
		{[]string{"--output", "x"}, "no server command"},
		{[]string{"--check", "--pin-file", filepath.Join(t.TempDir(), "missing.json"), "--", "srv"}, "missing.json"},
	} {
		var stderr bytes.Buffer
		if code := run(t.Context(), append([]string{"pin"}, c.args...), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("bridge pin %q: exit %d, %s; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"pin", "--output", filepath.Join(t.TempDir(), "l.json"), "--", "/nonexistent/server"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "/nonexistent/server") {
		t.Errorf("a server that does not start: exit %d, %s", code, stderr.String())
	}
}

// A bad policy or pin file, or a bad combination of flags, stops the
// bridge before it serves, naming the file, the key and the problem.
func TestGuardConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  deny: [delete_*]\n  alow: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notLock := filepath.Join(dir, "lock.json")
	if err := os.WriteFile(notLock, []byte(`{"tools":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", bad, "--", "srv"}, "--policy: policy file " + bad + ": tools.alow (line 3): unknown key: want allow, deny or scopes"},
		{[]string{"--policy", filepath.Join(dir, "none.yaml"), "--", "srv"}, "none.yaml"},
		{[]string{"--pin-file", notLock, "--", "srv"}, "--pin-file: pin file " + notLock},
		{[]string{"--on-pin-violation", "explode", "--", "srv"}, "--on-pin-violation \"explode\": want drop or end-session"},
		{[]string{"--audit-args", "--", "srv"}, "--audit-args needs --audit-log"},
	} {
		_, err := parseConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	c, err := parseConfig([]string{"--", "srv"})
	if err != nil || c.MaxDescriptionBytes != pin.DefaultMaxDescriptionBytes || c.OnPinViolation != "drop" {
		t.Fatalf("defaults: %v %+v", err, c)
	}
}

// bridge pin --check shows how an item changed, as a diff of its pinned
// members and the server's, and counts in words that agree with their
// numbers ("tool echo changed" said nothing of how, and "1
// changes").
func TestPinCheckShowsTheChange(t *testing.T) {
	bin, helloBin := buildBinaries(t)
	dir := t.TempDir()
	lockFile := filepath.Join(dir, "mcp-lock.json")
	stdout, stderr, code := runBinary(t, bin, nil, "pin", "--output", lockFile, "--", helloBin)
	if code != 0 {
		t.Fatalf("bridge pin: exit %d\n%s\n%s", code, stdout, stderr)
	}
	data, _ := os.ReadFile(lockFile)
	if !strings.Contains(string(data), `"description": "Send the text back"`) {
		t.Errorf("the lock file does not show the tool's description:\n%s", data)
	}
	lock, err := pin.ReadLock(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	// The lock as if the server had said something else before.
	was := strings.Replace(string(lock.Item(pin.Kinds[0], "echo")), "Send the text back", "Send the text back, politely", 1)
	if err := lock.Set(pin.Kinds[0], []byte(was)); err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(dir, "edited.json")
	if err := lock.WriteFile(edited); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runBinary(t, bin, nil, "pin", "--check", "--pin-file", edited, "--", helloBin)
	if code != 1 {
		t.Fatalf("bridge pin --check on drift: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{`tool "echo" changed`, `-  "description": "Send the text back, politely",`, `+  "description": "Send the text back",`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--check output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, ": 1 change, 0 refused items") {
		t.Errorf("stderr: %s", stderr)
	}
	for _, out := range []string{stdout, stderr} {
		if m := regexp.MustCompile(`\b1 (tools|prompts|resources|resource templates|changes|items|refused items)\b`).FindString(out); m != "" {
			t.Errorf("%q in:\n%s", m, out)
		}
	}
}

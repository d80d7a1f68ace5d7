package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCIRunsInAClone runs .ci/run as a fresh clone has it: no ../shared
// beside it, no MCP_PEERS_DIR (it stopped with "../shared/
// npm-peers/install: No such file or directory", rc 127). It must run all
// it can, skip the parts that need the npm peers with one line saying
// what and why, and pass. The Go toolchain is a stub that records its
// commands (the real ones are this very test run); the script's own
// control flow is what is tested.
func TestCIRunsInAClone(t *testing.T) {
	script, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	bin := filepath.Join(t.TempDir(), "bin")
	for _, d := range []string{filepath.Join(clone, ".ci"), bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(clone, ".ci", "run"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "commands")
	for _, tool := range []string{"go", "gofmt", "git"} {
		stub := "#!/bin/sh\necho \"" + tool + " $*\" >>" + log + "\n"
		if tool == "go" {
			// A fuzz step checks that its target ran: go test -fuzz
			// prints its progress.
			stub += "case \"$*\" in *-fuzz*) echo 'fuzz: elapsed: 0s (stub)';; esac\n"
		}
		if err := os.WriteFile(filepath.Join(bin, tool), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", filepath.Join(clone, ".ci", "run"))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCP_PEERS_DIR=") && !strings.HasPrefix(kv, "MCP_SHARED_DIR=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+bin+":/usr/bin:/bin")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf(".ci/run in a clone without ../shared: %v\n%s", err, out)
	}
	var skipped []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "SKIPPED: ") {
			skipped = append(skipped, line)
		}
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "TypeScript") || !strings.Contains(skipped[0], "conformance") || !strings.Contains(skipped[0], "MCP_PEERS_DIR") {
		t.Errorf("want one line saying what was skipped and how to have it, got %q\n%s", skipped, out)
	}
	ran, _ := os.ReadFile(log)
	for _, want := range []string{"go vet ./...", "go test -race -timeout 30m ./...", "go test -run ^$ -fuzz ^FuzzParse$"} {
		if !strings.Contains(string(ran), want+"\n") && !strings.Contains(string(ran), want+" ") {
			t.Errorf(".ci/run did not run %q; it ran:\n%s", want, ran)
		}
	}
}

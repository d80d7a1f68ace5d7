package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkCmd runs bridge check in this process and returns its exit status and
// output.
func checkCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"check"}, args...), &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return code, out.String()
}

// A real Python server, buffered: bridge check says to run it
// unbuffered, and with --env PYTHONUNBUFFERED=1 finds nothing wrong.
func TestCheckPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	script := filepath.Join(t.TempDir(), "server.py")
	if err := os.WriteFile(script, []byte(pythonServer), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := checkCmd(t, "--initialize-timeout", "3s", "--", python, script)
	if want := "a Python server's stdout is block-buffered on a pipe, so its answers may wait unsent: run it unbuffered, with python -u or --env PYTHONUNBUFFERED=1"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("buffered: exit %d, output:\n%s\nwant exit 1 and %q", code, out, want)
	}
	// The flags reach the check: its initialize timeout, and the hint for
	// this command and environment.
	if want := "wrote nothing on stdout within 3s (--initialize-timeout)"; !strings.Contains(out, want) {
		t.Errorf("buffered: output:\n%s\nwant %q", out, want)
	}
	code, out = checkCmd(t, "--env", "PYTHONUNBUFFERED=1", "--", python, script)
	if code != 0 || !strings.Contains(out, "bridge check: no problem found") {
		t.Errorf("unbuffered: exit %d, output:\n%s", code, out)
	}
}

// bridge check runs the server in the sandbox the flags describe: here a
// locked-down container of an image whose entrypoint is the server.
func TestCheckDocker(t *testing.T) {
	d := setupDockerE2E(t)
	stdout, stderr, code := runBinary(t, d.bridge, nil, "check", "--sandbox", "docker", "--image", d.image, "--pull", "never")
	if code != 0 || !strings.Contains(stdout, "ok: initialize answered in ") || !strings.Contains(stdout, "bridge check: no problem found") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

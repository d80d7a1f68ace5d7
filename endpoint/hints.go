package endpoint

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// InitializeHint is what the initialize timeout's error adds for this
// server (peer.Limits.InitializeHint): how it gets environment variables
// (a server waiting for a key it never got looked like a hung one), and,
// for a Python server, to run it unbuffered (BufferingHint).
func (o *ServerOptions) InitializeHint() string {
	h := "that it gets the environment variables it needs (a local server gets few of the bridge's: pass one with --env NAME)"
	if o.sandbox() == SandboxDocker {
		h = "that it gets the environment variables it needs (a container gets those of --sandbox-env only)"
	}
	if p := o.BufferingHint(); p != "" {
		h += "; " + p
	}
	return h
}

// rePython matches the base name of a Python interpreter (python,
// python3, python3.12) and of the launchers that run a Python entry point.
var rePython = regexp.MustCompile(`^(python[0-9.]*|uv|uvx|pipx)$`)

// BufferingHint is what to tell of a server that is a Python program: on
// a pipe, Python's stdout is block-buffered, so a server that prints its
// answers is alive but silent (under bridges that pass their whole
// environment, a PYTHONUNBUFFERED=1 of the user's shell hid it). Empty
// when the command is not Python or already runs unbuffered.
func (o *ServerOptions) BufferingHint() string {
	command, env, envFlag := append([]string{o.Local.Command}, o.Local.Args...), o.Local.Env, "--env"
	if o.sandbox() == SandboxDocker {
		command, env, envFlag = o.Docker.Command, o.Docker.Env, "--sandbox-env"
	}
	if len(command) == 0 || !rePython.MatchString(filepath.Base(command[0])) || slices.Contains(command[1:], "-u") {
		return ""
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "PYTHONUNBUFFERED=") {
			return ""
		}
	}
	return "a Python server's stdout is block-buffered on a pipe, so its answers may wait unsent: run it unbuffered, with python -u or " + envFlag + " PYTHONUNBUFFERED=1"
}

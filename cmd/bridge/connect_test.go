package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Every connect flag is also read from its variable, into the same field.
func TestConnectFlagsHaveVariables(t *testing.T) {
	values := map[string]string{
		"transport": "sse", "token-file": "/some/file", "header": "X-A: b", "allow-http": "true",
		"max-message-bytes": "7", "tls-ca": "/some/ca.pem", "tls-client-cert": "/some/cert.pem", "tls-client-key": "/some/key.pem", "log-format": "json", "log-level": "debug",
		"event-timeout": "3s", "oauth": "true", "oauth-flow": "device", "oauth-client-id": "c1", "oauth-client-secret-file": "/some/secret",
		"oauth-client-metadata-url": "https://client.example/meta.json", "oauth-scope": "a b", "token-store": "/some/dir", "no-browser": "true",
	}
	fs := newConnectFlagSet(&connectConfig{}, io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := values[f.Name]
		env := connectFlagEnv[f.Name]
		if !ok || env == "" {
			t.Fatalf("flag --%s: no test value or no variable", f.Name)
		}
		t.Run(f.Name, func(t *testing.T) {
			fromFlag, err := parseConnectConfig([]string{"http://127.0.0.1/mcp", "--" + f.Name + "=" + v}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(env, v)
			fromEnv, err := parseConnectConfig([]string{"http://127.0.0.1/mcp"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := fromFlag.Options()
			b, _ := fromEnv.Options()
			fromFlag.HeaderFlags, fromEnv.Headers = nil, "" // the two spellings of --header
			if f.Name == "header" {
				if a.Header.Get("X-A") != "b" || b.Header.Get("X-A") != "b" {
					t.Errorf("header from the flag %v, from %s %v", a.Header, env, b.Header)
				}
				return
			}
			if !reflect.DeepEqual(fromFlag, fromEnv) {
				t.Errorf("--%s=%s gives %+v, %s=%s gives %+v", f.Name, v, *fromFlag, env, v, *fromEnv)
			}
		})
	})
}

// Refusals say what is wrong, before any connection.
func TestConnectConfigErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{nil, nil, "bridge connect: no remote URL: bridge connect https://host/mcp\n"},
		{[]string{"example.com/mcp"}, nil, `remote URL "example.com/mcp": want http:// or https:// and a host`},
		{[]string{"https://a/mcp", "https://b/mcp"}, nil, `one URL only: got "https://a/mcp" and "https://b/mcp"`},
		{[]string{"https://a/mcp", "--transport", "ws"}, nil, `--transport "ws": want auto, streamable or sse`},
		{[]string{"https://a/mcp"}, []string{"BRIDGE_CONNECT_TRANSPORT="}, `--transport "": want auto, streamable or sse`},
		{[]string{"https://a/mcp", "--header", "Authorization: Bearer x"}, nil,
			"--header Authorization: put a bearer token in BRIDGE_CONNECT_TOKEN or a --token-file instead (a command line is visible to every local user)"},
		{[]string{"https://a/mcp", "--header", "no colon"}, nil, `--header "no colon": want 'Name: value'`},
		{[]string{"http://example.com/mcp"}, []string{"BRIDGE_CONNECT_TOKEN=t"},
			"refusing to send a token or headers to example.com over plain http: anyone on the path reads them; use https://, or pass --allow-http"},
		{[]string{"https://a/mcp", "--token-file", empty}, nil, "--token-file " + empty + " holds no token"},
		{[]string{"https://a/mcp", "--token-file", empty}, []string{"BRIDGE_CONNECT_TOKEN=t"}, "both BRIDGE_CONNECT_TOKEN and --token-file give a token: keep one"},
	} {
		for _, e := range tc.env {
			k, v, _ := strings.Cut(e, "=")
			t.Setenv(k, v)
		}
		var stdout, stderr bytes.Buffer
		code := runConnect(context.Background(), append([]string{}, tc.args...), strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "Run 'bridge connect --help' for usage.") {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
		for _, e := range tc.env {
			k, _, _ := strings.Cut(e, "=")
			os.Unsetenv(k)
		}
	}
}

// --help goes to stdout with every flag and variable, status 0.
func TestConnectHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runConnect(context.Background(), []string{"--help"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{"bridge connect URL [flags]", "--transport", "env BRIDGE_CONNECT_TOKEN\n", "env BRIDGE_CONNECT_HEADERS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stdout.String())
		}
	}
}

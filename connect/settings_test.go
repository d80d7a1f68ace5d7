package connect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Settings.Options reads what the settings name and refuses, naming the
// flag or variable, what would leak a secret or cannot work.
func TestSettingsOptions(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(tokenFile, []byte("# the token\n\n  tok-1  \nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte("\n# secret\ns3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const remote = "https://remote.example/mcp"
	for _, tc := range []struct {
		name string
		s    Settings
		want string // an error containing it; "" means accepted
		ok   func(*Options) bool
	}{
		{"nothing but the remote", Settings{URL: remote}, "", func(o *Options) bool {
			return o.Transport == DefaultTransport && o.Token == "" && len(o.Header) == 0 && o.OAuth == nil && o.HTTPClient == nil
		}},
		{"transport", Settings{URL: remote, Transport: "ws"}, `--transport "ws": want auto, streamable or sse`, nil},
		{"event timeout", Settings{URL: remote, EventTimeout: -time.Second}, "--event-timeout -1s: want a positive duration", nil},
		{"message bound", Settings{URL: remote, MaxMessageBytes: -5}, "--max-message-bytes -5: want a positive size", nil},
		{"remote", Settings{URL: "remote.example/mcp"}, `remote URL "remote.example/mcp": want http:// or https:// and a host`, nil},
		{"token file's first line", Settings{URL: remote, TokenFile: tokenFile}, "",
			func(o *Options) bool { return o.Token == "tok-1" && o.TokenSource == "--token-file "+tokenFile }},
		{"token and token file", Settings{URL: remote, Token: "t", TokenFile: tokenFile}, "both BRIDGE_CONNECT_TOKEN and --token-file give a token: keep one", nil},
		{"Authorization from the variable", Settings{URL: remote, Headers: "Authorization: Bearer x\n x-a : b \n"}, "",
			func(o *Options) bool {
				return o.Header.Get("Authorization") == "Bearer x" && o.Header.Get("X-A") == "b"
			}},
		{"Authorization from the variable and a token", Settings{URL: remote, Token: "t", Headers: "Authorization: Bearer x"}, "--header Authorization: put a bearer token in", nil},
		{"Authorization from the flag", Settings{URL: remote, HeaderFlags: []string{"authorization: Bearer x"}}, "--header Authorization: put a bearer token in", nil},
		{"header name", Settings{URL: remote, HeaderFlags: []string{"X A: b"}}, `--header "X A: b": want 'Name: value'`, nil},
		{"plain http elsewhere", Settings{URL: "http://remote.example/mcp", HeaderFlags: []string{"X-A: b"}}, "refusing to send a token or headers to remote.example over plain http", nil},
		{"plain http allowed", Settings{URL: "http://remote.example/mcp", HeaderFlags: []string{"X-A: b"}, AllowHTTP: true}, "", nil},
		{"plain http to loopback", Settings{URL: "http://127.0.0.1:8080/mcp", Token: "t"}, "", nil},
		{"secret file", Settings{URL: remote, OAuthClientID: "c1", OAuthClientSecretFile: secretFile, OAuthScope: " a  b "}, "",
			func(o *Options) bool {
				return o.OAuth != nil && o.OAuth.ClientID == "c1" && o.OAuth.ClientSecret == "s3cret" && strings.Join(o.OAuth.Scopes, ",") == "a,b"
			}},
		{"secret without client", Settings{URL: remote, ClientSecret: "s"}, "a client secret without --oauth-client-id: give the client's id", nil},
		{"secret twice", Settings{URL: remote, OAuthClientID: "c1", ClientSecret: "s", OAuthClientSecretFile: secretFile}, "both BRIDGE_CONNECT_CLIENT_SECRET and --oauth-client-secret-file", nil},
		{"OAuth and a token", Settings{URL: remote, Token: "t", NoBrowser: true}, "both a bearer token and OAuth are configured: keep one", nil},
		{"OAuth flow", Settings{URL: remote, OAuthFlow: "implicit"}, `--oauth-flow "implicit": want code, device or client-credentials`, nil},
		{"client certificate without key", Settings{URL: remote, TLSClientCert: "c.pem"}, "--tls-client-cert and --tls-client-key go together: give both", nil},
		{"CA file", Settings{URL: remote, TLSCA: tokenFile}, "--tls-ca " + tokenFile + " holds no PEM certificate", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.s.Transport == "" {
				tc.s.Transport = DefaultTransport
			}
			o, err := tc.s.Options()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%v, want accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case tc.ok != nil && !tc.ok(o):
				t.Errorf("options %+v", o)
			}
		})
	}
}

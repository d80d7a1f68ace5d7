package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testCA signs the certificates of a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bridge test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: pool}
}

// issue returns a PEM certificate and key: for 127.0.0.1 as a server, or
// as a client.
func (ca *testCA) issue(t *testing.T, serial int64, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "bridge test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// writeAtomically replaces path the way a certificate renewal should.
func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// loggedBridge is the bridge binary with its JSON log lines readable as
// they come.
type loggedBridge struct {
	cmd  *exec.Cmd
	url  string
	msgs chan string // each log line's msg
}

func startLoggedBridge(t *testing.T, bin string, args ...string) *loggedBridge {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &loggedBridge{cmd: cmd, msgs: make(chan string, 1024)}
	urls := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(b.msgs)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log(sc.Text())
			var rec struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			if rec.Msg == "bridge listening" {
				urls <- rec.URL
			}
			select {
			case b.msgs <- rec.Msg:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		cmd.Wait()
	})
	select {
	case b.url = <-urls:
	case <-done:
		t.Fatal("the bridge exited before listening")
	}
	return b
}

// waitLog waits for a log line with msg.
func (b *loggedBridge) waitLog(t *testing.T, msg string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case m, ok := <-b.msgs:
			if !ok {
				t.Fatalf("the bridge exited before logging %q", msg)
			}
			if m == msg {
				return
			}
		case <-timeout:
			t.Fatalf("the bridge never logged %q", msg)
		}
	}
}

// servedSerial connects afresh and returns the serial number of the
// certificate the bridge serves, after checking that /healthz answers.
func servedSerial(t *testing.T, url string, conf *tls.Config) int64 {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(strings.TrimSuffix(url, "/mcp") + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz over TLS: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %s", resp.Status)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}

// TestTLSReloadOnSIGHUP: the bridge serves HTTPS with --tls-cert/--tls-key,
// says https:// in its log, serves MCP over it (through bridge connect,
// trusting the test CA by SSL_CERT_FILE), takes a renewed certificate on
// SIGHUP, and keeps the previous one when the new files are broken.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	c, k := ca.issue(t, 100, false)
	writeAtomically(t, certFile, c)
	writeAtomically(t, keyFile, k)
	writeAtomically(t, caFile, ca.pem)

	b := startLoggedBridge(t, bridgeBin, "--tls-cert", certFile, "--tls-key", keyFile, "--", helloBin)
	if !strings.HasPrefix(b.url, "https://127.0.0.1:") {
		t.Fatalf("logged URL %q, want https://", b.url)
	}
	conf := &tls.Config{RootCAs: ca.pool}
	if got := servedSerial(t, b.url, conf); got != 100 {
		t.Fatalf("serial %d served, want 100", got)
	}

	// MCP over TLS, by the client mode.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.Command(bridgeBin, "connect", b.url)
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tls-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("bridge connect over TLS: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over tls"}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call over TLS: %v %+v", err, res)
	}
	cs.Close()

	c, k = ca.issue(t, 200, false)
	writeAtomically(t, certFile, c)
	writeAtomically(t, keyFile, k)
	b.cmd.Process.Signal(syscall.SIGHUP)
	b.waitLog(t, "TLS certificate reloaded")
	if got := servedSerial(t, b.url, conf); got != 200 {
		t.Fatalf("serial %d served after SIGHUP, want 200", got)
	}

	writeAtomically(t, certFile, []byte("not a certificate"))
	b.cmd.Process.Signal(syscall.SIGHUP)
	b.waitLog(t, "TLS certificate not reloaded: still serving the previous one; fix the files and send SIGHUP again")
	if got := servedSerial(t, b.url, conf); got != 200 {
		t.Fatalf("serial %d served after a failed reload, want 200 still", got)
	}
}

// TestMutualTLS: with --tls-client-ca a client without a certificate the CA
// signed is refused in the handshake; one with it is served.
func TestMutualTLS(t *testing.T) {
	bridgeBin, helloBin := buildBinaries(t)
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	c, k := ca.issue(t, 100, false)
	writeAtomically(t, certFile, c)
	writeAtomically(t, keyFile, k)
	writeAtomically(t, caFile, ca.pem)
	b := startLoggedBridge(t, bridgeBin, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile, "--", helloBin)

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, DisableKeepAlives: true}}
	_, err := hc.Get(strings.TrimSuffix(b.url, "/mcp") + "/healthz")
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("GET without a client certificate: err %v, want the handshake refused (certificate required)", err)
	}

	other := newTestCA(t) // a certificate from another CA is refused too
	oc, ok := other.issue(t, 7, true)
	otherPair, err := tls.X509KeyPair(oc, ok)
	if err != nil {
		t.Fatal(err)
	}
	hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{otherPair}}, DisableKeepAlives: true}}
	if _, err := hc.Get(strings.TrimSuffix(b.url, "/mcp") + "/healthz"); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}

	cc, ck := ca.issue(t, 8, true)
	pair, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, b.url, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{pair}}); got != 100 {
		t.Fatalf("serial %d, want 100", got)
	}

	// The client mode presents a client certificate with
	// --tls-client-cert/--tls-client-key, and trusts --tls-ca.
	clientCert, clientKey := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writeAtomically(t, clientCert, cc)
	writeAtomically(t, clientKey, ck)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.Command(bridgeBin, "connect", b.url, "--tls-ca", caFile, "--tls-client-cert", clientCert, "--tls-client-key", clientKey)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mtls-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("bridge connect with a client certificate: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "mtls"}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call over mutual TLS: %v %+v", err, res)
	}
	cs.Close()

	// Without one it exits 1 and says why.
	var stderr strings.Builder
	cmd = exec.Command(bridgeBin, "connect", b.url, "--tls-ca", caFile)
	cmd.Stderr = &stderr
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "mtls-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil); err == nil {
		t.Fatal("bridge connect without a client certificate connected")
	}
	if cmd.ProcessState == nil {
		cmd.Wait()
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "certificate required") {
		t.Errorf("bridge connect without a client certificate: status %d, stderr %q", code, stderr.String())
	}
}

// TestTLSConfig: the TLS flags go together, and mutual TLS counts as
// authentication for a non-loopback --listen.
func TestTLSConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" means accepted
	}{
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together: give both"},
		{[]string{"--tls-key", "k.pem"}, "--tls-cert and --tls-key go together: give both"},
		{[]string{"--tls-client-ca", "ca.pem"}, "--tls-client-ca needs --tls-cert and --tls-key"},
		{[]string{"--listen", "0.0.0.0:8443", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "refusing to listen on 0.0.0.0:8443 without authentication"},
		{[]string{"--listen", "0.0.0.0:8443", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem"}, ""},
		{[]string{"--listen", "127.0.0.1:8443", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, ""},
	} {
		_, err := parseConfig(append(tc.args, "--", "server"))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want accepted", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// Package affinity keeps every request of an MCP session on the bridge
// instance that holds the session's child, when several instances run behind
// a load balancer that spreads requests among them.
//
// A session lives in one process: its child's stdio pipes, its in-flight
// requests and its event log cannot move. An AWS Application Load Balancer
// cannot route on a request header (Mcp-Session-Id), and many MCP clients
// keep no cookies, so neither header routing nor a stickiness cookie can be
// relied on. Instead the session ID itself names its owner:
//
//	<random>.<owner>.<mac>
//
// random is 128 bits from crypto/rand, owner is the owner's reachable
// "host:port", and mac is an HMAC-SHA256 over both under a secret that all
// instances of one deployment share. Each part is unpadded base64url, so the
// whole ID is visible ASCII (0x21-0x7E) as the MCP specification requires of
// session IDs.
//
// Any instance receiving a request whose ID names another owner
// reverse-proxies it there, streaming (SSE events are flushed as they
// arrive): bridge.Forwarder does, with the IDs of this package. This package
// holds no HTTP: it mints and verifies the IDs. Three rules keep this safe:
//
//   - Only IDs with a valid MAC are forwarded. Without the secret nobody can
//     make an instance send requests to an address of their choosing (SSRF);
//     an unknown, tampered or foreign ID is served locally, where the session
//     registry answers 404 because it does not know it.
//   - A forwarded request carries bridge.HopHeader and is never forwarded again, so
//     a misconfigured address cannot loop.
//   - An owner that cannot be reached (its task stopped, its address now
//     refuses connections) is answered 404, which the MCP specification gives
//     as the signal to start a new session: "The server MAY terminate the
//     session at any time, after which it MUST respond to requests containing
//     that session ID with HTTP 404 Not Found" (basic/transports, 2025-06-18).
//
// Forwarding grants nothing: the owner authenticates the forwarded request
// exactly as if the client had reached it directly (the Authorization header
// is passed through unchanged).
//
// All instances of a deployment must share the secret. Changing it ends
// every session: their IDs no longer verify, so they are served where they
// land and answered 404.
package affinity

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// MinSecretBytes is the shortest accepted Secret.
const MinSecretBytes = 32

// Sizes of the ID parts, in bytes before encoding.
const (
	randomBytes = 16 // 128 bits
	macBytes    = 16 // HMAC-SHA256 truncated to 128 bits
)

// macDomain separates these MACs from any other use of the same secret and
// versions the format: a later format uses another string.
const macDomain = "mcp-bridge affinity session id v1\x00"

// b64 is strict so that each ID has one spelling: the lenient decoder
// ignores the unused low bits of the last character, and the registry looks
// sessions up by the exact string.
var b64 = base64.RawURLEncoding.Strict()

// Options configures a Router. Self and Secret are required.
type Options struct {
	// Self is this instance's address as the other instances reach it,
	// "host:port" ("10.0.3.7:8080"). It is written into every session ID this
	// instance mints. It must not be an unspecified address such as 0.0.0.0.
	// On ECS, ResolveSelf finds it through the task metadata endpoint.
	Self string
	// Secret authenticates the owner address in session IDs. Every instance
	// of one deployment must use the same secret; at least MinSecretBytes.
	Secret []byte
}

// A Router mints session IDs that name this instance and says which
// instance owns a session (bridge.Forwarder forwards the requests). Its
// methods are safe for concurrent use.
type Router struct {
	self   string
	secret []byte
}

// New returns a Router, or an error saying which option is wrong.
func New(opts *Options) (*Router, error) {
	if opts == nil {
		return nil, errors.New("affinity: options are required (Self and Secret)")
	}
	if err := checkAddr(opts.Self); err != nil {
		return nil, fmt.Errorf("affinity: this instance's address %q: %w; set it to the host:port other instances reach it at", opts.Self, err)
	}
	if len(opts.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("affinity: the secret is %d bytes, need at least %d shared by all instances (for example the output of `openssl rand -hex 32`)", len(opts.Secret), MinSecretBytes)
	}
	return &Router{self: opts.Self, secret: bytes.Clone(opts.Secret)}, nil
}

// Self returns the address this instance writes into the IDs it mints.
func (r *Router) Self() string { return r.self }

// NewID returns a fresh session ID owned by this instance. It is meant for
// session.Options.NewID.
func (r *Router) NewID() (string, error) {
	random := make([]byte, randomBytes)
	if _, err := rand.Read(random); err != nil {
		return "", fmt.Errorf("affinity: cannot read random bytes for a session ID: %w", err)
	}
	head := b64.EncodeToString(random) + "." + b64.EncodeToString([]byte(r.self))
	return head + "." + b64.EncodeToString(r.mac(head)), nil
}

// Owner returns the owner address named by a session ID, and whether the ID
// was minted by an instance holding the same secret. It returns false for
// any ID it did not verify; such IDs are never forwarded.
func (r *Router) Owner(id string) (string, bool) {
	// The MAC covers everything before the last dot, so split there.
	dot := strings.LastIndexByte(id, '.')
	if dot < 0 {
		return "", false
	}
	head, tag := id[:dot], id[dot+1:]
	parts := strings.Split(head, ".")
	if len(parts) != 2 {
		return "", false
	}
	got, err := b64.DecodeString(tag)
	if err != nil || len(got) != macBytes || !hmac.Equal(got, r.mac(head)) {
		return "", false
	}
	if random, err := b64.DecodeString(parts[0]); err != nil || len(random) != randomBytes {
		return "", false
	}
	owner, err := b64.DecodeString(parts[1])
	if err != nil || checkAddr(string(owner)) != nil {
		return "", false
	}
	return string(owner), true
}

func (r *Router) mac(head string) []byte {
	m := hmac.New(sha256.New, r.secret)
	m.Write([]byte(macDomain))
	m.Write([]byte(head))
	return m.Sum(nil)[:macBytes]
}

// checkAddr accepts "host:port" with a non-empty host that other instances
// can dial, and a numeric port.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return errors.New("an unspecified address cannot be dialled by other instances")
	}
	for _, c := range host {
		if c <= 0x20 || c >= 0x7f {
			return errors.New("the host has a character outside visible ASCII")
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("the port %q is not a number from 1 to 65535", port)
	}
	return nil
}

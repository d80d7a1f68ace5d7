// Package affinity names, in each session ID, the bridge instance that owns
// the session, so that several instances behind a load balancer that
// spreads requests among them can send each request to its session's
// owner.
//
// A session lives in one process: its child's stdio pipes, its in-flight
// requests and its event log cannot move. An AWS Application Load Balancer
// cannot route on a request header (Mcp-Session-Id) or a query parameter
// (the legacy transport's sessionId), and many MCP clients keep no cookies,
// so neither header routing nor a stickiness cookie can be relied on.
// Instead the session ID itself names its owner:
//
//	<random>.<owner>.<mac>
//
// random is 128 bits from crypto/rand, owner is the owner's reachable
// "host:port", and mac is an HMAC-SHA256 over both under a secret that all
// instances of one deployment share. Each part is unpadded base64url, so the
// whole ID is visible ASCII (0x21-0x7E) as the MCP specification requires of
// session IDs, and needs no escaping in a URL's query.
//
// This package is the addressing only: it mints IDs (Instance.NewID, for
// session.Options.NewID), reads and verifies the owner of an ID
// (Instance.Owner), signs and verifies the principal of a request one
// instance passes to another (Instance.SignPrincipal, VerifyPrincipal), and
// finds this instance's own address (ResolveSelf). The forwarding itself,
// HTTP, lives with the rest of the HTTP front end in package bridge
// (bridge.Forwarder). Owner returns true only for an ID minted under the
// same secret: without the secret nobody can make an instance send
// requests to an address of their choosing (SSRF).
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
	"time"
)

// MinSecretBytes is the shortest accepted Secret.
const MinSecretBytes = 32

// MaxPrincipalAge bounds how old (or, with clocks apart, how far in the
// future) a signed principal (SignPrincipal) may be. It covers clock skew
// between instances and the time a request body takes to arrive: the
// signature is checked before the body is read.
const MaxPrincipalAge = 2 * time.Minute

// Sizes of the ID parts, in bytes before encoding.
const (
	randomBytes = 16 // 128 bits
	macBytes    = 16 // HMAC-SHA256 truncated to 128 bits
)

// macDomain separates these MACs from any other use of the same secret and
// versions the format: a later format uses another string.
const macDomain = "mcp-bridge affinity session id v1\x00"

// principalDomain separates the signed principals' MACs from the session
// IDs'.
const principalDomain = "mcp-bridge affinity forwarded principal v1\x00"

// b64 is strict so that each ID has one spelling: the lenient decoder
// ignores the unused low bits of the last character, and the registry looks
// sessions up by the exact string.
var b64 = base64.RawURLEncoding.Strict()

// An OptionError says which field of Options is wrong. Its message names
// no flag: Option names the field, so that the command can name its flag.
type OptionError struct {
	Field string // the field of Options, e.g. "Self"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct, e.g.
// "affinity.Options.Self".
func (e *OptionError) Option() string { return "affinity.Options." + e.Field }

// Options configures an Instance. Both fields are required.
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

// An Instance is this bridge instance within its deployment: it mints
// session IDs that name it, and verifies what other instances minted or
// signed under the shared secret. Its methods are safe for concurrent use.
type Instance struct {
	self   string
	secret []byte
}

// New returns an Instance, or an error saying which option is wrong.
func New(opts *Options) (*Instance, error) {
	if opts == nil {
		return nil, errors.New("affinity: options are required (Self and Secret)")
	}
	if err := checkAddr(opts.Self); err != nil {
		return nil, fmt.Errorf("affinity: this instance's address %q: %w; set it to the host:port other instances reach it at", opts.Self, err)
	}
	if len(opts.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("affinity: the secret is %d bytes, need at least %d shared by all instances (for example the output of `openssl rand -hex 32`)", len(opts.Secret), MinSecretBytes)
	}
	return &Instance{self: opts.Self, secret: bytes.Clone(opts.Secret)}, nil
}

// Self returns the address this instance writes into the IDs it mints.
func (in *Instance) Self() string { return in.self }

// NewID returns a fresh session ID owned by this instance. It is meant for
// session.Options.NewID.
func (in *Instance) NewID() (string, error) {
	random := make([]byte, randomBytes)
	if _, err := rand.Read(random); err != nil {
		return "", fmt.Errorf("affinity: cannot read random bytes for a session ID: %w", err)
	}
	head := b64.EncodeToString(random) + "." + b64.EncodeToString([]byte(in.self))
	return head + "." + b64.EncodeToString(in.mac(head)), nil
}

// Owner returns the owner address named by a session ID, and whether the ID
// was minted by an instance holding the same secret. It returns false for
// any ID it did not verify; such IDs must never be forwarded.
func (in *Instance) Owner(id string) (string, bool) {
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
	if err != nil || len(got) != macBytes || !hmac.Equal(got, in.mac(head)) {
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

func (in *Instance) mac(head string) []byte {
	m := hmac.New(sha256.New, in.secret)
	m.Write([]byte(macDomain))
	m.Write([]byte(head))
	return m.Sum(nil)[:macBytes]
}

// SignPrincipal vouches for a client's principal (an opaque name of its
// credential, without dots; empty when the deployment checks none) to the
// instance at owner, for one session, at time at:
// "<unix time>.<principal>.<mac>", the MAC an HMAC-SHA256 under the shared
// secret over owner, session, time and principal. Only owner accepts it
// (VerifyPrincipal), only for that session and only for MaxPrincipalAge,
// so whoever receives it, even a forged owner, can use it nowhere else.
func (in *Instance) SignPrincipal(owner, session, principal string, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return ts + "." + principal + "." + in.principalMAC(owner, session, ts, principal)
}

// VerifyPrincipal checks a value SignPrincipal made for this instance and
// session, at now, and returns its principal; or an error saying why it
// is refused, for the logs.
func (in *Instance) VerifyPrincipal(signed, session string, now time.Time) (string, error) {
	parts := strings.Split(signed, ".")
	if len(parts) != 3 {
		return "", errors.New("malformed")
	}
	ts, p, mac := parts[0], parts[1], parts[2]
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", errors.New("malformed")
	}
	if !hmac.Equal([]byte(mac), []byte(in.principalMAC(in.self, session, ts, p))) {
		return "", errors.New("its MAC does not verify for this instance and session")
	}
	if age := now.Sub(time.Unix(sec, 0)); age > MaxPrincipalAge || age < -MaxPrincipalAge {
		return "", errors.New("it is too old, or the instances' clocks are apart by more than " + MaxPrincipalAge.String())
	}
	return p, nil
}

func (in *Instance) principalMAC(owner, session, ts, principal string) string {
	m := hmac.New(sha256.New, in.secret)
	for _, s := range []string{principalDomain, owner, session, ts, principal} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return b64.EncodeToString(m.Sum(nil)[:macBytes])
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

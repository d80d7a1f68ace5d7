package pool

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
)

// statePrefix marks a requestState the bridge minted (a version tag: a
// later format gets another prefix, and an old bridge refuses it clearly).
const statePrefix = "mcpb1."

// State is what a requestState says, under the bridge's HMAC. The spec:
// "servers MUST treat requestState as an attacker-controlled input ...
// To prevent replay, servers SHOULD include the following inside the
// integrity-protected requestState payload and verify each on receipt:
// the authenticated principal ...; a short expiry (TTL) ...; an
// identifier for the originating request, e.g. the method name and a
// digest of its salient parameters" (basic/patterns/mrtr).
type State struct {
	// ID names the parked call: 128 random bits.
	ID string `json:"id"`
	// Round counts the InputRequiredResults of the call: a state is good
	// for one retry only (the next round gets a new state).
	Round int `json:"r"`
	// Instance is the bridge instance that holds the parked call.
	Instance string `json:"i"`
	// Principal is a digest of the principal the call belongs to.
	Principal string `json:"p"`
	// Method and Digest identify the request: its method, and a digest of
	// its params without _meta, inputResponses and requestState.
	Method string `json:"m"`
	Digest string `json:"d"`
	// Expires is the Unix time in milliseconds after which the state is
	// refused.
	Expires int64 `json:"e"`
}

// Errors of Verify: each is a refusal the client sees, with its reason.
var (
	ErrStateMalformed = errors.New("requestState is not one this bridge issued")
	ErrStateTampered  = errors.New("requestState failed verification (it was modified or signed with another key)")
	ErrStateExpired   = errors.New("requestState has expired; send the request again without requestState")
	ErrStatePrincipal = errors.New("requestState belongs to another principal")
	ErrStateRequest   = errors.New("requestState was issued for another request (method or params differ)")
)

// signer mints and verifies requestStates.
type signer struct {
	key []byte
}

func newSigner(key []byte) (*signer, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
	}
	if len(key) < 16 {
		return nil, errors.New("the requestState key must have at least 16 bytes")
	}
	// A key of its own, derived, so that the same secret signs session
	// IDs (affinity) and requestStates without one standing for the other.
	m := hmac.New(sha256.New, key)
	m.Write([]byte("mcp-bridge requestState v1"))
	return &signer{key: m.Sum(nil)}, nil
}

func (s *signer) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// Sign renders st as a requestState.
func (s *signer) Sign(st *State) string {
	b, _ := json.Marshal(st)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return statePrefix + payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

// Parse checks the signature of a requestState and returns what it says.
// It does not check expiry, principal or request: see Check.
func (s *signer) Parse(raw string) (*State, error) {
	rest, ok := strings.CutPrefix(raw, statePrefix)
	if !ok {
		return nil, ErrStateMalformed
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, ErrStateMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return nil, ErrStateMalformed
	}
	if !hmac.Equal(got, s.mac(payload)) {
		return nil, ErrStateTampered
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, ErrStateMalformed
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil || st.ID == "" {
		return nil, ErrStateMalformed
	}
	return &st, nil
}

// Check verifies what a signed state says against the retry presenting it.
func (st *State) Check(now time.Time, principal auth.Tag, method, digest string) error {
	switch {
	case now.UnixMilli() > st.Expires:
		return ErrStateExpired
	case st.Principal != principalDigest(principal):
		return ErrStatePrincipal
	case st.Method != method || st.Digest != digest:
		return ErrStateRequest
	}
	return nil
}

// principalDigest keeps the principal itself out of the state, which the
// client can read (it is also the principal's part of a legacy group's
// key).
//
// What is digested is what it was when the owner travelled untyped, the
// Go syntax of the value with its type ("%T\x00%#v": a tag was a string,
// and the unauthenticated owner nil), so that a requestState issued before
// stays good: a bridge upgraded in place keeps its clients' parked calls.
// Changing it refuses every state in flight with ErrStatePrincipal.
func principalDigest(principal auth.Tag) string {
	var b []byte
	if principal == "" {
		b = append(b, "principal\x00<nil>\x00<nil>"...)
	} else {
		// %q quotes as %#v does a string (strconv.Quote).
		b = fmt.Appendf(b, "principal\x00string\x00%q", string(principal))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// paramsDigest digests the salient params of a request: everything but
// _meta, inputResponses and requestState, canonicalized (members sorted,
// no white space) so that a client re-encoding the same params matches.
func paramsDigest(params []byte) (string, error) {
	var m map[string]any
	if len(params) > 0 {
		d := json.NewDecoder(bytes.NewReader(params))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return "", fmt.Errorf("params: %w", err)
		}
	}
	delete(m, "_meta")
	delete(m, "inputResponses")
	delete(m, "requestState")
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// randomID returns 128 random bits as text.
func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

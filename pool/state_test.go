package pool

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/auth"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// Every way a requestState can be wrong is refused with its own error.
func TestStateRefusals(t *testing.T) {
	s, err := newSigner([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	digest, _ := paramsDigest([]byte(`{"name":"t","arguments":{"a":1,"b":[1,2]},"_meta":{"x":1}}`))
	st := &State{ID: randomID(), Round: 1, Instance: "i1", Principal: principalDigest("alice"),
		Method: "tools/call", Digest: digest, Expires: now.Add(time.Minute).UnixMilli()}
	good := s.Sign(st)

	// The same params, re-encoded, with other _meta, inputResponses and
	// requestState: the same digest.
	same, _ := paramsDigest([]byte(`{ "arguments": {"b":[1,2],"a":1}, "name":"t", "requestState":"x", "inputResponses":{}, "_meta":{"y":2}}`))
	if same != digest {
		t.Fatal("the digest depends on encoding or on the non-salient members")
	}
	other, _ := paramsDigest([]byte(`{"name":"t","arguments":{"a":2,"b":[1,2]}}`))

	otherKey, _ := newSigner([]byte("another key of at least 16 bytes"))
	flip := []byte(good) // another valid character in the payload
	if i := len(statePrefix) + 3; flip[i] == 'A' {
		flip[i] = 'B'
	} else {
		flip[i] = 'A'
	}
	tests := []struct {
		name      string
		raw       string
		now       time.Time
		principal auth.Tag
		method    string
		digest    string
		want      error
	}{
		{"good", good, now, "alice", "tools/call", digest, nil},
		{"payload tampered", string(flip), now, "alice", "tools/call", digest, ErrStateTampered},
		{"signed with another key", otherKey.Sign(st), now, "alice", "tools/call", digest, ErrStateTampered},
		{"not a state", "hello", now, "alice", "tools/call", digest, ErrStateMalformed},
		{"no signature", statePrefix + "abc", now, "alice", "tools/call", digest, ErrStateMalformed},
		{"expired", good, now.Add(2 * time.Minute), "alice", "tools/call", digest, ErrStateExpired},
		{"another principal", good, now, "mallory", "tools/call", digest, ErrStatePrincipal},
		{"another method", good, now, "alice", "prompts/get", digest, ErrStateRequest},
		{"other params", good, now, "alice", "tools/call", other, ErrStateRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Parse(tc.raw)
			if err == nil {
				err = got.Check(tc.now, tc.principal, tc.method, tc.digest)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if strings.Contains(good, "alice") {
		t.Fatal("the principal is readable in the state")
	}
}

// The owner's digest in a requestState is what it was when the owner
// travelled untyped (an any holding the tag's string, or nil without
// authentication), so that a bridge upgraded in place still verifies the
// states it issued before: its clients' parked calls go on. The vectors
// were computed once with that code (commit 95c9e44, pool/state.go:
// sha256 of fmt "principal\x00%T\x00%#v" over the any, its first 12
// bytes in hex), with the key, the state and the time below.
func TestStateDigestKnownAnswers(t *testing.T) {
	for _, v := range []struct {
		owner  auth.Tag
		digest string
		state  string // a requestState that bridge signed
	}{
		{"oauth:9f2b7c1d4e8a6b3f0c5d2e7a1b4c8d6e", "2a9bb096d68fa7d4f7344a02",
			"mcpb1.eyJpZCI6IjBmMWUyZDNjNGI1YTY5Nzg4Nzk2YTViNGMzZDJlMWYwIiwiciI6MiwiaSI6ImkxIiwicCI6IjJhOWJiMDk2ZDY4ZmE3ZDRmNzM0NGEwMiIsIm0iOiJ0b29scy9jYWxsIiwiZCI6ImFiYzEyMyIsImUiOjE4OTM0NTYwMDAwMDB9.kHaU1rJjwD1MJjbiroDf5L0hcWmpT6CGJejkVmyBSX0"},
		{"static:5e1d", "95b462fac0d82f673334c2c2",
			"mcpb1.eyJpZCI6IjBmMWUyZDNjNGI1YTY5Nzg4Nzk2YTViNGMzZDJlMWYwIiwiciI6MiwiaSI6ImkxIiwicCI6Ijk1YjQ2MmZhYzBkODJmNjczMzM0YzJjMiIsIm0iOiJ0b29scy9jYWxsIiwiZCI6ImFiYzEyMyIsImUiOjE4OTM0NTYwMDAwMDB9.NFiLaGNK49_Wm2EBHqKCcNfAqxIZMXPPICivSwOwZ9c"},
		{"", "750d104b8f12355c8bda2a7d", // unauthenticated: the owner was nil
			"mcpb1.eyJpZCI6IjBmMWUyZDNjNGI1YTY5Nzg4Nzk2YTViNGMzZDJlMWYwIiwiciI6MiwiaSI6ImkxIiwicCI6Ijc1MGQxMDRiOGYxMjM1NWM4YmRhMmE3ZCIsIm0iOiJ0b29scy9jYWxsIiwiZCI6ImFiYzEyMyIsImUiOjE4OTM0NTYwMDAwMDB9.yKHT1LMpiPkMTWXsD68vw6hhZXSRsug5hw1abP9LE2M"},
	} {
		if got := principalDigest(v.owner); got != v.digest {
			t.Errorf("the digest of owner %q is %s, want %s (what the bridge before gave: its states would be refused)", v.owner, got, v.digest)
		}
		s, err := newSigner([]byte("0123456789abcdef0123456789abcdef"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Parse(v.state)
		if err != nil {
			t.Fatalf("owner %q: %v", v.owner, err)
		}
		if err := st.Check(time.UnixMilli(1893455000000), v.owner, "tools/call", "abc123"); err != nil {
			t.Errorf("owner %q: a state the bridge before issued: %v", v.owner, err)
		}
		for _, other := range []auth.Tag{"", "oauth:other", "static:5e1d"} {
			if other != v.owner && st.Check(time.UnixMilli(1893455000000), other, "tools/call", "abc123") == nil {
				t.Errorf("owner %q's state verifies for %q", v.owner, other)
			}
		}
	}
}

package pool

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
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
		principal string
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

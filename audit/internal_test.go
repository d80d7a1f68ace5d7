package audit

import (
	"math/rand/v2"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// within finds what Lookup found in the tail of a message, and only there.
func TestInFlight(t *testing.T) {
	f := newInFlight()
	id, other := jsonrpc.NumberID(1), jsonrpc.NumberID(2)
	a, b, c := &pending{method: "a"}, &pending{method: "b"}, &pending{method: "c"}
	if !f.add("alice", id, a) || !f.add("bob", id, b) || !f.add("carol", id, c) {
		t.Fatal("requests of three clients with one id refused")
	}
	if f.add("bob", id, &pending{}) || f.add("alice", id, &pending{}) {
		t.Fatal("a second request 1 of a client kept")
	}
	if !f.add("bob", other, &pending{method: "b2"}) {
		t.Fatal("request 2 of bob refused")
	}
	if f.take("dave", id, nil) != nil || f.take("bob", id, a) != nil || f.take("alice", id, b) != nil {
		t.Fatal("took a request of another client, or another request")
	}
	// The first with its id, then one of the others: a client whose
	// request is among the others still may not send its id again.
	if got := f.take("alice", id, nil); got != a {
		t.Fatalf("take alice: %v", got)
	}
	if f.add("bob", id, &pending{}) {
		t.Fatal("a second request 1 of bob kept once alice's was answered")
	}
	if got := f.take("bob", id, b); got != b {
		t.Fatalf("take bob: %v", got)
	}
	if !f.add("alice", id, a) {
		t.Fatal("alice's next request 1 refused")
	}
	for _, want := range []struct {
		origin string
		p      *pending
	}{{"carol", c}, {"alice", a}} {
		if got := f.take(want.origin, id, nil); got != want.p {
			t.Fatalf("take %s: %v, want %v", want.origin, got, want.p)
		}
		if f.take(want.origin, id, nil) != nil {
			t.Fatalf("%s's request taken twice", want.origin)
		}
	}
	if got := f.take("bob", other, nil); got == nil || got.method != "b2" {
		t.Fatalf("bob's request 2: %v", got)
	}
	if len(f.byID)+len(f.others) != 0 {
		t.Fatalf("left %v and %v", f.byID, f.others)
	}
	for i := range MaxPending {
		if !f.add(i, jsonrpc.NumberID(int64(i%2)), &pending{}) {
			t.Fatalf("request %d refused", i)
		}
	}
	if f.add(MaxPending, id, &pending{}) || f.add(MaxPending, other, &pending{}) {
		t.Fatal("a request beyond MaxPending kept")
	}
	if f.take(MaxPending-1, id, nil) == nil || !f.add(MaxPending, id, &pending{}) {
		t.Fatal("no room after an answer")
	}
}

// inFlight keeps and gives back what a map by client and id would, over
// random additions and removals by few clients and ids.
func TestInFlightAsMap(t *testing.T) {
	f, model := newInFlight(), map[key]*pending{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		origin, id := rng.IntN(4), jsonrpc.NumberID(int64(rng.IntN(3)))
		k := key{origin, id}
		switch rng.IntN(3) {
		case 0:
			p := &pending{bytesIn: i}
			_, dup := model[k]
			if got := f.add(origin, id, p); got != !dup {
				t.Fatalf("op %d: add %v: %v", i, k, got)
			}
			if !dup {
				model[k] = p
			}
		case 1:
			if got, want := f.take(origin, id, nil), model[k]; got != want {
				t.Fatalf("op %d: take %v: %v, want %v", i, k, got, want)
			}
			delete(model, k)
		case 2:
			// Only the request given: another one stays.
			p := &pending{}
			if rng.IntN(2) == 0 {
				p = model[k]
			}
			got := f.take(origin, id, p)
			if want := model[k]; (want != nil && want == p) != (got != nil) || got != nil && got != want {
				t.Fatalf("op %d: take %v of %v: %v, want %v", i, k, p, got, want)
			}
			if got != nil {
				delete(model, k)
			}
		}
		if f.len() != len(model) {
			t.Fatalf("op %d: %d kept, want %d", i, f.len(), len(model))
		}
		if f.one != nil && f.byID[f.oneID] != nil {
			t.Fatalf("op %d: id %s in one and in byID", i, f.oneID)
		}
	}
}

package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// A legacy pool is keyed by (principal, capabilities),
// and capabilities that differ in what no legacy child uses (experimental
// members, unknown ones) each started a process: 60 capability sets, 60
// starts. They now make one key, and the starts are counted.
func TestCapabilitySetsShareChildren(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Max: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 60 {
		r := toolCall(t, i+1, "echo", fmt.Sprintf(`{"text":"c%d"}`, i))
		r.Caps = json.RawMessage(fmt.Sprintf(`{"experimental":{"x%d":{}},"roots":{"listChanged":true,"v%d":1},"sampling":{"z%d":{}}}`, i, i, i))
		ans, err := p.Serve(ctx, r, noEmit)
		if err := answered(ans, err, fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Started != 1 {
		t.Fatalf("60 calls with as many capability sets started %d children, want 1 (%+v)", s.Started, s)
	}
}

// At Max, a request whose key has no child takes an idle child of its
// principal initialized with fewer capabilities than it declared (the
// child then asks for nothing the client lacks), rather than stop one and
// start another.
func TestReuseAtMaxWithFewerCapabilities(t *testing.T) {
	p := testPool(t, Options{Era: EraLegacy, Max: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, caps := range []string{`{}`, `{"elicitation":{}}`, `{"roots":{}}`, `{}`} {
		r := toolCall(t, i+1, "echo", `{"text":"x"}`)
		r.Caps = json.RawMessage(caps)
		ans, err := p.Serve(ctx, r, noEmit)
		if err := answered(ans, err, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Started != 1 || s.Evicted != 0 {
		t.Fatalf("%+v, want 1 child started, none stopped for another key", s)
	}
}

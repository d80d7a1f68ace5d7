package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// A tool's or prompt's name is written as json.Marshal writes the name
// decoded, whether the line copies it as the request wrote it or decodes
// it: escapes, HTML, Unicode, long names, empty ones.
func TestNameAsWritten(t *testing.T) {
	c := &conn{l: New(&bytes.Buffer{}, nil), session: "s", quotedSession: quoted("s")}
	long := strings.Repeat("n", maxQuotedName)
	for _, raw := range []string{`"echo"`, `"get_weather.v2-x"`, `"a\"b"`, `"a\u0041"`, `"<x>&"`, `"ü"`, `"\u2028"`, `""`,
		`"` + long[:maxQuotedName-2] + `"`, `"` + long[:maxQuotedName-1] + `"`, `"` + long + `"`, `"tab\t"`, `"/"`} {
		for _, method := range []string{"tools/call", "prompts/get"} {
			data := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"name":` + raw + `,"arguments":{}}}`
			env, err := jsonrpc.Parse([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			m := &peer.Message{Message: jsonrpc.Message{Data: []byte(data), Env: env}, Dir: peer.ToChild, Method: method}
			var p pending
			c.record(m, false, &p)
			var rec Record
			p.line(c, &rec)
			rec.Time, rec.Outcome = time.Date(2026, 7, 28, 0, 0, 0, 0, time.UTC), "ok"
			got := rec.appendJSON(nil)
			want := rec
			want.quotedLen = 0
			want.ArgsSHA256 = hex.EncodeToString(rec.argsSum[:]) // what Marshal writes
			name := env.Name([]byte(data))
			if method == "tools/call" {
				want.Tool = name
			} else {
				want.Prompt = name
			}
			w, err := json.Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, w) {
				t.Errorf("%s %s:\n got %s\nwant %s", method, raw, got, w)
			}
			if copied := p.quotedLen > 0; copied != (name != "" && len(raw) <= maxQuotedName && !strings.ContainsAny(raw[1:len(raw)-1], `\<>&ü`)) {
				t.Errorf("%s %s: copied %v", method, raw, copied)
			}
		}
	}
}

// take is f.take, returning what it took.
func take(f *inFlight, origin peer.Origin, id jsonrpc.ID, seq uint64) (pending, bool) {
	var p pending
	ok := f.take(origin, id, seq, &p)
	return p, ok
}

// Requests of three clients with one id are kept apart, a client's
// second request with an id in flight is refused, and take gives back the
// request it names.
func TestInFlight(t *testing.T) {
	f := newInFlight()
	id, other := jsonrpc.NumberID(1), jsonrpc.NumberID(2)
	a, b, c := &pending{method: "a"}, &pending{method: "b"}, &pending{method: "c"}
	if !f.add(client("alice"), id, a) || !f.add(client("bob"), id, b) || !f.add(client("carol"), id, c) {
		t.Fatal("requests of three clients with one id refused")
	}
	if f.add(client("bob"), id, &pending{}) || f.add(client("alice"), id, &pending{}) {
		t.Fatal("a second request 1 of a client kept")
	}
	if !f.add(client("bob"), other, &pending{method: "b2"}) {
		t.Fatal("request 2 of bob refused")
	}
	if _, ok := take(&f, client("dave"), id, 0); ok {
		t.Fatal("took a request of another client")
	}
	if _, ok := take(&f, client("bob"), id, a.seq); ok {
		t.Fatal("took another request")
	}
	if _, ok := take(&f, client("alice"), id, b.seq); ok {
		t.Fatal("took another request")
	}
	// The first with its id, then one of the others: a client whose
	// request is among the others still may not send its id again.
	if got, _ := take(&f, client("alice"), id, 0); got.method != "a" {
		t.Fatalf("take alice: %v", got)
	}
	if f.add(client("bob"), id, &pending{}) {
		t.Fatal("a second request 1 of bob kept once alice's was answered")
	}
	if got, _ := take(&f, client("bob"), id, b.seq); got.method != "b" {
		t.Fatalf("take bob: %v", got)
	}
	if !f.add(client("alice"), id, a) {
		t.Fatal("alice's next request 1 refused")
	}
	for _, want := range []struct{ origin, method string }{{"carol", "c"}, {"alice", "a"}} {
		if got, _ := take(&f, client(want.origin), id, 0); got.method != want.method {
			t.Fatalf("take %s: %v, want %v", want.origin, got, want.method)
		}
		if _, ok := take(&f, client(want.origin), id, 0); ok {
			t.Fatalf("%s's request taken twice", want.origin)
		}
	}
	if got, _ := take(&f, client("bob"), other, 0); got.method != "b2" {
		t.Fatalf("bob's request 2: %v", got)
	}
	if f.len() != 0 {
		t.Fatalf("left %v, %v and %v", f.hasOne, f.byID, f.others)
	}
	for i := range MaxPending {
		if !f.add(number(i), jsonrpc.NumberID(int64(i%2)), &pending{}) {
			t.Fatalf("request %d refused", i)
		}
	}
	if f.add(number(MaxPending), id, &pending{}) || f.add(number(MaxPending), other, &pending{}) {
		t.Fatal("a request beyond MaxPending kept")
	}
	if _, ok := take(&f, number(MaxPending-1), id, 0); !ok || !f.add(number(MaxPending), id, &pending{}) {
		t.Fatal("no room after an answer")
	}
}

// inFlight keeps and gives back what a map by client and id would, over
// random additions and removals by few clients and ids.
func TestInFlightAsMap(t *testing.T) {
	f, model := newInFlight(), map[key]pending{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		origin, id := number(rng.IntN(4)), jsonrpc.NumberID(int64(rng.IntN(3)))
		k := key{origin, id}
		switch rng.IntN(3) {
		case 0:
			p := &pending{bytesIn: i}
			_, dup := model[k]
			if got := f.add(origin, id, p); got != !dup {
				t.Fatalf("op %d: add %v: %v", i, k, got)
			}
			if !dup {
				model[k] = *p
			}
		case 1:
			got, ok := take(&f, origin, id, 0)
			want, had := model[k]
			if ok != had || got.seq != want.seq || got.bytesIn != want.bytesIn {
				t.Fatalf("op %d: take %v: %v %v, want %v %v", i, k, got, ok, want, had)
			}
			delete(model, k)
		case 2:
			// Only the request given: another one stays.
			seq := uint64(rng.IntN(int(f.seq) + 1))
			want, had := model[k]
			if rng.IntN(2) == 0 && had {
				seq = want.seq
			}
			got, ok := take(&f, origin, id, seq)
			if wantOK := had && (seq == 0 || want.seq == seq); ok != wantOK || ok && (got.seq != want.seq || got.bytesIn != want.bytesIn) {
				t.Fatalf("op %d: take %v of %d: %v %v, want %v %v", i, k, seq, got, ok, want, wantOK)
			}
			if ok {
				delete(model, k)
			}
		}
		if f.len() != len(model) {
			t.Fatalf("op %d: %d kept, want %d", i, f.len(), len(model))
		}
		if f.hasOne && f.byID[f.oneID] != nil {
			t.Fatalf("op %d: id %s in one and in byID", i, f.oneID)
		}
	}
}

// client is a test's client (peer.Origin), acting for nobody.
type client string

func (client) Caller() *auth.Principal { return nil }

// number is a test's client (peer.Origin) called by a number.
type number int

func (number) Caller() *auth.Principal { return nil }

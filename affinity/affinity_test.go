package affinity

import (
	"strings"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string]*Options{
		"nil":           nil,
		"no self":       {Secret: testSecret},
		"unspecified":   {Self: "0.0.0.0:8080", Secret: testSecret},
		"no port":       {Self: "10.0.0.1", Secret: testSecret},
		"empty host":    {Self: ":8080", Secret: testSecret},
		"bad port":      {Self: "10.0.0.1:http", Secret: testSecret},
		"space in host": {Self: "a b:80", Secret: testSecret},
		"short secret":  {Self: "10.0.0.1:8080", Secret: []byte("too short")},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
}

func TestNewIDNamesOwner(t *testing.T) {
	r, err := New(&Options{Self: "10.0.3.7:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 1000 {
		id, err := r.NewID()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []byte(id) {
			if c < 0x21 || c > 0x7e {
				t.Fatalf("id %q has byte %#x outside visible ASCII", id, c)
			}
		}
		if seen[id] {
			t.Fatalf("id %q minted twice", id)
		}
		seen[id] = true
		owner, ok := r.Owner(id)
		if !ok || owner != "10.0.3.7:8080" {
			t.Fatalf("Owner(%q) = %q, %v; want 10.0.3.7:8080, true", id, owner, ok)
		}
		random, err := b64.DecodeString(strings.Split(id, ".")[0])
		if err != nil || len(random)*8 < 128 {
			t.Fatalf("id %q: random part has %d bits, want >= 128 (err %v)", id, len(random)*8, err)
		}
	}
	// Another instance of the same deployment (same secret) reads the owner.
	other, err := New(&Options{Self: "10.0.9.9:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := r.NewID()
	if owner, ok := other.Owner(id); !ok || owner != "10.0.3.7:8080" {
		t.Fatalf("other instance: Owner = %q, %v", owner, ok)
	}
}

func TestOwnerRejectsUnverifiedIDs(t *testing.T) {
	r, err := New(&Options{Self: "10.0.3.7:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := New(&Options{Self: "169.254.169.254:80", Secret: []byte("another deployment's secret, 32+ bytes")})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := r.NewID()
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + b64.EncodeToString([]byte("169.254.169.254:80")) + "." + parts[2]
	foreignID, _ := foreign.NewID()
	flip := []byte(good)
	if flip[len(flip)-1] == 'A' {
		flip[len(flip)-1] = 'B'
	} else {
		flip[len(flip)-1] = 'A'
	}
	for name, id := range map[string]string{
		"empty":            "",
		"random hex":       "3f2a9c1b7d0e4f5a3f2a9c1b7d0e4f5a",
		"owner swapped":    forged,
		"mac changed":      string(flip),
		"other secret":     foreignID,
		"extra part":       "x." + good,
		"two parts":        parts[0] + "." + parts[2],
		"padding appended": good + "=",
		"bad base64":       parts[0] + ".!!!." + parts[2],
	} {
		if owner, ok := r.Owner(id); ok {
			t.Errorf("%s: Owner(%q) = %q, true; want false", name, id, owner)
		}
	}
	// An ID whose MAC is valid but whose owner is not host:port (only an
	// instance with the secret could make one) is refused all the same.
	head := parts[0] + "." + b64.EncodeToString([]byte("not an address"))
	id := head + "." + b64.EncodeToString(r.mac(head))
	if _, ok := r.Owner(id); ok {
		t.Errorf("Owner accepted an owner that is not host:port")
	}
}

// A signed principal verifies only at the owner it was signed for, for
// its session, within MaxPrincipalAge, under the same secret.
func TestSignPrincipal(t *testing.T) {
	a, err := New(&Options{Self: "10.0.3.7:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(&Options{Self: "10.0.9.9:8080", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := New(&Options{Self: "10.0.9.9:8080", Secret: []byte("another deployment's secret, 32+ bytes")})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := a.NewID()
	other, _ := a.NewID()
	now := time.Now()
	const p = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
	if got, err := a.VerifyPrincipal(b.SignPrincipal(a.Self(), id, p, now), id, now); err != nil || got != p {
		t.Fatalf("fresh: %q, %v; want %q", got, err, p)
	}
	if got, err := a.VerifyPrincipal(b.SignPrincipal(a.Self(), id, "", now), id, now); err != nil || got != "" {
		t.Fatalf("empty principal: %q, %v", got, err)
	}
	for name, signed := range map[string]string{
		"for another owner":   b.SignPrincipal(b.Self(), id, p, now),
		"for another session": b.SignPrincipal(a.Self(), other, p, now),
		"too old":             b.SignPrincipal(a.Self(), id, p, now.Add(-MaxPrincipalAge-time.Second)),
		"from the future":     b.SignPrincipal(a.Self(), id, p, now.Add(MaxPrincipalAge+time.Second)),
		"another principal":   strings.Replace(b.SignPrincipal(a.Self(), id, p, now), p, "00"+p[2:], 1),
		"other secret":        foreign.SignPrincipal(a.Self(), id, p, now),
		"malformed":           "garbage",
		"bad time":            "x." + p + ".mac",
	} {
		if got, err := a.VerifyPrincipal(signed, id, now); err == nil {
			t.Errorf("%s: VerifyPrincipal accepted it (%q)", name, got)
		}
	}
}

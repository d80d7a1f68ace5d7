package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// everyOptions are the options of a member running the Go SDK
// everything-server.
func everyOptions(t testing.TB, name string) *endpoint.ServerOptions {
	return &endpoint.ServerOptions{
		Name:         name,
		Local:        sandbox.LocalOptions{Command: childtest.EverythingServer(t)},
		Unsupervised: true,
		StopGrace:    2 * time.Second,
		AuditLog:     filepath.Join(t.TempDir(), name+"-audit.log"),
	}
}

func frontOptions(name string) *endpoint.ServerOptions {
	return &endpoint.ServerOptions{Name: name, PoolMax: pool.DefaultMax, RequestStateTTL: pool.DefaultStateTTL}
}

func connectVersion(t testing.TB, url, version string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "endpoint-test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting (%s): %v", version, err)
	}
	return cs
}

// An aggregate endpoint of two members, each with its own guards: a
// member's policy hides and refuses its own tool by its own name (not the
// advertised one) and leaves the other member's tool of the same name alone; the
// member's audit log names the call by the member's name; the gauges count
// the member children sessions run, in both eras.
func TestBuildAggregate(t *testing.T) {
	sh := shared(t)
	a := everyOptions(t, "a")
	p, err := policy.Parse("a.yaml", []byte("tools:\n  deny: [test_simple_text]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a.Policy = p
	b := everyOptions(t, "b")
	agg, err := endpoint.BuildAggregate(context.Background(), sh, &endpoint.AggregateOptions{
		Front:   frontOptions("/mcp"),
		Members: []endpoint.AggregateMember{{Server: a}, {Server: b, Prefix: "bee"}},
	}, "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(agg.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := agg.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			cs := connectVersion(t, srv.URL+"/mcp", version)
			defer cs.Close()
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			// Member a's policy hides its own test_simple_text from
			// the lists too, as on a's own path.
			if slices.Contains(names, "a__test_simple_text") || !slices.Contains(names, "bee__test_simple_text") {
				t.Fatalf("tools/list: %v, want bee__test_simple_text and not a__test_simple_text", names)
			}
			got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bee__test_simple_text"})
			if err != nil || got.IsError {
				t.Fatalf("bee__test_simple_text: %v %+v", err, got)
			}
			got, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__test_simple_text"})
			if err == nil && !got.IsError {
				t.Fatalf("a__test_simple_text answered through member a's policy, which denies test_simple_text: %+v", got.Content)
			}
			if err != nil && !strings.Contains(err.Error(), "test_simple_text") {
				t.Errorf("the denial does not name the member's own tool: %v", err)
			}
			// The session runs a child of each member it called (a, b).
			if version == "2025-11-25" {
				scrape := scrapeMetrics(t, sh)
				for _, want := range []string{`mcp_bridge_aggregate_member_children{server="/mcp"} 2`, `mcp_bridge_aggregate_members_down{server="/mcp"} 0`} {
					if !strings.Contains(scrape, want+"\n") {
						t.Errorf("metrics lack %s:\n%s", want, grepLines(scrape, "aggregate"))
					}
				}
			}
		})
	}
	if err := agg.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(b.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"server":"b","session":`) || !strings.Contains(string(data), `"tool":"test_simple_text","advertised":"bee__test_simple_text"`) {
		t.Errorf("member b's audit log does not hold its call by its server, its own name and the name its clients know:\n%s", data)
	}
}

// Aggregates: a changed aggregate is rebuilt (new sessions reach the new
// one) while the old one drains; a removed one gets 404 from the caller's
// fallback (Handler nil).
func TestAggregatesApply(t *testing.T) {
	sh := shared(t)
	s, srv := serveAggregates(t, sh)
	spec := func(key string, members ...string) endpoint.AggregateSpec {
		return endpoint.AggregateSpec{Path: endpoint.GroupPath("g"), Key: key, Build: func(ctx context.Context) (*endpoint.Aggregate, error) {
			o := &endpoint.AggregateOptions{Front: frontOptions(endpoint.GroupPath("g"))}
			for _, m := range members {
				o.Members = append(o.Members, endpoint.AggregateMember{Server: everyOptions(t, m)})
			}
			return endpoint.BuildAggregate(ctx, sh, o, endpoint.GroupPath("g"))
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list := func() []string {
		cs := connectVersion(t, srv.URL+"/groups/g/mcp", "2025-11-25")
		defer cs.Close()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tool := range res.Tools {
			out = append(out, strings.SplitN(tool.Name, "__", 2)[0])
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	if _, err := s.Apply(ctx, []endpoint.AggregateSpec{spec("1", "x")}); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("prefixes listed: %v, want [x]", got)
	}
	ch, err := s.Apply(ctx, []endpoint.AggregateSpec{spec("2", "x", "y")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Changed, []string{"/groups/g/mcp"}) {
		t.Fatalf("changes %+v, want /groups/g/mcp changed", ch)
	}
	if got := list(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("prefixes listed after the change: %v, want [x y]", got)
	}
	if _, err := s.Apply(ctx, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+"/groups/g/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a removed aggregate answered %d, want 404", resp.StatusCode)
	}
}

// serveAggregates serves an empty Aggregates (404 where none serves),
// closed at the test's end.
func serveAggregates(t *testing.T, sh *endpoint.Shared) (*endpoint.Aggregates, *httptest.Server) {
	t.Helper()
	s := endpoint.NewAggregates(&endpoint.SetOptions{Grace: 5 * time.Second, StopBudget: 10 * time.Second, Logger: sh.Logger})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := s.Handler(r); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return s, srv
}

func scrapeMetrics(t *testing.T, sh *endpoint.Shared) string {
	t.Helper()
	rec := httptest.NewRecorder()
	sh.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// BenchmarkAggregateCall is the cost of a tools/call through an
// aggregate (/mcp) against the member's own endpoint
// (/servers/NAME/mcp), both on the same server (the everything-server's
// test_simple_text), in a 2025 session and in revision 2026-07-28. The
// two targets alternate, five rounds each (paired: compare them within
// one run, round by round).
func BenchmarkAggregateCall(b *testing.B) {
	sh := &endpoint.Shared{Logger: slog.New(slog.DiscardHandler)}
	member := everyOptions(b, "m")
	member.AuditLog = ""
	member.ChildEra, member.PoolMax, member.RequestStateTTL = pool.EraLegacy, pool.DefaultMax, pool.DefaultStateTTL
	alone, err := endpoint.Build(context.Background(), sh, member, "/servers/m/mcp")
	if err != nil {
		b.Fatal(err)
	}
	agg, err := endpoint.BuildAggregate(context.Background(), sh, &endpoint.AggregateOptions{
		Front: frontOptions("/mcp"), Members: []endpoint.AggregateMember{{Server: member}},
	}, "/mcp")
	if err != nil {
		b.Fatal(err)
	}
	srvAlone, srvAgg := httptest.NewServer(alone.Handler()), httptest.NewServer(agg.Handler())
	b.Cleanup(func() {
		srvAlone.Close()
		srvAgg.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = alone.Close(ctx)
		_ = agg.Close(ctx)
	})
	for range 5 {
		for _, version := range []string{"2025-11-25", "2026-07-28"} {
			for _, target := range []struct{ name, url, tool string }{
				{"member", srvAlone.URL + "/servers/m/mcp", "test_simple_text"},
				{"aggregate", srvAgg.URL + "/mcp", "m__test_simple_text"},
			} {
				b.Run(version+"/"+target.name, func(b *testing.B) {
					cs := connectVersion(b, target.url, version)
					defer cs.Close()
					ctx := context.Background()
					if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: target.tool}); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for b.Loop() {
						if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: target.tool}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// serveAggregate builds the aggregate of o at /mcp and serves it; setup,
// if set, gets the server's URL first (to set up sh.Auth for it). It
// returns the server's URL.
func serveAggregate(t *testing.T, sh *endpoint.Shared, o *endpoint.AggregateOptions, setup func(base string)) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	if setup != nil {
		setup(base)
	}
	agg, err := endpoint.BuildAggregate(context.Background(), sh, o, "/mcp")
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	srv.Config.Handler = agg.Handler()
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := agg.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return base
}

// headers adds fixed headers to each request of a client.
type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.next.RoundTrip(r)
}

func toolNames(t *testing.T, ctx context.Context, cs *mcp.ClientSession) ([]string, *mcp.ListToolsResult) {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names, res
}

// A member's policy filters the aggregate's shared lists per caller, as
// it filters the member's own: a tool whose scope a caller lacks is out
// of that caller's tools/list (and only of that member's items), and in
// the list of a caller with the scope, in both eras.
func TestAggregateListsPerCaller(t *testing.T) {
	sh := shared(t)
	a := everyOptions(t, "a")
	p, err := policy.Parse("a.yaml", []byte("tools:\n  scopes:\n    test_simple_text: [a:text]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a.Policy = p
	var as *oauthtest.Server
	url := serveAggregate(t, sh, &endpoint.AggregateOptions{
		Front:   frontOptions("/mcp"),
		Members: []endpoint.AggregateMember{{Server: a}, {Server: everyOptions(t, "b")}},
	}, func(base string) {
		as = oauthtest.New(t, oauthtest.Options{Audience: []string{base + "/mcp"}, Scopes: []string{"a:text"}})
		var err error
		sh.Auth, err = auth.New(context.Background(), &auth.Options{Issuer: as.URL, ResourceURL: base + "/mcp", Logger: sh.Logger})
		if err != nil {
			t.Fatal(err)
		}
		sh.Authenticates = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(version, sub string, scopes ...string) *mcp.ClientSession {
		tok := as.Sign(t, as.Claims(sub, url+"/mcp", scopes...))
		hc := &http.Client{Transport: headers{http.Header{"Authorization": {"Bearer " + tok}}, http.DefaultTransport}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "endpoint-test", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connecting as %s (%s): %v", sub, version, err)
		}
		return cs
	}
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			alice := connect(version, "alice", "a:text")
			defer alice.Close()
			bob := connect(version, "bob")
			defer bob.Close()
			names, _ := toolNames(t, ctx, alice)
			if !slices.Contains(names, "a__test_simple_text") || !slices.Contains(names, "b__test_simple_text") {
				t.Errorf("alice, who has the scope a:text, lists %v: want a__test_simple_text and b__test_simple_text", names)
			}
			names, _ = toolNames(t, ctx, bob)
			if slices.Contains(names, "a__test_simple_text") {
				t.Errorf("bob, without the scope a:text, lists a__test_simple_text, which member a's policy hides from him: %v", names)
			}
			if !slices.Contains(names, "b__test_simple_text") || !slices.Contains(names, "a__test_image_content") {
				t.Errorf("bob lost tools no policy hides from him: %v", names)
			}
		})
	}
}

// In revision 2026-07-28, a list a member's policy filtered is
// cacheScope "private" (it holds what this caller may see), even where
// the bridge does not authenticate; a list nothing filtered stays
// "public".
func TestAggregateFilteredListIsPrivate(t *testing.T) {
	sh := shared(t)
	a := everyOptions(t, "a")
	p, err := policy.Parse("a.yaml", []byte("tools:\n  deny: [test_simple_text]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a.Policy = p
	url := serveAggregate(t, sh, &endpoint.AggregateOptions{
		Front:   frontOptions("/mcp"),
		Members: []endpoint.AggregateMember{{Server: a}, {Server: everyOptions(t, "b")}},
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := connectVersion(t, url+"/mcp", "2026-07-28")
	defer cs.Close()
	names, res := toolNames(t, ctx, cs)
	if slices.Contains(names, "a__test_simple_text") || !slices.Contains(names, "b__test_simple_text") {
		t.Errorf("tools/list: %v; want b__test_simple_text, not a__test_simple_text (member a's policy denies it)", names)
	}
	if res.CacheScope != "private" {
		t.Errorf("tools/list filtered by a policy: cacheScope %q, want private", res.CacheScope)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prompts.CacheScope != "public" {
		t.Errorf("prompts/list, which no policy filters, without authentication: cacheScope %q, want public", prompts.CacheScope)
	}
}

// A member's --on-pin-violation end-session reaches its catalog's pin
// enforcer: a member whose server offers what the inspection refuses
// (descriptions longer than the bound) is down, with the enforcer's
// reason, and its calls are refused naming it; the other member, whose
// violations drop items (the default), stays up.
func TestAggregatePinEndSession(t *testing.T) {
	sh := shared(t)
	a := everyOptions(t, "a")
	a.Inspection = pin.Inspection{MaxDescriptionBytes: 8}
	a.OnPinViolation = pin.EndSession
	b := everyOptions(t, "b")
	b.Inspection = pin.Inspection{MaxDescriptionBytes: 8} // dropped, not ended
	agg, err := endpoint.BuildAggregate(context.Background(), sh, &endpoint.AggregateOptions{
		Front:   frontOptions("/mcp"),
		Members: []endpoint.AggregateMember{{Server: a}, {Server: b}},
	}, "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(agg.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := agg.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := agg.Agg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	down := agg.Agg.Down()
	if err := down["a"]; err == nil || !strings.Contains(err.Error(), "end-session") {
		t.Fatalf("members down: %v; want a, ended by its pin enforcer", down)
	}
	if _, ok := down["b"]; ok {
		t.Fatalf("member b is down (%v): its violations drop items, they do not end it", down["b"])
	}
	cs := connectVersion(t, srv.URL+"/mcp", "2025-11-25")
	defer cs.Close()
	got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__test_simple_text"})
	if err == nil && !got.IsError {
		t.Fatalf("a call of member a, down for its pin violation, answered: %+v", got.Content)
	}
	if err != nil && !strings.Contains(err.Error(), `aggregate member "a" is unavailable`) {
		t.Errorf("the refusal does not name member a: %v", err)
	}
}

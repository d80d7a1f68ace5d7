package endpoint_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/policy"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// Aggregates.Apply of a configuration that changes an aggregate's members
// only updates it in place: a 2025 session opened before goes on (no
// 503), and lists what the members are now: y's tools gone, z's in with
// z's policy applied to them; the gauge of members down forgets the
// member removed while down. A configuration whose members would
// advertise one name is refused and changes nothing; one that changes
// the separator rebuilds the aggregate.
func TestAggregatesApplyInPlace(t *testing.T) {
	sh := shared(t)
	s, srv := serveAggregates(t, sh)
	deny, err := policy.Parse("z.yaml", []byte("tools:\n  deny: [test_simple_text]\n"))
	if err != nil {
		t.Fatal(err)
	}
	path := endpoint.GroupPath("g")
	member := func(name, prefix, key string) endpoint.AggregateMember {
		o := everyOptions(t, name)
		switch name {
		case "z":
			o.Policy = deny
		case "down":
			o.Local = sandbox.LocalOptions{Command: "false"} // exits at once: down
		}
		return endpoint.AggregateMember{Server: o, Prefix: prefix, Key: key}
	}
	spec := func(sep string, members ...endpoint.AggregateMember) endpoint.AggregateSpec {
		o := &endpoint.AggregateOptions{Front: frontOptions(path), Members: members, Separator: sep}
		key := sep
		for _, m := range members {
			key += "/" + m.Server.Name + "=" + m.Key
		}
		return endpoint.AggregateSpec{Path: path, Key: key, Options: o, Build: func(ctx context.Context) (*endpoint.Aggregate, error) {
			return endpoint.BuildAggregate(ctx, sh, o, path)
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := func(cs *mcp.ClientSession) []string {
		t.Helper()
		n, _ := toolNames(t, ctx, cs)
		return n
	}
	call := func(cs *mcp.ClientSession, tool string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
	}
	downGauge := func(want string) {
		t.Helper()
		line := `mcp_bridge_aggregate_members_down{server="/groups/g/mcp"} ` + want
		if scrape := scrapeMetrics(t, sh); !strings.Contains(scrape, line+"\n") {
			t.Errorf("metrics lack %s:\n%s", line, grepLines(scrape, "members_down"))
		}
	}

	if _, err := s.Apply(ctx, []endpoint.AggregateSpec{spec("", member("x", "", "1"), member("y", "", "1"), member("down", "", "1"))}); err != nil {
		t.Fatal(err)
	}
	cs := connectVersion(t, srv.URL+path, "2025-11-25")
	defer cs.Close()
	if got := names(cs); !slices.Contains(got, "x__test_simple_text") || !slices.Contains(got, "y__test_simple_text") {
		t.Fatalf("tools/list: %v, want x's and y's", got)
	}
	call(cs, "x__test_simple_text")
	downGauge("1")

	ch, err := s.Apply(ctx, []endpoint.AggregateSpec{spec("", member("x", "", "1"), member("z", "", "1"))})
	if err != nil {
		t.Fatal(err)
	}
	// The session opened before goes on, on the aggregate as it is now.
	call(cs, "x__test_simple_text")
	if !slices.Equal(ch.Changed, []string{path}) || !slices.Equal(ch.InPlace, []string{path}) {
		t.Errorf("changes %+v, want %s changed in place", ch, path)
	}
	got := names(cs)
	if slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "y__") }) ||
		!slices.Contains(got, "z__test_image_content") || slices.Contains(got, "z__test_simple_text") {
		t.Errorf("tools/list after the update: %v, want z's tools but the one its policy denies, and none of y's", got)
	}
	downGauge("0")

	// Members that would advertise one name: refused, nothing changes.
	_, err = s.Apply(ctx, []endpoint.AggregateSpec{spec("", member("x", "", "1"), member("z", "", "1"), member("w", "x", "1"))})
	if err == nil || !strings.Contains(err.Error(), `aggregate members "x" and "w" would advertise the same names`) {
		t.Fatalf("a configuration with colliding prefixes: %v, want refused naming x and w", err)
	}
	call(cs, "x__test_simple_text")
	if got2 := names(cs); !slices.Equal(got2, got) {
		t.Errorf("tools/list after a refused configuration: %v, want %v", got2, got)
	}

	// Another separator: every name changes, the aggregate is rebuilt.
	ch, err = s.Apply(ctx, []endpoint.AggregateSpec{spec("-", member("x", "", "1"), member("z", "", "1"))})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Changed, []string{path}) || len(ch.InPlace) != 0 {
		t.Fatalf("changes %+v, want %s rebuilt", ch, path)
	}
}

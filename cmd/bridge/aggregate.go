package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
)

// aggregateSpec is one aggregate of a configuration: its path, its
// servers in order, its separator.
type aggregateSpec struct {
	path    string
	group   string // "" for /mcp
	servers []*configfile.Server
	sep     string
	bounds  endpoint.AggregateBounds
}

// aggregates are the aggregates of f: /mcp (unless --no-aggregate) with
// every server, and each group.
func (c *config) aggregates(f *configfile.File) []aggregateSpec {
	var out []aggregateSpec
	if !c.NoAggregate {
		out = append(out, aggregateSpec{path: bridge.DefaultPath, servers: f.Servers, sep: c.AggregateSeparator, bounds: f.Bounds})
	}
	for _, g := range f.Groups {
		sp := aggregateSpec{path: endpoint.GroupPath(g.Name), group: g.Name, sep: cmpOr(g.Separator, c.AggregateSeparator), bounds: g.Bounds}
		for _, name := range g.Servers {
			i := slices.IndexFunc(f.Servers, func(s *configfile.Server) bool { return s.Name == name })
			sp.servers = append(sp.servers, f.Servers[i])
		}
		out = append(out, sp)
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// check refuses an aggregate whose members would advertise one name,
// naming the server added last of the two (whose prefix is the fix), or
// the group.
func (sp *aggregateSpec) check(path string) error {
	var members []endpoint.AggregateMember
	for _, s := range sp.servers {
		members = append(members, endpoint.AggregateMember{Server: &endpoint.ServerOptions{Name: s.Name}, Prefix: s.Prefix})
		err := endpoint.CheckAggregate(&endpoint.AggregateOptions{Members: members, Separator: sp.sep})
		if err == nil {
			continue
		}
		if sp.group != "" {
			key := "servers"
			if strings.Contains(err.Error(), "separator") && !strings.Contains(err.Error(), "advertise") {
				key = "separator"
			}
			return configfile.GroupErrorf(path, sp.group, key, "%v", err)
		}
		if strings.Contains(err.Error(), "aggregate: separator") {
			return configfile.Errorf(path, "", "bridge", "aggregate-separator: %v", err)
		}
		return configfile.Errorf(path, s.Name, "prefix", "in the aggregate at /mcp: %v", err)
	}
	return nil
}

// checkAggregates checks every aggregate of the file.
func (c *config) checkAggregates(f *configfile.File) error {
	for _, sp := range c.aggregates(f) {
		if err := sp.check(f.Path); err != nil {
			return err
		}
	}
	return nil
}

// aggregateSpecs are the aggregates of f as endpoint.Aggregates applies
// them: their members' configurations checked. A member's key is its
// server's (its entry, the contents of its guard files), so that a reload
// that changes some members of an aggregate updates it in place: the
// others keep their children and the sessions go on.
func (m *multi) aggregateSpecs(f *configfile.File) ([]endpoint.AggregateSpec, error) {
	if err := m.cfg.checkAggregates(f); err != nil {
		return nil, err
	}
	var out []endpoint.AggregateSpec
	for _, sp := range m.cfg.aggregates(f) {
		var key strings.Builder
		fmt.Fprintf(&key, "%s\x00%+v\x00", sp.sep, sp.bounds)
		var members []endpoint.AggregateMember
		for _, s := range sp.servers {
			sc, err := serverConfig(m.cfg, f.Path, s)
			if err != nil {
				return nil, err
			}
			o := endpointOptions(sc)
			mkey := s.Canon + "\x00" + sc.guardFiles
			members = append(members, endpoint.AggregateMember{Server: o, Prefix: s.Prefix, Key: mkey})
			fmt.Fprintf(&key, "%s\x00%s\x00", s.Name, mkey)
		}
		front := endpointOptions(m.cfg)
		front.Name = sp.path
		o := &endpoint.AggregateOptions{Front: front, Members: members, Separator: sp.sep, Bounds: sp.bounds}
		out = append(out, endpoint.AggregateSpec{
			Path:    sp.path,
			Key:     key.String(),
			Options: o,
			Build: func(ctx context.Context) (*endpoint.Aggregate, error) {
				a, err := endpoint.BuildAggregate(ctx, m.shared, o, sp.path)
				return a, explain(err)
			},
		})
	}
	return out, nil
}

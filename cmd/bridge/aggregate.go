package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-bridge/mcp-bridge/endpoint"
	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
)

// checkAggregates checks every aggregate of the file.
func (c *config) checkAggregates(f *configfile.File) error {
	for _, a := range f.Aggregates(c.AggregateSeparator, c.NoAggregate) {
		if err := a.Check(f.Path); err != nil {
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
	for _, sp := range f.Aggregates(m.cfg.AggregateSeparator, m.cfg.NoAggregate) {
		var key strings.Builder
		fmt.Fprintf(&key, "%s\x00%+v\x00", sp.Separator, sp.Bounds)
		var members []endpoint.AggregateMember
		for _, s := range sp.Servers {
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
		front.Name = sp.Path
		o := &endpoint.AggregateOptions{Front: front, Members: members, Separator: sp.Separator, Bounds: sp.Bounds}
		out = append(out, endpoint.AggregateSpec{
			Path:    sp.Path,
			Key:     key.String(),
			Options: o,
			Build: func(ctx context.Context) (*endpoint.Aggregate, error) {
				a, err := endpoint.BuildAggregate(ctx, m.shared, o, sp.Path)
				return a, explain(err)
			},
		})
	}
	return out, nil
}

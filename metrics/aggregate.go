package metrics

import "github.com/prometheus/client_golang/prometheus"

// An Aggregate is what WatchAggregate reads (aggregate.Aggregate).
type Aggregate interface {
	// Down names the members that are down now.
	Down() map[string]error
	// Children is the number of member children its sessions run now.
	Children() int
}

// WatchAggregate exports an aggregate endpoint's members, read at scrape
// time under the aggregate's server label (its path):
// mcp_bridge_aggregate_members_down (members whose catalog child failed:
// their tools are out of the lists and their calls fail until it comes
// back) and mcp_bridge_aggregate_member_children (the member children its
// sessions run now; the catalog's one per member not counted).
func (s *Server) WatchAggregate(a Aggregate) error {
	l := prometheus.Labels{"server": s.name}
	down := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "aggregate_members_down", ConstLabels: l,
		Help: "Members of an aggregate that are down now (their tools are out of its lists, their calls fail, they are retried with backoff)."},
		func() float64 { return float64(len(a.Down())) })
	children := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "aggregate_member_children", ConstLabels: l,
		Help: "Member servers the sessions of an aggregate run now (started when a session first needs that member)."},
		func() float64 { return float64(a.Children()) })
	return s.register(map[string]prometheus.Collector{"aggregate_members_down": down, "aggregate_member_children": children})
}

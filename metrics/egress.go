package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// egressVecs are the egress proxy's counters, registered with
// the first server that counts one: a bridge without allow-lists exports
// none.
type egressVecs struct {
	once        sync.Once
	connections *prometheus.CounterVec
	bytes       *prometheus.CounterVec
}

var egressByMetrics sync.Map // *Metrics -> *egressVecs

func (m *Metrics) egress() *egressVecs {
	v, _ := egressByMetrics.LoadOrStore(m, &egressVecs{})
	e := v.(*egressVecs)
	e.once.Do(func() {
		e.connections = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "egress_connections_total",
			Help: "Connections of sandboxed servers through the egress proxy, by outcome: allowed, refused."}, []string{"server", "outcome"})
		e.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "egress_bytes_total",
			Help: "Bytes through the egress proxy's allowed connections, by direction: up (server to host), down (host to server)."}, []string{"server", "direction"})
		m.reg.MustRegister(e.connections, e.bytes)
	})
	return e
}

// Egress counts one decision of the egress proxy: a connection allowed
// (with its bytes each way) or refused.
func (s *Server) Egress(allowed bool, up, down int64) {
	e := s.m.egress()
	outcome := "refused"
	if allowed {
		outcome = "allowed"
		e.bytes.WithLabelValues(s.name, "up").Add(float64(up))
		e.bytes.WithLabelValues(s.name, "down").Add(float64(down))
	}
	e.connections.WithLabelValues(s.name, outcome).Inc()
}

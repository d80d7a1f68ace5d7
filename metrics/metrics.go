// Package metrics exposes the bridge's Prometheus metrics: sessions,
// children, requests, bytes, the event log, the warm pool, the 2026-07-28
// pool, and the denials of the policy and pinning.
//
// It observes the other packages through their small hooks, so that none
// of them imports Prometheus: a peer.Interceptor for the messages
// (Server.Intercept), a session.Observer for the sessions and their event
// logs, a wrapping sandbox.Launcher for the children, and scrape-time reads
// of sandbox.Spares.Stats, pool.Pool.Stats and session.Registry.LogStats.
//
// Label values are bounded: method comes from the fixed set of MCP methods
// (anything else is "other"), outcome and reason from fixed sets, server
// from the operator's configuration. No label ever holds a session ID, a
// request id or a tool name: a client may call any tool name it likes, so
// tool names would let it grow the series without bound (traces carry
// them instead, see package tracing).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-bridge/mcp-bridge/audit"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Namespace prefixes every metric's name.
const Namespace = "mcp_bridge"

// DefaultServer is the server label of the one-command form (bridge --
// COMMAND), which serves one server at /mcp.
const DefaultServer = "default"

// MaxPending bounds the client requests whose end the interceptor of one
// Server waits for (to count and time them). Beyond it, new requests are
// not counted: memory stays bounded whatever a front end forgets to end.
const MaxPending = 100_000

// Outcomes of a request (the outcome label).
const (
	OutcomeOK        = "ok"        // the server answered with a result
	OutcomeError     = "error"     // the server answered with a JSON-RPC error
	OutcomeRefused   = "refused"   // the interception point refused it (policy, pinning)
	OutcomeCancelled = "cancelled" // cancelled by the client, or by the bridge on --request-timeout
	OutcomeAborted   = "aborted"   // its session ended before an answer
)

// methodLabels are the label values of method: the MCP requests a client
// sends, then "other" for anything else.
var methodLabels = [...]string{
	"initialize", "ping",
	"tools/list", "tools/call",
	"resources/list", "resources/templates/list", "resources/read",
	"resources/subscribe", "resources/unsubscribe",
	"prompts/list", "prompts/get",
	"completion/complete", "logging/setLevel",
	"tasks/get", "tasks/list", "tasks/result", "tasks/cancel",
	"server/discover", "subscriptions/listen",
	"other",
}

// methodIndexes numbers the MCP methods by their place in methodLabels:
// a request's instruments are found by number (see instruments).
var methodIndexes = func() map[string]int {
	m := make(map[string]int, len(methodLabels)-1)
	for i, l := range methodLabels[:len(methodLabels)-1] {
		m[l] = i
	}
	return m
}()

// methodIndex is the place of a request's method label in methodLabels.
func methodIndex(method string) int {
	if i, ok := methodIndexes[method]; ok {
		return i
	}
	return len(methodLabels) - 1 // "other"
}

// MethodLabel is the method label of a request's method: itself if it is
// an MCP method, else "other".
func MethodLabel(method string) string { return methodLabels[methodIndex(method)] }

// Reasons a session ends (the reason label), from session's sentinel errors.
var reasons = []struct {
	err   error
	label string
}{
	{session.ErrDeleted, "deleted"},
	{session.ErrIdle, "idle"},
	{session.ErrInitTimeout, "init_timeout"},
	{session.ErrServerExited, "server_exited"},
	{session.ErrStdoutClosed, "stdout_closed"},
	{session.ErrOversizedMessage, "oversized_message"},
	{session.ErrShutdown, "shutdown"},
	{session.ErrRetired, "retired"},
	{session.ErrLogBudget, "log_budget"},
}

// ReasonLabel is the reason label of a session's end.
func ReasonLabel(reason error) string {
	for _, r := range reasons {
		if errors.Is(reason, r.err) {
			return r.label
		}
	}
	return "other"
}

// Buckets of the histograms, in seconds. Requests span a ping (under a
// millisecond) to a tool call of minutes; a container starts in a second
// or two, an image pull in a minute.
var (
	RequestBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	StartBuckets   = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// Metrics holds the bridge's collectors in a registry of its own (with
// the Go runtime and process collectors): Handler serves it. Per-server
// views (Server) share its collectors, telling servers apart by the server
// label.
type Metrics struct {
	reg *prometheus.Registry

	sessionsActive  *prometheus.GaugeVec
	sessionsCreated *prometheus.CounterVec
	sessionsEnded   *prometheus.CounterVec
	childStarted    *prometheus.CounterVec
	childFailed     *prometheus.CounterVec
	childOOM        *prometheus.CounterVec
	childStart      *prometheus.HistogramVec
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	bytes           *prometheus.CounterVec
	evictions       *prometheus.CounterVec
	evictedBytes    *prometheus.CounterVec
	resumes         *prometheus.CounterVec
	denials         *prometheus.CounterVec
	pins            *prometheus.CounterVec

	mu      sync.Mutex
	servers map[string]*Server
}

// New returns the bridge's metrics, registered and empty.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), servers: make(map[string]*Server)}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, append([]string{"server"}, labels...))
	}
	m.sessionsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "sessions_active",
		Help: "Sessions alive now."}, []string{"server"})
	m.sessionsCreated = counter("sessions_created_total", "Sessions started (their server launched).")
	m.sessionsEnded = counter("sessions_ended_total", "Sessions ended, by reason.", "reason")
	m.childStarted = counter("children_started_total", "MCP server processes or containers started, warm spares included.", "sandbox")
	m.childFailed = counter("children_failed_total", "MCP servers that could not be started.", "sandbox")
	m.childOOM = counter("children_oom_total", "MCP servers killed for exceeding their memory limit.", "sandbox")
	m.childStart = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "child_start_seconds",
		Help: "Time to start an MCP server (a process, or a container with its image check), successful starts only.", Buckets: StartBuckets},
		[]string{"server", "sandbox"})
	m.requests = counter("requests_total", "Client requests, by method and outcome.", "method", "outcome")
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "request_duration_seconds",
		Help: "Time from a client request reaching the interception point to its end (answer, refusal, cancellation or its session's end).", Buckets: RequestBuckets},
		[]string{"server", "method"})
	m.bytes = counter("message_bytes_total", "Bytes of JSON-RPC messages through the interception point, by direction (to_server, from_server).", "direction")
	m.evictions = counter("event_log_evictions_total", "Events evicted from sessions' event logs to stay within --log-max-events and --log-max-bytes.")
	m.evictedBytes = counter("event_log_evicted_bytes_total", "Bytes of the events evicted from sessions' event logs.")
	m.resumes = counter("event_log_resumes_total", "Requests to resume a stream (GET with Last-Event-ID), by outcome: resumed, gone (evicted: HTTP 410), unknown (HTTP 400).", "outcome")
	m.denials = counter("policy_denials_total", "Requests refused by the tool policy.")
	m.pins = counter("pin_violations_total", "Tool definitions that differed from their pinned ones.")
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.sessionsActive, m.sessionsCreated, m.sessionsEnded,
		m.childStarted, m.childFailed, m.childOOM, m.childStart,
		m.requests, m.duration, m.bytes,
		m.evictions, m.evictedBytes, m.resumes,
		m.denials, m.pins,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "audit_records_lost_total",
			Help: "Audit log records that could not be written (a failed write, or a blocked writer whose queue was full), all audit logs of the process together."},
			func() float64 { return float64(audit.LostRecords()) }),
	)
	return m
}

// Handler serves the metrics in the Prometheus text format (or OpenMetrics
// and protobuf, as the scraper negotiates).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the registry the metrics live in, for collectors of other
// packages.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Server returns the view of the server with this name (the config file's
// server name, or DefaultServer), which labels everything it counts with
// it. Asking twice for a name returns the same view.
func (m *Metrics) Server(name string) *Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.servers[name]; s != nil {
		return s
	}
	l := prometheus.Labels{"server": name}
	s := &Server{
		m:               m,
		name:            name,
		sessionsActive:  m.sessionsActive.With(l),
		sessionsCreated: m.sessionsCreated.With(l),
		sessionsEnded:   m.sessionsEnded.MustCurryWith(l),
		requests:        m.requests.MustCurryWith(l),
		duration:        m.duration.MustCurryWith(l),
		toServer:        m.bytes.With(prometheus.Labels{"server": name, "direction": "to_server"}),
		fromServer:      m.bytes.With(prometheus.Labels{"server": name, "direction": "from_server"}),
		evictions:       m.evictions.With(l),
		evictedBytes:    m.evictedBytes.With(l),
		resumes:         m.resumes.MustCurryWith(l),
		denials:         m.denials.With(l),
		pins:            m.pins.With(l),
		pending:         make(map[requestKey]pending),
		watched:         make(map[string]prometheus.Collector),
	}
	m.servers[name] = s
	return s
}

// Drop removes the gauges of a server that is no longer served (a
// reloaded configuration removed it, and it has drained): its sessions
// active, its event logs' figures and its warm pool's counters, which
// would otherwise show a server that is gone. Its counters stay, like
// those of any series that stopped growing: a rate over a window that saw
// the server go stays right. The view is forgotten: Server(name) then
// returns a new one, whose counters continue the old ones.
func (s *Server) Drop() {
	s.m.mu.Lock()
	if s.m.servers[s.name] == s {
		delete(s.m.servers, s.name)
	}
	s.m.mu.Unlock()
	s.mu.Lock()
	cs := s.watched
	s.watched = make(map[string]prometheus.Collector)
	s.mu.Unlock()
	for _, c := range cs {
		s.m.reg.Unregister(c)
	}
	s.m.sessionsActive.Delete(prometheus.Labels{"server": s.name})
}

// Server counts what happens to one configured server: its sessions,
// children and requests. Its methods are safe for concurrent use.
type Server struct {
	m    *Metrics
	name string

	sessionsActive  prometheus.Gauge
	sessionsCreated prometheus.Counter
	sessionsEnded   *prometheus.CounterVec
	requests        *prometheus.CounterVec
	duration        prometheus.ObserverVec
	toServer        prometheus.Counter
	fromServer      prometheus.Counter
	evictions       prometheus.Counter
	evictedBytes    prometheus.Counter
	resumes         *prometheus.CounterVec
	denials         prometheus.Counter
	pins            prometheus.Counter

	// pending holds the client requests waiting for their end, by Origin
	// and id as the client wrote it: the interceptor times them.
	mu      sync.Mutex
	pending map[requestKey]pending

	// instrs are the request instruments of each method label, by
	// methodIndex, made on first use (see instruments).
	instrs [len(methodLabels)]atomic.Pointer[instruments]
	// watched are the collectors read at scrape time (WatchSpares,
	// WatchRegistry), by metric name, for Drop.
	watched map[string]prometheus.Collector
}

// requestKey is a client's request: its Origin (comparable, as peer
// requires) and its id as the client wrote it.
type requestKey struct {
	origin any
	id     jsonrpc.ID
}

type pending struct {
	inst  *instruments  // of the method label
	start time.Duration // clock()
}

var _ session.Observer = (*Server)(nil)

// Name is the server label.
func (s *Server) Name() string { return s.name }

// PolicyDenied counts a request refused by the tool policy. It is the
// exported counter of the policy (mcp_bridge_policy_denials_total): the
// policy package takes it through an interface of its own, such as
// interface{ PolicyDenied(); PinViolation() }, and never imports
// Prometheus.
func (s *Server) PolicyDenied() { s.denials.Inc() }

// PinViolation counts a tool definition that differed from its pinned one
// (mcp_bridge_pin_violations_total).
func (s *Server) PinViolation() { s.pins.Inc() }

// SessionStarted is the Server as a session.Observer.
func (s *Server) SessionStarted(*session.Session) {
	s.sessionsCreated.Inc()
	s.sessionsActive.Inc()
}

// SessionEnded is the Server as a session.Observer: the session's
// requests still in flight end as aborted.
func (s *Server) SessionEnded(sess *session.Session, reason error) {
	s.sessionsActive.Dec()
	s.sessionsEnded.WithLabelValues(ReasonLabel(reason)).Inc()
	s.Forget(sess)
}

// EventEvicted is the Server as a session.Observer.
func (s *Server) EventEvicted(bytes int) {
	s.evictions.Inc()
	s.evictedBytes.Add(float64(bytes))
}

// Resumed is the Server as a session.Observer.
func (s *Server) Resumed(err error) {
	outcome := "resumed"
	switch {
	case errors.Is(err, session.ErrEventsPurged):
		outcome = "gone"
	case errors.Is(err, session.ErrStreamFinished):
		outcome = "finished"
	case err != nil:
		outcome = "unknown"
	}
	s.resumes.WithLabelValues(outcome).Inc()
}

// Forget ends, as aborted, the requests of this Origin still waiting for
// an answer: a front end calls it when a client goes away without its
// answers (a session does, through SessionEnded).
func (s *Server) Forget(origin any) {
	var ended []pending
	s.mu.Lock()
	// A walk of the requests in flight (at most MaxPending), once per
	// session: cheaper than a map per client, made and dropped with every
	// request of a client that has one in flight at a time.
	for k, p := range s.pending {
		if k.origin == origin {
			ended = append(ended, p)
			delete(s.pending, k)
		}
	}
	s.mu.Unlock()
	now := clock()
	for _, p := range ended {
		s.end(p, OutcomeAborted, now)
	}
}

// Intercept is the Server's peer.Interceptor: it counts the bytes of
// every message and times every client request, from the moment it
// reaches the interception point to its answer. Put it first in the chain
// (peer.Chain), so that it sees the refusals of the interceptors after it.
//
// A request that passed the chain but could not be written (the server's
// stdin full: the client gets 503 and may send it again under the same id)
// stays pending: sent again, it is counted once; never sent again, it ends
// as aborted with its session.
func (s *Server) Intercept(next peer.Handler) peer.Handler {
	return func(m *peer.Message) error {
		if m.Own {
			return next(m) // the bridge's own requests (initialize of a pool, ping)
		}
		if m.Dir == peer.FromChild {
			s.fromServer.Add(float64(len(m.Data)))
			if m.Env.Kind == jsonrpc.KindResponse && m.Origin != nil {
				outcome := OutcomeOK
				switch {
				case m.Abandoned: // its server ended before answering
					outcome = OutcomeAborted
				case m.Env.IsError:
					outcome = OutcomeError
				}
				s.finish(m.Origin, m.Env.ID, outcome)
			}
			return next(m)
		}
		s.toServer.Add(float64(len(m.Data)))
		switch {
		case m.Env.Kind == jsonrpc.KindRequest:
			s.begin(m.Origin, m.Env.ID, m.Method)
			err := next(m)
			if err != nil {
				s.finish(m.Origin, m.Env.ID, OutcomeRefused)
			}
			return err
		case m.Env.Method == "notifications/cancelled" && m.Env.RequestID != "":
			s.finish(m.Origin, m.Env.RequestID, OutcomeCancelled)
		}
		return next(m)
	}
}

func (s *Server) begin(origin any, id jsonrpc.ID, method string) {
	p := pending{inst: s.instruments(methodIndex(method)), start: clock()}
	k := requestKey{origin, id}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= MaxPending {
		if _, again := s.pending[k]; !again {
			return
		}
	}
	s.pending[k] = p
}

func (s *Server) finish(origin any, id jsonrpc.ID, outcome string) {
	k := requestKey{origin, id}
	s.mu.Lock()
	p, ok := s.pending[k]
	if ok {
		delete(s.pending, k)
	}
	s.mu.Unlock()
	if ok {
		s.end(p, outcome, clock())
	}
}

// clockBase is where clock counts from.
var clockBase = time.Now()

// clock is the time requests are timed with: the time since clockBase,
// read from the monotonic clock alone (time.Since of a time with a
// monotonic reading reads nothing else; in a synctest bubble it reads the
// bubble's clock, consistently). time.Now reads the wall clock as well,
// which no duration needs: its two calls per request were a third of the
// interceptor's time in BenchmarkIntercept.
func clock() time.Duration { return time.Since(clockBase) }

func (s *Server) end(p pending, outcome string, now time.Duration) {
	p.inst.count(s, outcome).Inc()
	p.inst.duration.Observe((now - p.start).Seconds())
}

// instruments are the request counter (by outcome) and the duration
// histogram of one method label. They are looked up in the vectors once
// and kept: WithLabelValues hashes its labels and allocates on every call,
// which the profile of a short call showed on every request. A request
// finds its method's instruments once, as it begins, and keeps them to
// its end, which then looks nothing up (it looked the pair of labels up
// in two maps under a read lock, on every answer). Both label sets are
// bounded (MethodLabel, the Outcome constants).
type instruments struct {
	method   string
	duration prometheus.Observer
	// counts are the counters of outcomes, by outcomeIndex, made on first
	// use so that no outcome shows before it happened.
	counts [len(outcomes)]atomic.Pointer[prometheus.Counter]
}

// outcomes are the values of the outcome label.
var outcomes = [...]string{OutcomeOK, OutcomeError, OutcomeRefused, OutcomeCancelled, OutcomeAborted}

func outcomeIndex(outcome string) int {
	for i, o := range outcomes {
		if o == outcome {
			return i
		}
	}
	panic("metrics: unknown outcome " + outcome)
}

// instruments returns the instruments of the method label at index i of
// methodLabels.
func (s *Server) instruments(i int) *instruments {
	slot := &s.instrs[i]
	if in := slot.Load(); in != nil {
		return in
	}
	method := methodLabels[i]
	in := &instruments{method: method, duration: s.duration.WithLabelValues(method)}
	if slot.CompareAndSwap(nil, in) {
		return in
	}
	return slot.Load() // a racing caller made them first; the vector gave both the same histogram
}

// count is the counter of an outcome of the method.
func (in *instruments) count(s *Server, outcome string) prometheus.Counter {
	slot := &in.counts[outcomeIndex(outcome)]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := s.requests.WithLabelValues(in.method, outcome) // the vector returns the same counter to a racing caller
	slot.Store(&c)
	return c
}

// WatchSpares exports the warm pool's hits and misses
// (mcp_bridge_warm_pool_hits_total, _misses_total), read at scrape time.
func (s *Server) WatchSpares(p *sandbox.Spares) error {
	l := prometheus.Labels{"server": s.name}
	hits := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "warm_pool_hits_total", ConstLabels: l,
		Help: "Sessions given a server started ahead (--warm)."}, func() float64 { h, _ := p.Stats(); return float64(h) })
	misses := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "warm_pool_misses_total", ConstLabels: l,
		Help: "Sessions that found the warm pool empty and waited for their server to start."}, func() float64 { _, m := p.Stats(); return float64(m) })
	return s.register(map[string]prometheus.Collector{"warm_pool_hits_total": hits, "warm_pool_misses_total": misses})
}

// WatchRegistry exports what the sessions' event logs hold
// (mcp_bridge_event_log_bytes, _events), read at scrape time.
func (s *Server) WatchRegistry(r *session.Registry) error {
	l := prometheus.Labels{"server": s.name}
	bytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "event_log_bytes", ConstLabels: l,
		Help: "Bytes of event data held in the sessions' event logs for resumption."}, func() float64 { _, b := r.LogStats(); return float64(b) })
	events := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "event_log_events", ConstLabels: l,
		Help: "Events held in the sessions' event logs for resumption."}, func() float64 { e, _ := r.LogStats(); return float64(e) })
	return s.register(map[string]prometheus.Collector{"event_log_bytes": bytes, "event_log_events": events})
}

// WatchStatelessPool exports the server's revision 2026-07-28 pool, read
// at scrape time from its Stats: its churn
// (mcp_bridge_pool_children_started_total, and _evicted_total: idle
// children stopped to make room for another principal's or capabilities'
// request) and its load now (mcp_bridge_pool_children: its size;
// _requests_waiting: requests waiting for a child, the pool being at
// --pool-max or its children busy; _calls_parked: calls whose child asked
// the client a question and that wait for the client's retry;
// _calls_in_flight: calls on its children, the parked ones included).
func (s *Server) WatchStatelessPool(p *pool.Pool) error {
	l := prometheus.Labels{"server": s.name}
	counter := func(name, help string, v func(pool.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: name, ConstLabels: l, Help: help},
			func() float64 { return float64(v(p.Stats())) })
	}
	gauge := func(name, help string, v func(pool.Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: name, ConstLabels: l, Help: help},
			func() float64 { return float64(v(p.Stats())) })
	}
	return s.register(map[string]prometheus.Collector{
		"pool_children_started_total": counter("pool_children_started_total",
			"MCP servers started by the pool serving revision 2026-07-28 clients.",
			func(st pool.Stats) int64 { return st.Started }),
		"pool_children_evicted_total": counter("pool_children_evicted_total",
			"Idle MCP servers of the 2026-07-28 pool stopped to make room for a request of another principal or other capabilities (churn: raise --pool-max).",
			func(st pool.Stats) int64 { return st.Evicted }),
		"pool_children": gauge("pool_children",
			"MCP servers of the 2026-07-28 pool running now (those starting excluded).",
			func(st pool.Stats) int { return st.Children }),
		"pool_requests_waiting": gauge("pool_requests_waiting",
			"Requests of 2026-07-28 clients waiting for a child of the pool (at --pool-max, or every child busy).",
			func(st pool.Stats) int { return st.Waiting }),
		"pool_calls_parked": gauge("pool_calls_parked",
			"Calls of 2026-07-28 clients parked on their child while the client answers its question (multi round-trip).",
			func(st pool.Stats) int { return st.Parked }),
		"pool_calls_in_flight": gauge("pool_calls_in_flight",
			"Calls of 2026-07-28 clients on the pool's children, parked calls included.",
			func(st pool.Stats) int { return st.InFlight }),
	})
}

// register adds collectors read at scrape time. One of the same name and
// server replaces the one before: a reloaded configuration gives a server a
// new pool or registry, whose figures are then the ones shown.
func (s *Server) register(cs map[string]prometheus.Collector) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, c := range cs {
		err := s.m.reg.Register(c)
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			s.m.reg.Unregister(dup.ExistingCollector)
			err = s.m.reg.Register(c)
		}
		if err != nil {
			return fmt.Errorf("metrics of server %q: %w", s.name, err)
		}
		s.watched[name] = c
	}
	return nil
}

// Launcher wraps a launcher to count the children it starts
// (mcp_bridge_children_started_total), those it fails to start
// (_children_failed_total) and those killed for their memory
// (_children_oom_total), and to time starts (mcp_bridge_child_start_seconds).
// kind is the sandbox label: "local" or "docker". Wrap the launcher inside
// a warm pool, so that spares count as they start.
func (s *Server) Launcher(l sandbox.Launcher, kind string) sandbox.Launcher {
	lv := prometheus.Labels{"server": s.name, "sandbox": kind}
	return &launcher{
		inner:   l,
		started: s.m.childStarted.With(lv),
		failed:  s.m.childFailed.With(lv),
		oom:     s.m.childOOM.With(lv),
		start:   s.m.childStart.With(lv),
	}
}

type launcher struct {
	inner                sandbox.Launcher
	started, failed, oom prometheus.Counter
	start                prometheus.Observer
}

func (l *launcher) Launch(ctx context.Context, sessionID string) (sandbox.Process, error) {
	t := time.Now()
	p, err := l.inner.Launch(ctx, sessionID)
	if err != nil {
		l.failed.Inc()
		return nil, err
	}
	l.start.Observe(time.Since(t).Seconds())
	l.started.Inc()
	return &process{Process: p, oom: l.oom}, nil
}

// process counts its child's death by out of memory, once.
type process struct {
	sandbox.Process
	oom  prometheus.Counter
	once sync.Once
}

func (p *process) Wait() error {
	err := p.Process.Wait()
	var exit *sandbox.ExitError
	if errors.As(err, &exit) && exit.OOMKilled {
		p.once.Do(p.oom.Inc)
	}
	return err
}

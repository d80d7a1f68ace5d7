package endpoint

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// AggregateBounds are an aggregate's bounds on the member children it
// runs and its failure mode: aggregate.Options' fields of the same
// meaning. The zero value is the aggregate package's defaults.
type AggregateBounds struct {
	// MaxChildren bounds the member children of the aggregate across its
	// sessions (aggregate.Options.MaxChildrenTotal). Zero means
	// aggregate.DefaultMaxChildrenTotal; negative means none.
	MaxChildren int
	// MaxChildrenPerSession bounds the member children one session (one
	// virtual child) runs at once (aggregate.Options.MaxChildren). Zero
	// means the number of members.
	MaxChildrenPerSession int
	// IdleTimeout stops a session's member child unused this long. Zero
	// means aggregate.DefaultIdleTimeout; negative means never.
	IdleTimeout time.Duration
	// FailClosed refuses lists and calls while any member is down, rather
	// than serving the others.
	FailClosed bool
}

// A Config is a whole configuration: its servers, each served alone at
// bridge.ServerPath(name), and its aggregates (/mcp, GroupPath(name)).
type Config struct {
	Servers    []Member
	Aggregates []AggregateSpec
}

// A Configuration serves a Config: its servers through a Set, its
// aggregates through Aggregates, and routes each request to the one
// whose path it names. Apply makes a new Config the one served, as a
// reload does (add, keep, replace, drain within the grace); Drain,
// WaitIdle, Len and Close span servers and aggregates alike, so one
// shutdown order covers both.
type Configuration struct {
	servers *Set
	aggs    *Aggregates
}

// NewConfiguration returns an empty configuration. o configures its set
// of servers (its Edge runs the checks of a path no server serves); the
// aggregates take its Grace, StopBudget and Logger.
func NewConfiguration(o *SetOptions) *Configuration {
	return &Configuration{
		servers: NewSet(o),
		aggs:    NewAggregates(&SetOptions{Grace: o.Grace, StopBudget: o.StopBudget, Logger: o.Logger}),
	}
}

// Apply makes c the configuration served: the aggregates first (their
// build can fail, and then nothing changed), then the servers. It returns
// what changed of each. Once closed, it returns an error wrapping
// ErrClosed.
func (s *Configuration) Apply(ctx context.Context, c Config) (servers, aggregates Changes, err error) {
	if aggregates, err = s.aggs.Apply(ctx, c.Aggregates); err != nil {
		return Changes{}, Changes{}, err
	}
	servers, err = s.servers.Apply(ctx, c.Servers)
	return servers, aggregates, err
}

// ServeHTTP serves the aggregates' paths (/mcp, /sse, /message,
// /groups/NAME/...), and the servers' (the set's, whose edge answers
// what no one serves).
func (s *Configuration) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if Serves(r.URL.Path) {
		if h := s.aggs.Handler(r); h != nil {
			h.ServeHTTP(w, r)
			return
		}
	}
	s.servers.ServeHTTP(w, r)
}

// Names are the names of the servers served.
func (s *Configuration) Names() []string { return s.servers.Names() }

// Drain refuses new sessions everywhere and fails /readyz, at shutdown.
func (s *Configuration) Drain() {
	s.aggs.Drain()
	s.servers.Drain()
}

// WaitIdle waits until no server and no aggregate has a request or
// stateless call in flight, or ctx ends.
func (s *Configuration) WaitIdle(ctx context.Context) error {
	return errors.Join(s.aggs.WaitIdle(ctx), s.servers.WaitIdle(ctx))
}

// Len counts the sessions of the servers and of the aggregates.
func (s *Configuration) Len() int { return s.aggs.Len() + s.servers.Len() }

// Close closes the aggregates, then the servers (members of an
// aggregate run their own children: none is shared with a server).
func (s *Configuration) Close(ctx context.Context) error {
	return errors.Join(s.aggs.Close(ctx), s.servers.Close(ctx))
}

package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// A Member is one server of a configuration, as Set.Apply takes it.
type Member struct {
	// Name is the server's name: it is served at bridge.ServerPath(Name).
	Name string
	// Key is what its configuration is: a member whose Key differs from
	// the running server's is replaced; one whose Key is the same keeps
	// its sessions.
	Key string
	// Build builds its endpoint; Apply calls it only for a member it adds
	// or replaces.
	Build func(ctx context.Context) (*Endpoint, error)
}

// SetOptions configure a Set.
type SetOptions struct {
	// One makes a set of one (the one-command form): its one member is
	// served at its handler's own path (bridge.Options.Path, /mcp by
	// default), which answers every request; Edge is not used.
	One bool
	// Edge are the options of the handler that runs the checks before
	// answers of the set's own (unknown server, /readyz, /metrics).
	Edge *bridge.Options
	// Grace bounds the drain of a retired server: its requests and
	// stateless calls in flight get that long to finish before its
	// sessions end (--shutdown-grace).
	Grace time.Duration
	// StopBudget bounds the stop of a drained server's MCP servers.
	StopBudget time.Duration
	// Forget is called once a server that left the configuration has
	// drained, unless a server of the same name was added since (its
	// gauges go). Nil: nothing.
	Forget func(name string)
	// Logger receives the drains' logs. Nil means slog.Default().
	Logger *slog.Logger
}

// A Set serves the servers of a configuration, each at
// bridge.ServerPath(name), and applies a new configuration as a reload
// does: servers it adds start, servers it removes drain (new requests in
// their sessions get 503, new sessions 404, new stateless calls 503 with
// Retry-After; what is in flight finishes within the grace, then they
// close), servers whose Key changed are replaced (the old one drains, new
// sessions go to the new one), and the others keep their sessions.
// WaitIdle, Len and Close span every server.
type Set struct {
	lifecycle[*Endpoint]
	servers *bridge.Servers
	one     atomic.Pointer[Endpoint] // with One
}

// NewSet returns an empty set.
func NewSet(o *SetOptions) *Set {
	s := &Set{}
	if !o.One {
		s.servers = bridge.NewServers(o.Edge)
	}
	s.lifecycle = newLifecycle(o, placement[*Endpoint]{
		kind: "server", attr: "server_name",
		install: func(name string, e *Endpoint) {
			if o.One {
				s.one.Store(e)
				return
			}
			s.servers.Set(name, e.Handler())
		},
		drained: func(name string, e *Endpoint, gone bool) {
			if s.servers != nil {
				s.servers.Remove(name, e.Handler())
			}
			if gone && o.Forget != nil {
				// Removed, not replaced, and not added again since.
				o.Forget(name)
			}
		},
		buildError: func(name string, err error) error {
			if o.One {
				return err
			}
			return fmt.Errorf("server %q: %w", name, err)
		},
	})
	return s
}

// Changes are what Apply did, by server name.
type Changes struct {
	Added, Changed, Unchanged, Removed []string
	// InPlace are those of Changed updated in place (an aggregate whose
	// members alone changed: its sessions go on), not replaced.
	InPlace []string
}

// ErrClosed: Apply after Close.
var ErrClosed = errors.New("the set of servers is closed")

// Apply makes members the set's configuration. It builds the endpoints of
// the members added or changed first: if one fails, those built are
// closed and nothing changes.
func (s *Set) Apply(ctx context.Context, members []Member) (Changes, error) {
	if s.opts.One && len(members) != 1 {
		return Changes{}, fmt.Errorf("a set of one applies one server, not %d", len(members))
	}
	entries := make([]entry[*Endpoint], len(members))
	for i, m := range members {
		entries[i] = entry[*Endpoint]{name: m.Name, key: m.Key, build: m.Build}
	}
	return s.apply(ctx, entries)
}

func (s *Set) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.One {
		if e := s.one.Load(); e != nil {
			e.Handler().ServeHTTP(w, r)
			return
		}
		http.Error(w, "Service Unavailable: the MCP server is not configured yet", http.StatusServiceUnavailable)
		return
	}
	s.servers.ServeHTTP(w, r)
}

// Drain refuses new sessions and fails /readyz, at shutdown.
func (s *Set) Drain() {
	if s.opts.One {
		if e := s.one.Load(); e != nil {
			e.Drain()
		}
		return
	}
	s.servers.Drain()
}

// Names are the names of the servers served (none in a set of one).
func (s *Set) Names() []string {
	if s.opts.One {
		return nil
	}
	return s.servers.Names()
}

package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
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
type Set struct {
	opts    SetOptions
	logger  *slog.Logger
	servers *bridge.Servers

	mu      sync.Mutex // serializes Apply and Close
	running map[string]*running
	one     atomic.Pointer[Endpoint] // with One
	closed  bool
	drains  sync.WaitGroup // retired servers still draining
}

type running struct {
	key string
	e   *Endpoint
}

// NewSet returns an empty set.
func NewSet(o *SetOptions) *Set {
	s := &Set{opts: *o, logger: o.Logger, running: map[string]*running{}}
	if !o.One {
		s.servers = bridge.NewServers(o.Edge)
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s
}

// Changes are what Apply did, by server name.
type Changes struct {
	Added, Changed, Unchanged, Removed []string
}

// ErrClosed: Apply after Close.
var ErrClosed = errors.New("the set of servers is closed")

// Apply makes members the set's configuration. It builds the endpoints of
// the members added or changed first: if one fails, those built are
// closed and nothing changes.
func (s *Set) Apply(ctx context.Context, members []Member) (Changes, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ch Changes
	if s.closed {
		return ch, ErrClosed
	}
	if s.opts.One && len(members) != 1 {
		return ch, fmt.Errorf("a set of one applies one server, not %d", len(members))
	}
	var build []Member
	seen := map[string]bool{}
	for _, m := range members {
		seen[m.Name] = true
		switch r := s.running[m.Name]; {
		case r == nil:
			ch.Added = append(ch.Added, m.Name)
			build = append(build, m)
		case r.key != m.Key:
			ch.Changed = append(ch.Changed, m.Name)
			build = append(build, m)
		default:
			ch.Unchanged = append(ch.Unchanged, m.Name)
		}
	}
	for name := range s.running {
		if !seen[name] {
			ch.Removed = append(ch.Removed, name)
		}
	}
	built := make([]*Endpoint, 0, len(build))
	for _, m := range build {
		e, err := m.Build(ctx)
		if err != nil {
			for _, e := range built {
				_ = e.Close(context.Background())
			}
			if s.opts.One {
				return Changes{}, err
			}
			return Changes{}, fmt.Errorf("server %q: %w", m.Name, err)
		}
		built = append(built, e)
	}
	for i, m := range build {
		if old := s.running[m.Name]; old != nil {
			s.logger.Info("server changed in the configuration: replacing it; its sessions drain, new sessions go to the new one", "server_name", m.Name)
			s.retire(m.Name, old)
		}
		s.running[m.Name] = &running{key: m.Key, e: built[i]}
		if s.opts.One {
			s.one.Store(built[i])
			continue
		}
		s.servers.Set(m.Name, built[i].Handler())
	}
	for _, name := range ch.Removed {
		s.logger.Info("server removed from the configuration: its sessions drain (new requests in them get 503), new sessions get 404", "server_name", name)
		s.retire(name, s.running[name])
		delete(s.running, name)
	}
	return ch, nil
}

// retire drains a server in the background: no new session or request,
// the requests in flight finish within the grace, then its sessions end
// and it is forgotten.
func (s *Set) retire(name string, r *running) {
	// New sessions and requests get 503; its pool takes no new call (503
	// with Retry-After): those it took, parked ones included, finish
	// before it closes.
	r.e.Retire()
	s.drains.Add(1)
	go func() {
		defer s.drains.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace)
		// Its stateless calls too (retries of a parked call come to the
		// new server, if any: this one's end at --request-state-ttl).
		err := r.e.WaitIdle(ctx)
		cancel()
		if err != nil {
			s.logger.Warn("ending the sessions of a removed server with requests still in flight after --shutdown-grace", "server_name", name, "err", err)
		}
		stopCtx, cancelStop := context.WithTimeout(context.Background(), s.opts.StopBudget)
		defer cancelStop()
		if err := r.e.Close(stopCtx); err != nil {
			s.logger.Error("some MCP servers did not stop", "server_name", name, "err", err)
		}
		if s.servers != nil {
			s.servers.Remove(name, r.e.Handler())
		}
		s.mu.Lock()
		if s.running[name] == nil && s.opts.Forget != nil {
			// Removed, not replaced, and not added again since.
			s.opts.Forget(name)
		}
		s.mu.Unlock()
		s.logger.Info("server drained", "server_name", name)
	}()
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

func (s *Set) list() []*Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Endpoint, 0, len(s.running))
	for _, r := range s.running {
		out = append(out, r.e)
	}
	return out
}

// WaitIdle waits until no server of the set has a request or stateless
// call in flight, or ctx ends.
func (s *Set) WaitIdle(ctx context.Context) error {
	for _, e := range s.list() {
		if err := e.WaitIdle(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of live sessions over all servers.
func (s *Set) Len() int {
	n := 0
	for _, e := range s.list() {
		n += e.Len()
	}
	return n
}

// Close closes every server, waits for the draining ones, and makes
// Apply fail.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	rs := make([]*Endpoint, 0, len(s.running))
	for _, r := range s.running {
		rs = append(rs, r.e)
	}
	s.mu.Unlock()
	errs := make(chan error, len(rs))
	for _, e := range rs {
		go func() { errs <- e.Close(ctx) }()
	}
	var all []error
	for range rs {
		all = append(all, <-errs)
	}
	s.drains.Wait()
	return errors.Join(all...)
}

package endpoint

import (
	"context"
	"errors"
	"log/slog"
	"sync"
)

// served is what a configuration runs under a name: an Endpoint (a
// server, in a Set) or an Aggregate (in Aggregates).
type served interface {
	Retire()
	WaitIdle(ctx context.Context) error
	Close(ctx context.Context) error
	Drain()
	Len() int
}

// entry is one named thing of a configuration, as lifecycle.apply takes it.
type entry[T served] struct {
	name, key string
	build     func(ctx context.Context) (T, error)
	// prepare, if not nil, is asked first about an entry whose key
	// changed: the change that makes the running t this entry in place,
	// or nil when t must be replaced (built anew). An error fails the
	// apply, as a failed build does.
	prepare func(ctx context.Context, t T) (change, error)
}

// A change makes a running thing an entry in place. Prepared by
// entry.prepare, it is committed once every build and preparation of
// the apply succeeded (commit cannot fail), or dropped (what it built is
// released).
type change interface {
	commit()
	drop() error
}

// placement says how a set serves what it runs. Each hook is called with
// the lifecycle's lock held, and must not block.
type placement[T served] struct {
	// kind names one in logs ("server", "aggregate"), attr is the log
	// attribute that names which ("server_name", "path").
	kind, attr string
	// install serves t under name, in place of what was there.
	install func(name string, t T)
	// retiring is told that t, which served name, takes no new session.
	// Nil: nothing.
	retiring func(name string, t T)
	// drained is told that t, retired from name, has drained and closed;
	// gone says that nothing was installed under name since.
	drained func(name string, t T, gone bool)
	// buildError is the error of a failed build.
	buildError func(name string, err error) error
}

// lifecycle is what Set and Aggregates share: a configuration of named
// things, applied as a reload does (add, keep, replace, drain within the
// grace), and their drain and close at shutdown.
type lifecycle[T served] struct {
	opts   SetOptions
	logger *slog.Logger
	place  placement[T]

	mu      sync.Mutex // serializes apply and close; guards running, closed
	running map[string]*runningOf[T]
	closed  bool
	drains  sync.WaitGroup // retired ones still draining
}

type runningOf[T served] struct {
	key string
	t   T
}

func newLifecycle[T served](o *SetOptions, place placement[T]) lifecycle[T] {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return lifecycle[T]{opts: *o, logger: logger, place: place, running: map[string]*runningOf[T]{}}
}

// apply makes entries the configuration. It builds those added or changed
// first: if one fails, those built are closed and nothing changes.
func (l *lifecycle[T]) apply(ctx context.Context, entries []entry[T]) (Changes, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ch Changes
	if l.closed {
		return ch, ErrClosed
	}
	var build []entry[T]
	type inPlace struct {
		e entry[T]
		c change
	}
	var updates []inPlace
	built := make([]T, 0, len(entries))
	// undo releases what was built or prepared, when the apply fails.
	undo := func() {
		for _, t := range built {
			_ = t.Close(context.Background())
		}
		for _, u := range updates {
			_ = u.c.drop()
		}
	}
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.name] = true
		switch r := l.running[e.name]; {
		case r == nil:
			ch.Added = append(ch.Added, e.name)
			build = append(build, e)
		case r.key != e.key:
			ch.Changed = append(ch.Changed, e.name)
			if e.prepare != nil {
				c, err := e.prepare(ctx, r.t)
				if err != nil {
					undo()
					return Changes{}, l.place.buildError(e.name, err)
				}
				if c != nil {
					ch.InPlace = append(ch.InPlace, e.name)
					updates = append(updates, inPlace{e, c})
					continue
				}
			}
			build = append(build, e)
		default:
			ch.Unchanged = append(ch.Unchanged, e.name)
		}
	}
	for name := range l.running {
		if !seen[name] {
			ch.Removed = append(ch.Removed, name)
		}
	}
	for _, e := range build {
		t, err := e.build(ctx)
		if err != nil {
			undo()
			return Changes{}, l.place.buildError(e.name, err)
		}
		built = append(built, t)
	}
	for _, u := range updates {
		l.logger.Info(l.place.kind+" changed in the configuration: updated in place; its sessions go on", l.place.attr, u.e.name)
		u.c.commit()
		l.running[u.e.name].key = u.e.key
	}
	for i, e := range build {
		if old := l.running[e.name]; old != nil {
			l.logger.Info(l.place.kind+" changed in the configuration: replacing it; its sessions drain, new sessions go to the new one", l.place.attr, e.name)
			l.retire(e.name, old)
		}
		l.running[e.name] = &runningOf[T]{key: e.key, t: built[i]}
		l.place.install(e.name, built[i])
	}
	for _, name := range ch.Removed {
		l.logger.Info(l.place.kind+" removed from the configuration: its sessions drain (new requests in them get 503), new sessions get 404", l.place.attr, name)
		l.retire(name, l.running[name])
		delete(l.running, name)
	}
	return ch, nil
}

// retire drains r in the background: no new session or request (its pool
// takes no new call: 503 with Retry-After; those it took, parked ones
// included, finish), the requests in flight finish within the grace,
// then its sessions end and it closes. Called with l.mu held.
func (l *lifecycle[T]) retire(name string, r *runningOf[T]) {
	r.t.Retire()
	if l.place.retiring != nil {
		l.place.retiring(name, r.t)
	}
	l.drains.Add(1)
	go func() {
		defer l.drains.Done()
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.Grace)
		// Its stateless calls too (retries of a parked call come to the
		// new one, if any: this one's end at --request-state-ttl).
		err := r.t.WaitIdle(ctx)
		cancel()
		if err != nil {
			l.logger.Warn("ending the sessions of a removed "+l.place.kind+" with requests still in flight after --shutdown-grace", l.place.attr, name, "err", err)
		}
		stopCtx, cancelStop := context.WithTimeout(context.Background(), l.opts.StopBudget)
		defer cancelStop()
		if err := r.t.Close(stopCtx); err != nil {
			l.logger.Error("some MCP servers of a removed "+l.place.kind+" did not stop", l.place.attr, name, "err", err)
		}
		l.mu.Lock()
		l.place.drained(name, r.t, l.running[name] == nil)
		l.mu.Unlock()
		l.logger.Info(l.place.kind+" drained", l.place.attr, name)
	}()
}

// list is what runs now.
func (l *lifecycle[T]) list() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]T, 0, len(l.running))
	for _, r := range l.running {
		out = append(out, r.t)
	}
	return out
}

// drainAll refuses new sessions everywhere, at shutdown.
func (l *lifecycle[T]) drainAll() {
	for _, t := range l.list() {
		t.Drain()
	}
}

// WaitIdle waits until nothing that runs has a request or stateless call
// in flight, or ctx ends.
func (l *lifecycle[T]) WaitIdle(ctx context.Context) error {
	for _, t := range l.list() {
		if err := t.WaitIdle(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of live sessions over everything that runs.
func (l *lifecycle[T]) Len() int {
	n := 0
	for _, t := range l.list() {
		n += t.Len()
	}
	return n
}

// Close closes everything that runs, side by side, waits for the
// draining ones, and makes apply fail.
func (l *lifecycle[T]) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	rs := make([]T, 0, len(l.running))
	for _, r := range l.running {
		rs = append(rs, r.t)
	}
	l.mu.Unlock()
	errs := make(chan error, len(rs))
	for _, t := range rs {
		go func() { errs <- t.Close(ctx) }()
	}
	var all []error
	for range rs {
		all = append(all, <-errs)
	}
	l.drains.Wait()
	return errors.Join(all...)
}

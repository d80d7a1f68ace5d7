// Package endpoint holds what one configured MCP server is, in both eras,
// and the set of them a configuration makes.
//
// Build assembles a server's whole stack from its typed options
// (ServerOptions: command, sandbox, limits, pool bounds, guards, per-user
// variables, egress) and what the process shares (Shared: authenticator,
// affinity and forwarder, metrics, tracer, log budget, governor hook,
// shared audit log, logger): the launcher (the sandbox's, per-user
// credentials, the record of each launch's principal for the egress
// reporter, counters, warm spares), the interception point of every
// connection (written whole in one function, guards.chain: tracing,
// metrics, message log, audit, policy, pinning), the session registry of
// revision 2025 clients and the stateless pool of revision 2026-07-28
// clients under one peer.Limits, and the handler that serves both at one
// path. The Endpoint it returns owns all of it: Handler, then at a reload
// that removes or replaces it Retire, WaitIdle within the grace, Close; at
// shutdown Drain, WaitIdle within the grace, Close, which releases the
// launcher, its spares and the audit log.
//
// A Set serves the endpoints of a configuration at /servers/NAME/mcp, or
// one at its own path (the one-command form), and applies a new
// configuration as a reload does (Apply: add, keep, replace, drain).
// cmd/bridge maps flags, environment and the config file into
// ServerOptions and Shared, and runs the process around a Set.
package endpoint

import (
	"context"
	"errors"
	"sync"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/pool"
	"github.com/mcp-bridge/mcp-bridge/session"
)

// Options build an Endpoint.
type Options struct {
	// Session are the session registry's options (revision 2025
	// clients); required.
	Session *session.Options
	// Pool are the stateless pool's options (revision 2026-07-28
	// clients); nil: the endpoint has no stateless front end.
	Pool *pool.Options
	// Handler are the handler's options; its Stateless is set to the
	// endpoint's pool.
	Handler *bridge.Options
	// Release frees what the caller built for this server (its launcher
	// and warm spares, its guards): called once, by Close, after the
	// sessions and the pool's children have ended, or by New when it
	// fails.
	Release func() error
}

// An Endpoint is one configured server, serving both eras at one path.
// Its methods are safe for concurrent use.
type Endpoint struct {
	reg       *session.Registry
	stateless *pool.Pool
	h         *bridge.Handler
	release   func() error
	once      sync.Once // release
}

// New builds an endpoint. If it fails, o.Release has been called.
func New(o *Options) (*Endpoint, error) {
	e := &Endpoint{release: o.Release}
	if e.release == nil {
		e.release = func() error { return nil }
	}
	if o.Pool != nil {
		p, err := pool.New(o.Pool)
		if err != nil {
			return nil, errors.Join(err, e.release())
		}
		e.stateless = p
	}
	e.reg = session.NewRegistry(o.Session)
	ho := *o.Handler
	if e.stateless != nil {
		ho.Stateless = e.stateless
	}
	e.h = bridge.NewHandler(e.reg, &ho)
	return e, nil
}

// Handler serves the endpoint's path: sessions and stateless calls.
func (e *Endpoint) Handler() *bridge.Handler { return e.h }

// Registry is the endpoint's session registry (for its gauges).
func (e *Endpoint) Registry() *session.Registry { return e.reg }

// Pool is the endpoint's stateless pool (for its gauges); nil if it has
// none.
func (e *Endpoint) Pool() *pool.Pool { return e.stateless }

// Len is the number of live sessions.
func (e *Endpoint) Len() int { return e.reg.Len() }

// Drain refuses new sessions and fails /readyz, at shutdown.
func (e *Endpoint) Drain() { e.h.Drain() }

// Retire stops the endpoint taking new work, at a reload that removes or
// replaces its server: new sessions and new requests in its sessions get
// 503, new stateless calls 503 with Retry-After; what it took (requests
// in flight, stateless calls, parked calls whose retries still resume
// them) goes on until WaitIdle says it is done.
func (e *Endpoint) Retire() {
	e.reg.Retire()
	if e.stateless != nil {
		e.stateless.Retire()
	}
}

// WaitIdle waits until no request is in flight in the endpoint's
// sessions and no stateless call is in flight (parked calls and calls
// still taking a child count), or ctx ends.
func (e *Endpoint) WaitIdle(ctx context.Context) error {
	if err := e.reg.WaitIdle(ctx); err != nil {
		return err
	}
	if e.stateless != nil {
		return e.stateless.WaitIdle(ctx)
	}
	return nil
}

// Close ends every session (what is still in flight gets a JSON-RPC
// error), stops the pool's children, then releases what the caller built
// for the server. Call it after WaitIdle, within the grace, to cut
// nothing.
func (e *Endpoint) Close(ctx context.Context) error {
	err := e.reg.Shutdown(ctx)
	if e.stateless != nil {
		err = errors.Join(err, e.stateless.Close(ctx))
	}
	e.once.Do(func() { err = errors.Join(err, e.release()) })
	return err
}

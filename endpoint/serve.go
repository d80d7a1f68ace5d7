package endpoint

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// A FrontEnd is what a process serves on its listener: a Set (the
// one-command form is a set of one) or a Configuration.
type FrontEnd interface {
	http.Handler
	Names() []string // the servers' names
	Len() int
	Drain()
	WaitIdle(ctx context.Context) error
	Close(ctx context.Context) error
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Handler is what the listener serves: the front end, or a handler
	// wrapping it (session affinity's forwarder). Nil: the front end.
	Handler http.Handler
	// IdleTimeout closes a keep-alive connection after this long without
	// a request (http.Server.IdleTimeout; negative: never).
	IdleTimeout time.Duration
	// Grace bounds how long requests in flight may still finish once
	// ctx is done (--shutdown-grace).
	Grace time.Duration
	// StopBudget bounds the stop of every MCP server after the grace.
	StopBudget time.Duration
	// Logger receives the shutdown's logs and net/http's; nil means
	// slog.Default().
	Logger *slog.Logger
}

// handlersGrace is how long the last handlers may write once every
// stream has ended, before the connections they are stuck on (slow
// clients) are cut.
const handlersGrace = 5 * time.Second

// Serve serves fe on ln until ctx is done, then shuts down in order: stop
// accepting (the listener closes, readiness fails), let requests and
// stateless calls in flight finish within the grace, then end every
// session (what is still in flight gets a JSON-RPC error and every stream
// ends), stop the servers within the stop budget, and close the
// connections that remain. It returns nil after such a shutdown, and the
// error that stopped the listener otherwise (fe closed then too).
func Serve(ctx context.Context, ln net.Listener, fe FrontEnd, o *ServeOptions) error {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	handler := o.Handler
	if handler == nil {
		handler = fe
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout or WriteTimeout: they would cut long-lived SSE
		// streams. The handler bounds each body read and each event write
		// instead (bridge.Options.BodyReadTimeout, WriteTimeout).
		IdleTimeout: o.IdleTimeout,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		_ = fe.Close(context.Background())
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down", "grace", o.Grace, "sessions", fe.Len())
	fe.Drain()
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(context.Background()) }()
	graceCtx, cancel := context.WithTimeout(context.Background(), o.Grace)
	defer cancel()
	if err := fe.WaitIdle(graceCtx); err != nil {
		logger.Warn("ending sessions with requests still in flight after the shutdown grace period", "err", err)
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), o.StopBudget)
	defer cancelStop()
	if err := fe.Close(stopCtx); err != nil {
		logger.Error("some MCP servers did not stop", "err", err)
	}
	// Every stream has ended; give handlers a moment to write their last
	// events before cutting connections that are stuck on slow clients.
	select {
	case <-httpDone:
	case <-time.After(handlersGrace):
		_ = srv.Close()
		<-httpDone
	}
	logger.Info("bridge stopped")
	return nil
}

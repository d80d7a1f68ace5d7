package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// A Listener serves /metrics on a listener of its own (Serve).
type Listener struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// Serve serves h at GET /metrics on addr until Close. That listener has no
// authentication: what the bridge shows there is counts, method names and
// the Go runtime's figures, never a session ID, token, tool name or
// message. It refuses with 403 a request whose Host is neither an IP
// address nor one of allowedHosts (the loopback names when empty): a page
// of a DNS-rebinding name could read it otherwise; an IP address, which no
// DNS rebinding produces, always passes, so that a scraper may name its
// target by address. Logger (nil: slog.Default()) receives its refusals.
func Serve(addr string, allowedHosts []string, h http.Handler, logger *slog.Logger) (*Listener, error) {
	if logger == nil {
		logger = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	l := &Listener{
		srv: &http.Server{Handler: hostCheck(allowedHosts, mux, logger), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(l.done)
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serving /metrics stopped", "err", err)
		}
	}()
	return l, nil
}

// Addr is the address it listens on.
func (l *Listener) Addr() net.Addr { return l.addr }

// Close stops serving, waiting up to 5 seconds for scrapes under way.
func (l *Listener) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
	<-l.done
}

// hostCheck refuses with 403 a request whose Host is not allowed (Serve).
func hostCheck(allowed []string, next http.Handler, logger *slog.Logger) http.Handler {
	if len(allowed) == 0 {
		allowed = bridge.LoopbackHosts
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Host
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		if net.ParseIP(strings.Trim(name, "[]")) == nil && !bridge.HostAllowed(allowed, r.Host) {
			logger.Warn("refused a request for /metrics with a disallowed Host (DNS rebinding?)", "host", r.Host,
				"hint", "add it to --allowed-hosts if the scraper legitimately uses this name")
			http.Error(w, "Forbidden: Host "+strconv.Quote(r.Host)+" is not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

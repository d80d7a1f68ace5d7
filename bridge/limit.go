package bridge

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// Defaults of LimitOptions.
const (
	// DefaultMaxConnections bounds the connections open at once. Each
	// holds a file descriptor and a goroutine; the command lowers it to
	// what the open-file limit leaves after a reserve for servers' pipes.
	DefaultMaxConnections = 8192
	// DefaultMaxConnectionsPerClient bounds the connections of one client
	// IP address: a client holds a standalone stream and a few POSTs per
	// session, so this leaves room for hundreds of sessions (or for a
	// proxy in front, which is one address for all its clients).
	DefaultMaxConnectionsPerClient = 1024
)

// LimitOptions configure LimitListener. Every zero value means the
// documented default; a negative value means no limit.
type LimitOptions struct {
	// MaxConnections bounds the connections open at once. Zero means
	// DefaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerClient bounds the connections open at once from one
	// IP address. Zero means DefaultMaxConnectionsPerClient.
	MaxConnectionsPerClient int
	// Logger receives a warning when connections are refused (at most one
	// per second). Nil means slog.Default().
	Logger *slog.Logger
}

// refuseTimeout bounds the life of a refused connection: reading its
// request's head, writing the 503, then waiting for the client to close
// (so that closing with its request unread does not reset the connection
// before the 503 arrives).
const refuseTimeout = time.Second

// refuseHeadBytes bounds what a refused connection's request head is read
// for; a longer head is answered once this much of it has arrived.
const refuseHeadBytes = 8 << 10

// maxRefusing bounds the refused connections being answered at once; beyond
// it a refused connection is closed without an answer, so that a flood of
// connections beyond the limits costs at most this many descriptors more.
const maxRefusing = 64

// LimitListener wraps ln so that it never hands out more connections than
// the limits allow. A connection beyond them is answered, once its
// request's head has arrived, with a minimal HTTP 503 carrying Retry-After
// and a JSON-RPC error, then closed: a client learns why instead of seeing
// a silent drop.
// A connection counts until it is closed.
func LimitListener(ln net.Listener, opts *LimitOptions) net.Listener {
	l := &limitListener{Listener: ln, perClient: make(map[string]int)}
	if opts != nil {
		l.opts = *opts
	}
	if l.opts.MaxConnections == 0 {
		l.opts.MaxConnections = DefaultMaxConnections
	}
	if l.opts.MaxConnectionsPerClient == 0 {
		l.opts.MaxConnectionsPerClient = DefaultMaxConnectionsPerClient
	}
	if l.opts.Logger == nil {
		l.opts.Logger = slog.Default()
	}
	return l
}

type limitListener struct {
	net.Listener
	opts LimitOptions

	mu        sync.Mutex
	open      int
	perClient map[string]int // open connections by client IP; no zero entries

	refusing   atomic.Int32
	lastWarned atomic.Int64 // unix seconds of the last warning
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(c.RemoteAddr())
		why := l.admit(key)
		if why == "" {
			return &limitConn{Conn: c, l: l, key: key}, nil
		}
		l.refuse(c, why)
	}
}

// admit counts a connection from the client key in, or says which limit
// refuses it.
func (l *limitListener) admit(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if max := l.opts.MaxConnections; max > 0 && l.open >= max {
		return "the bridge has " + strconv.Itoa(l.open) + " connections open, its limit (--max-connections)"
	}
	if max := l.opts.MaxConnectionsPerClient; max > 0 && l.perClient[key] >= max {
		return "this client address has " + strconv.Itoa(l.perClient[key]) + " connections open, the limit per client (--max-connections-per-client)"
	}
	l.open++
	l.perClient[key]++
	return ""
}

func (l *limitListener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.perClient[key]--; l.perClient[key] <= 0 {
		delete(l.perClient, key)
	}
}

// refuse answers a connection beyond the limits with 503 and closes it, on
// its own goroutine: Accept never waits for a client.
func (l *limitListener) refuse(c net.Conn, why string) {
	if now := time.Now().Unix(); l.lastWarned.Swap(now) != now {
		l.opts.Logger.Warn("refusing connections beyond the connection limits", "client", c.RemoteAddr().String(),
			"reason", why, "hint", "raise --max-connections / --max-connections-per-client if these clients are legitimate")
	}
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		c.SetDeadline(time.Now().Add(refuseTimeout))
		if !readRequestHead(c) {
			return
		}
		body := jsonrpc.ErrorResponse(nil, jsonrpc.CodeServerError, "Service Unavailable: "+why+"; retry later", nil)
		resp := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
		// Half-close and wait for the client's end, reading what it sent:
		// closing with unread data would reset the connection, and the
		// client could lose the answer.
		if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
	}()
}

// readRequestHead reads a refused connection's request up to the end of
// its head (or refuseHeadBytes of it, or until the deadline), and reports
// whether to answer it. The answer waits for the request: one that arrives
// before the request was written reaches net/http's client as an error on
// an idle connection ("unsolicited response"), not as a 503. A connection
// that sends nothing, or a TLS handshake (the listener is below TLS: a
// plain-text 503 would be a protocol error to the client), gets no answer.
func readRequestHead(c net.Conn) bool {
	var buf [refuseHeadBytes]byte
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		if n == 0 && m > 0 && buf[0] == 0x16 { // a TLS handshake record
			return false
		}
		from := max(n-3, 0)
		n += m
		if bytes.Contains(buf[from:n], []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return n > 0
		}
	}
	return true
}

// clientKey is the IP address of a client, without its port.
func clientKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitConn releases its place in the limits when closed, once.
//
// It also defers deadline changes until they can act. A deadline acts only
// on a Read or Write in progress or started later, yet net/http and the
// handler set or lift the read deadline eight times per request (idle,
// headers, the body's deadline, the background read and its abort) and
// the write deadline twice, nearly always while nothing is being read or
// written; each change updates a runtime timer, several thousand
// instructions per request together. So a change made while no
// operation of its direction is in progress is only recorded, and applied
// at the start of the next one; a change made during one is applied at
// once, as a plain connection does (net/http aborts its background read
// that way). The deadline in effect for every read and write is the last
// one set, as on the underlying connection.
type limitConn struct {
	net.Conn
	l      *limitListener
	key    string
	closed atomic.Bool

	mu     sync.Mutex
	rd, wd lazyDeadline // guarded by mu
}

// lazyDeadline is one direction's deadline of a limitConn: the last one
// set, the one in effect on the underlying connection, and how many
// operations are in progress. Its methods are called with limitConn.mu
// held; each reports whether the underlying deadline must be set to want.
type lazyDeadline struct {
	want, set time.Time
	active    atomic.Int32 // operations in progress; raised under limitConn.mu
}

// begin counts an operation in progress, at its start.
func (d *lazyDeadline) begin() bool {
	d.active.Add(1)
	if d.want == d.set {
		return false
	}
	d.set = d.want
	return true
}

// change records the deadline t.
func (d *lazyDeadline) change(t time.Time) bool {
	d.want = t
	if d.active.Load() == 0 || t == d.set {
		return false
	}
	d.set = t
	return true
}

func (c *limitConn) Read(p []byte) (n int, err error) {
	c.mu.Lock()
	if c.rd.begin() {
		err = c.Conn.SetReadDeadline(c.rd.want)
	}
	c.mu.Unlock()
	if err == nil {
		n, err = c.Conn.Read(p)
	}
	// Lowered without the lock: a change that still sees the operation
	// only applies at once a deadline that would otherwise wait.
	c.rd.active.Add(-1)
	return n, err
}

func (c *limitConn) Write(p []byte) (n int, err error) {
	c.mu.Lock()
	if c.wd.begin() {
		err = c.Conn.SetWriteDeadline(c.wd.want)
	}
	c.mu.Unlock()
	if err == nil {
		n, err = c.Conn.Write(p)
	}
	c.wd.active.Add(-1)
	return n, err
}

// The setters apply a deadline under the lock, so that concurrent changes
// take effect in the order they were recorded.

func (c *limitConn) SetReadDeadline(t time.Time) (err error) {
	c.mu.Lock()
	if c.rd.change(t) {
		err = c.Conn.SetReadDeadline(t)
	}
	c.mu.Unlock()
	return err
}

func (c *limitConn) SetWriteDeadline(t time.Time) (err error) {
	c.mu.Lock()
	if c.wd.change(t) {
		err = c.Conn.SetWriteDeadline(t)
	}
	c.mu.Unlock()
	return err
}

func (c *limitConn) SetDeadline(t time.Time) (err error) {
	c.mu.Lock()
	r, w := c.rd.change(t), c.wd.change(t)
	switch {
	case r && w:
		err = c.Conn.SetDeadline(t)
	case r:
		err = c.Conn.SetReadDeadline(t)
	case w:
		err = c.Conn.SetWriteDeadline(t)
	}
	c.mu.Unlock()
	return err
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.key)
	}
	return err
}

// CloseWrite lets net/http half-close the connection after an error
// answer, as it does for a plain TCP connection.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

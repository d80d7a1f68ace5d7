package egress

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"
)

// ProxyArg, as the first argument of the bridge binary, runs the proxy
// (Main) instead of the bridge: that is how the proxy's container starts.
const ProxyArg = "__egress-proxy"

// ProxyPort is the port the proxy listens on, on its internal network only.
const ProxyPort = 3128

// ProxyUser is the user name of the proxy URL given to servers; the
// password is the container's tag.
const ProxyUser = "bridge"

// dialTimeout bounds one connection attempt of the proxy.
const dialTimeout = 30 * time.Second

// An Event is one decision of the proxy: a connection refused (at once), or
// allowed (when it ends, with its bytes and duration).
type Event struct {
	Tag     string `json:"tag,omitempty"` // the container's tag; "" if it gave none known
	Host    string `json:"host"`          // as requested: a name or an IP address
	Port    int    `json:"port"`
	IP      string `json:"ip,omitempty"` // the address dialed, or refused after resolution
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"` // why it was refused, or why the dial failed
	Up      int64  `json:"up"`               // bytes from the server to the host
	Down    int64  `json:"down"`             // bytes from the host to the server
	Millis  int64  `json:"ms"`               // from the dial to the close
}

// Proxy is the filtering forward proxy: an http.Handler for HTTP CONNECT
// and absolute-URI (plain HTTP) requests.
type Proxy struct {
	rules Rules
	deny  []netip.Prefix
	emit  func(Event)
	gp    *goproxy.ProxyHttpServer
	// Resolver resolves names; nil means net.DefaultResolver.
	resolver *net.Resolver

	mu   sync.Mutex
	tags map[string]bool
}

// New returns a proxy allowing rules; deny holds further prefixes refused
// after resolution (the Docker gateways). emit receives each decision; it
// must not block for long.
func New(rules Rules, deny []netip.Prefix, emit func(Event)) *Proxy {
	p := &Proxy{rules: rules, deny: deny, emit: emit, tags: map[string]bool{}}
	gp := goproxy.NewProxyHttpServer()
	// goproxy's defaults read HTTP(S)_PROXY from our environment and log
	// to stderr: neither is wanted.
	gp.Logger = log.New(io.Discard, "", 0)
	gp.ConnectDial = nil
	gp.ConnectDialWithReq = func(req *http.Request, _, addr string) (net.Conn, error) {
		return p.dial(req.Context(), tagOf(req), addr)
	}
	gp.Tr = &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			tag, _ := ctx.Value(tagKey{}).(string)
			return p.dial(ctx, tag, addr)
		},
		// One connection per request: each is audited on its own, and no
		// pooled connection outlives the decision that allowed it.
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	gp.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		if status, msg := p.check(ctx.Req, host, 443); status != 0 {
			ctx.Resp = goproxy.NewResponse(ctx.Req, "text/plain", status, msg+"\n")
			return goproxy.RejectConnect, host
		}
		return goproxy.OkConnect, host
	})
	gp.OnRequest().DoFunc(func(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		if r.URL.Scheme != "http" {
			return r, goproxy.NewResponse(r, "text/plain", http.StatusBadRequest, "only http:// URLs are proxied as such; use CONNECT for https\n")
		}
		if status, msg := p.check(r, r.URL.Host, 80); status != 0 {
			return r, goproxy.NewResponse(r, "text/plain", status, msg+"\n")
		}
		return r.WithContext(context.WithValue(r.Context(), tagKey{}, tagOf(r))), nil
	})
	p.gp = gp
	return p
}

type tagKey struct{}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.gp.ServeHTTP(w, r) }

// AddTag lets a container holding tag use the proxy; DelTag ends that.
func (p *Proxy) AddTag(tag string) {
	p.mu.Lock()
	p.tags[tag] = true
	p.mu.Unlock()
}

// DelTag forgets a tag (its container is gone).
func (p *Proxy) DelTag(tag string) {
	p.mu.Lock()
	delete(p.tags, tag)
	p.mu.Unlock()
}

func (p *Proxy) known(tag string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return tag != "" && p.tags[tag]
}

// tagOf is the password of the request's Proxy-Authorization (Basic).
func tagOf(r *http.Request) string {
	v := r.Header.Get("Proxy-Authorization")
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return ""
	}
	_, pass, _ := strings.Cut(string(b), ":")
	return pass
}

// check decides a request for hostport (defaultPort if it names none)
// before any dial: a status and message if refused, else 0.
func (p *Proxy) check(r *http.Request, hostport string, defaultPort int) (int, string) {
	host, port, err := splitHostPort(hostport, defaultPort)
	tag := tagOf(r)
	if !p.known(tag) {
		p.emit(Event{Host: host, Port: port, Reason: "no known container tag in Proxy-Authorization"})
		return http.StatusProxyAuthRequired, "egress refused: this proxy serves the bridge's containers only"
	}
	if err != nil {
		p.emit(Event{Tag: tag, Host: hostport, Reason: err.Error()})
		return http.StatusBadRequest, "egress refused: " + err.Error()
	}
	if _, ok := p.rules.Match(host, uint16(port)); !ok {
		p.emit(Event{Tag: tag, Host: host, Port: port, Reason: "not in the allow-list"})
		return http.StatusForbidden, fmt.Sprintf("egress refused: %s is not in this server's allow-list", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return 0, ""
}

func splitHostPort(hostport string, defaultPort int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port: the scheme's.
		if strings.Count(hostport, ":") > 0 && !strings.HasPrefix(hostport, "[") {
			return hostport, 0, fmt.Errorf("malformed host %q", hostport)
		}
		return strings.Trim(hostport, "[]"), defaultPort, nil
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return host, 0, fmt.Errorf("bad port %q", ps)
	}
	return host, int(n), nil
}

// errRefused is a dial the Control hook refused.
type errRefused struct{ ip, why string }

func (e *errRefused) Error() string {
	return fmt.Sprintf("egress refused: %s is %s; only an entry naming it literally (IP:port) allows it", e.ip, e.why)
}

// dial connects to addr (host:port, already matched against the rules) for
// the container tagged tag. The address check happens in the dialer's
// Control hook, on the address the socket connects to, after resolution.
func (p *Proxy) dial(ctx context.Context, tag, addr string) (net.Conn, error) {
	start := time.Now()
	host, port, err := splitHostPort(addr, 443)
	ev := Event{Tag: tag, Host: host, Port: port}
	if err == nil && !p.known(tag) {
		err = errors.New("no known container tag")
	}
	if err == nil {
		if _, ok := p.rules.Match(host, uint16(port)); !ok {
			err = errors.New("not in the allow-list")
		}
	}
	if err != nil {
		ev.Reason = err.Error()
		p.emit(ev)
		return nil, fmt.Errorf("egress refused: %s", err)
	}
	d := net.Dialer{
		Timeout:  dialTimeout,
		Resolver: p.resolver,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &errRefused{ip: address, why: "not an IP address"}
			}
			if why := refusedAddr(ap.Addr(), p.deny); why != "" && !p.rules.listsIP(ap.Addr(), ap.Port()) {
				return &errRefused{ip: ap.Addr().Unmap().String(), why: why}
			}
			return nil
		},
	}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		var re *errRefused
		if errors.As(err, &re) {
			ev.IP = re.ip
			ev.Reason = re.why
		} else {
			ev.Allowed = true
			ev.Reason = "dial failed: " + err.Error()
		}
		ev.Millis = time.Since(start).Milliseconds()
		p.emit(ev)
		if re != nil {
			return nil, re
		}
		return nil, err
	}
	ev.Allowed = true
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ev.IP = ta.AddrPort().Addr().Unmap().String()
	}
	return &countingConn{Conn: c, ev: ev, start: start, emit: p.emit}, nil
}

// countingConn counts bytes each way and reports the connection when it is
// closed. It does not embed *net.TCPConn on purpose: its ReadFrom and
// WriteTo would move bytes past the counters.
type countingConn struct {
	net.Conn
	up, down atomic.Int64
	ev       Event
	start    time.Time
	emit     func(Event)
	once     sync.Once
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.down.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.up.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		ev := c.ev
		ev.Up, ev.Down = c.up.Load(), c.down.Load()
		ev.Millis = time.Since(c.start).Milliseconds()
		c.emit(ev)
	})
	return err
}

// CloseWrite and CloseRead let goproxy half-close a tunnel.
func (c *countingConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

func (c *countingConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

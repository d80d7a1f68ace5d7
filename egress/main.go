package egress

import (
	"bufio"
	"encoding/json"
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
	"time"
)

// The environment of the proxy's container, set by the bridge.
const (
	EnvRules  = "MCP_BRIDGE_EGRESS_RULES"  // the allow-list, comma-separated canonical entries
	EnvDeny   = "MCP_BRIDGE_EGRESS_DENY"   // further prefixes refused after resolution, comma-separated
	EnvSubnet = "MCP_BRIDGE_EGRESS_SUBNET" // the internal network's subnet: the proxy listens there only
)

// A Message is one JSON line of the control channel, the proxy container's
// attached stdin (bridge to proxy) and stdout (proxy to bridge). Exactly
// one field is set.
type Message struct {
	Ready string `json:"ready,omitempty"` // proxy: listening at this address
	Error string `json:"error,omitempty"` // proxy: cannot run; it exits
	Add   string `json:"add,omitempty"`   // bridge: accept this container tag
	Ack   string `json:"ack,omitempty"`   // proxy: the tag is accepted
	Del   string `json:"del,omitempty"`   // bridge: the tag's container is gone
	Event *Event `json:"event,omitempty"` // proxy: a decision
}

// Main runs the proxy of a container: it reads its configuration from
// getenv, listens on its address in the internal network's subnet, and
// serves until stdin ends (the bridge closed it, or is gone). It returns
// the process's exit status. Nothing else may write to stdout.
func Main(stdin io.Reader, stdout io.Writer, getenv func(string) string) int {
	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	send := func(m Message) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(m) // a write error means the bridge is gone; stdin's EOF ends us
	}
	fail := func(err error) int {
		send(Message{Error: err.Error()})
		return 1
	}
	rules, err := ParseRules([]string{getenv(EnvRules)})
	if err != nil {
		return fail(fmt.Errorf("%s: %w", EnvRules, err))
	}
	var deny []netip.Prefix
	for _, s := range strings.Split(getenv(EnvDeny), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", EnvDeny, err))
		}
		deny = append(deny, p)
	}
	subnet, err := netip.ParsePrefix(getenv(EnvSubnet))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", EnvSubnet, err))
	}
	ip, err := addressIn(subnet)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(ProxyPort)))
	if err != nil {
		return fail(err)
	}
	p := New(rules, deny, func(e Event) { send(Message{Event: &e}) })
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	send(Message{Ready: ln.Addr().String()})
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		var m Message
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Add != "" {
			p.AddTag(m.Add)
			send(Message{Ack: m.Add})
		}
		if m.Del != "" {
			p.DelTag(m.Del)
		}
	}
	srv.Close()
	<-served
	return 0
}

// addressIn is this host's address in subnet.
func addressIn(subnet netip.Prefix) (netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && subnet.Contains(ip.Unmap()) {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, errors.New("no address in the internal network's subnet " + subnet.String() + ": is the proxy attached to it?")
}

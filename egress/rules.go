// Package egress is the filtering forward proxy of Docker-sandboxed servers
// and its allow-list.
//
// A server whose configuration lists the hosts it may reach runs on an
// internal Docker network from which the host is unreachable; the only
// other member of that network is this proxy, which speaks HTTP CONNECT and
// plain HTTP (github.com/elazarl/goproxy), resolves names itself, and dials
// only what the allow-list names. The check of the address happens after
// resolution, in the dialer's Control hook, on the very IP the socket
// connects to: a name that resolves (or rebinds) to a loopback, private,
// link-local, metadata or Docker gateway address is refused, unless an
// entry names that literal IP and port.
//
// The proxy runs in a container of its own, built from the bridge binary
// (ProxyArg selects this mode), and talks to its bridge over that
// container's attached stdin and stdout only: the bridge announces the tag
// of each container it starts, and the proxy reports every decision as a
// JSON line (Event). A request without a known tag in its
// Proxy-Authorization is refused, so nothing but the bridge's containers
// can use the proxy.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPort is the port of an entry that names none.
const DefaultPort = 443

// A Rule is one entry of an allow-list: an exact host name, a wildcard
// "*.example.com" (its subdomains, not example.com itself), or a literal IP
// address, with a port.
type Rule struct {
	Name     string     // lower case, no trailing dot; "" for an IP rule
	Wildcard bool       // Name is the suffix of "*.Name"
	IP       netip.Addr // valid for an IP rule
	Port     uint16
}

func (r Rule) String() string {
	h := r.Name
	switch {
	case r.IP.IsValid():
		h = r.IP.String()
		if r.IP.Is6() {
			h = "[" + h + "]"
		}
	case r.Wildcard:
		h = "*." + h
	}
	return h + ":" + strconv.Itoa(int(r.Port))
}

// ParseRule parses "host[:port]": host is a name, "*." and a name, an IPv4
// address, or an IPv6 address (in brackets when a port follows).
func ParseRule(s string) (Rule, error) {
	in := s
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, errors.New("empty entry")
	}
	host, port := s, DefaultPort
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && (strings.HasPrefix(s, "[") == strings.HasSuffix(s, "]")) {
		host = a.String()
	} else if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return Rule{}, fmt.Errorf("entry %q: port %q: want a number from 1 to 65535", in, p)
		}
		host, port = h, int(n)
	} else if strings.Contains(s, "]") || strings.Count(s, ":") > 0 {
		return Rule{}, fmt.Errorf("entry %q: want host[:port], an IPv6 address in brackets when a port follows", in)
	}
	r := Rule{Port: uint16(port)}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("entry %q: an address with a zone cannot be reached from a container", in)
		}
		r.IP = a.Unmap()
		return r, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(name); err == nil {
		// "10.0.0.1." is that address, not a name: a name rule would let
		// the proxy dial it as a name, and its canonical form would parse
		// as an address rule.
		r.IP = a.Unmap()
		return r, nil
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		if !strings.Contains(rest, ".") {
			return Rule{}, fmt.Errorf("entry %q: a wildcard needs a domain of two labels or more (*.example.com)", in)
		}
		r.Wildcard, name = true, rest
	}
	if err := checkName(name); err != nil {
		return Rule{}, fmt.Errorf("entry %q: %v", in, err)
	}
	r.Name = name
	return r, nil
}

// checkName accepts a DNS name of letters, digits, '-' and '_' labels.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return errors.New("want a host name, *.domain or an IP address")
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 {
			return errors.New("empty or overlong label in the host name")
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q in the host name: only letters, digits, '-' and '_' (and '*.' first)", c)
			}
		}
	}
	return nil
}

// Rules is an allow-list.
type Rules []Rule

// ParseRules parses each entry of list; each may itself be comma-separated.
func ParseRules(list []string) (Rules, error) {
	var rs Rules
	for _, e := range list {
		for _, p := range strings.Split(e, ",") {
			if strings.TrimSpace(p) == "" {
				continue
			}
			r, err := ParseRule(p)
			if err != nil {
				return nil, err
			}
			rs = append(rs, r)
		}
	}
	return rs, nil
}

// Strings are the rules in their canonical form.
func (rs Rules) Strings() []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// normalHost is a requested host in the form rules compare: lower case,
// without a trailing dot or brackets; an IP address in its canonical form.
func normalHost(host string) (name string, ip netip.Addr) {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return "", a.Unmap()
	}
	return h, netip.Addr{}
}

// Match returns the rule that allows host:port. A requested IP address
// matches only a rule naming it; a requested name matches an exact rule or
// a wildcard of which it is a strict subdomain.
func (rs Rules) Match(host string, port uint16) (Rule, bool) {
	name, ip := normalHost(host)
	for _, r := range rs {
		if r.Port != port {
			continue
		}
		switch {
		case ip.IsValid():
			if r.IP == ip {
				return r, true
			}
		case r.IP.IsValid():
		case r.Wildcard:
			if strings.HasSuffix(name, "."+r.Name) {
				return r, true
			}
		case r.Name == name:
			return r, true
		}
	}
	return Rule{}, false
}

// listsIP reports whether an entry names ip and port literally.
func (rs Rules) listsIP(ip netip.Addr, port uint16) bool {
	ip = ip.Unmap()
	for _, r := range rs {
		if r.IP.IsValid() && r.IP == ip && r.Port == port {
			return true
		}
	}
	return false
}

// Addresses refused after resolution, unless listed literally, beyond what
// netip classifies (loopback, private, link-local, multicast, unspecified).
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),        // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),    // carrier-grade NAT, often a cloud's internal range
	netip.MustParsePrefix("192.0.0.0/24"),     // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),     // documentation
	netip.MustParsePrefix("198.18.0.0/15"),    // benchmarking, used inside some clouds
	netip.MustParsePrefix("198.51.100.0/24"),  // documentation
	netip.MustParsePrefix("203.0.113.0/24"),   // documentation
	netip.MustParsePrefix("240.0.0.0/4"),      // reserved, and the broadcast address
	netip.MustParsePrefix("168.63.129.16/32"), // Azure's host-local wire server
	netip.MustParsePrefix("::/96"),            // IPv4-compatible (deprecated)
	netip.MustParsePrefix("64:ff9b::/96"),     // NAT64: may embed any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),   // local-use NAT64
	netip.MustParsePrefix("100::/64"),         // discard-only
	netip.MustParsePrefix("2001::/32"),        // Teredo: embeds an IPv4 address
	netip.MustParsePrefix("2001:db8::/32"),    // documentation
	netip.MustParsePrefix("2002::/16"),        // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("fec0::/10"),        // site-local (deprecated)
}

// refusedAddr says why ip may not be dialed unless listed literally, or "".
// deny holds further prefixes (the Docker networks' gateways).
func refusedAddr(ip netip.Addr, deny []netip.Prefix) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "a loopback address"
	case ip == netip.MustParseAddr("169.254.169.254") || ip == netip.MustParseAddr("fd00:ec2::254"):
		return "the cloud metadata address"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "a link-local address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
		return "not a unicast address"
	}
	for _, p := range deny {
		if p.Contains(ip) {
			return "a Docker network's gateway"
		}
	}
	for _, p := range specialPrefixes {
		if p.Contains(ip) {
			return "a special-purpose address (" + p.String() + ")"
		}
	}
	return ""
}

package bridge

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ListenURLHost is the host:port of the URL clients are told at start:
// the host as the listen address gave it (0.0.0.0 stays 0.0.0.0, where
// the listener reports [::]; an empty host is 0.0.0.0), with the port
// actually bound (HOST:0 picks one). A listen address that does not
// parse gives the bound address.
func ListenURLHost(listen string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return bound.String()
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return bound.String()
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, port)
}

// CheckListenAddr refuses a listen address that net.Listen would refuse,
// with what is wrong in it: a program checks it before its check for
// authentication, which would otherwise blame a typo on missing tokens.
func CheckListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: malformed address: want HOST:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:8080", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil {
		if _, err := net.LookupPort("tcp", port); err != nil || n > 0 {
			return fmt.Errorf("%s: port %s is invalid: want a number from 0 to 65535", addr, port)
		}
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%s: malformed host %q: want an IP address or a host name", addr, host)
	}
	return nil
}

// IsLoopbackAddr reports whether a listen address binds loopback only.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

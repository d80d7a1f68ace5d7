package bridge

import "net"

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

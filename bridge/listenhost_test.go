package bridge_test

import (
	"net"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

func TestListenURLHost(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv6unspecified, Port: 43210}
	for _, c := range []struct{ listen, want string }{
		{"0.0.0.0:0", "0.0.0.0:43210"},
		{":0", "0.0.0.0:43210"},
		{"127.0.0.1:8080", "127.0.0.1:43210"},
		{"localhost:0", "localhost:43210"},
		{"[::1]:0", "[::1]:43210"},
		{"not an address", "[::]:43210"},
	} {
		if got := bridge.ListenURLHost(c.listen, bound); got != c.want {
			t.Errorf("ListenURLHost(%q): %s, want %s", c.listen, got, c.want)
		}
	}
}

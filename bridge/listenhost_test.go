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

func TestCheckListenAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "",
		"0.0.0.0:0":      "",
		":http":          "",
		"[::1]:8080":     "",
		"localhost":      "localhost: malformed address: want HOST:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:8080",
		"127.0.0.1:1e5":  "127.0.0.1:1e5: port 1e5 is invalid: want a number from 0 to 65535",
		"127.0.0.1:7000": "",
		"a b:80":         `a b:80: malformed host "a b": want an IP address or a host name`,
	} {
		got := ""
		if err := bridge.CheckListenAddr(addr); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("CheckListenAddr(%q) = %q, want %q", addr, got, want)
		}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:80": true, "localhost:80": true, "127.1.2.3:1": true,
		"0.0.0.0:8080": false, ":8080": false, "example.com:80": false, "10.0.0.1:80": false, "nonsense": false,
	} {
		if got := bridge.IsLoopbackAddr(addr); got != want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

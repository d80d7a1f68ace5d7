// Command egressproxy runs the egress proxy as the bridge binary does when
// given egress.ProxyArg: the Docker launcher's tests build the proxy's
// image from it (FROM scratch, so it must be static: CGO_ENABLED=0).
package main

import (
	"os"

	"github.com/mcp-bridge/mcp-bridge/egress"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != egress.ProxyArg {
		os.Stderr.WriteString("usage: egressproxy " + egress.ProxyArg + "\n")
		os.Exit(2)
	}
	os.Exit(egress.Main(os.Stdin, os.Stdout, os.Getenv))
}

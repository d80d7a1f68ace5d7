package peer

import "github.com/mcp-bridge/mcp-bridge/jsonrpc"

// Receive hands the Conn a line as if the child had written it, on the
// caller's goroutine: for benchmarks of the answer path without a pipe.
func (c *Conn) Receive(line []byte) {
	env, err := jsonrpc.Parse(line)
	if err != nil {
		panic(err)
	}
	c.receive(line, env)
}

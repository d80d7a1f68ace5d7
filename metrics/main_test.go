package metrics_test

// The test binary plays the stdio MCP server behind the bridge: TestMain
// re-runs it as internal/testserver's server (echo, block, crash, elicit).

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
)

func TestMain(m *testing.M) {
	testserver.Main()
	goleak.VerifyTestMain(m)
}

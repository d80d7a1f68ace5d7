package tracing_test

// The test binary plays the stdio MCP server behind the bridge: TestMain
// re-runs it as internal/testserver's server. Its tool "trace" answers
// with the traceparent it found in the request's _meta.

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/internal/testserver"
)

func TestMain(m *testing.M) {
	testserver.Main()
	goleak.VerifyTestMain(m)
}

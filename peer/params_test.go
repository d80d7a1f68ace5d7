package peer

import (
	"testing"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

func TestWithParams(t *testing.T) {
	for in, want := range map[string]string{
		`{"method":"roots/list","jsonrpc":"2.0","id":0}`:                  `{"method":"roots/list","jsonrpc":"2.0","id":0,"params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping" }`:                       `{"jsonrpc":"2.0","id":1,"method":"ping" ,"params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"roots/list","params":{"a":1}}`: `{"jsonrpc":"2.0","id":1,"method":"roots/list","params":{"a":1}}`,
	} {
		env, err := jsonrpc.Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		got, genv := withParams([]byte(in), env)
		if string(got) != want || genv.Method != env.Method {
			t.Errorf("withParams(%s) = %s (%s), want %s", in, got, genv.Method, want)
		}
	}
}

package bridge

import (
	"errors"
	"net/http"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/pool"
)

// The front end's side of pool.Call refuses, typed: a mismatched
// Mcp-Param header with a *pool.HeaderMismatchError naming it, an
// annotated argument given twice with the -32600 refusal of its own; a
// request whose headers match passes. And passing the headers as a
// pool.Front costs no allocation.
func TestParamHeadersFront(t *testing.T) {
	annotated := []pool.ParamHeader{{Path: []string{"region"}, Name: "Region"}, {Path: []string{"count"}, Name: "Count"}}
	req := func(args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"q","arguments":` + args + `}}`)
	}
	hd := http.Header{"Mcp-Param-Region": {"us-west1"}, "Mcp-Param-Count": {"7"}}
	if err := paramHeaders(hd).CheckParamHeaders(req(`{"region":"us-west1","count":7}`), annotated); err != nil {
		t.Fatalf("matching headers: %v", err)
	}
	err := paramHeaders(hd).CheckParamHeaders(req(`{"region":"us-west1","count":8}`), annotated)
	var hm *pool.HeaderMismatchError
	if !errors.As(err, &hm) || hm.Header != "Mcp-Param-Count" || hm.Reason == "" {
		t.Fatalf("a mismatched count: %v, want a *pool.HeaderMismatchError naming Mcp-Param-Count", err)
	}
	err = paramHeaders(hd).CheckParamHeaders(req(`{"region":"us-west1","Region":"eu","count":7}`), annotated)
	var amb *ambiguousParamError
	if !errors.As(err, &amb) {
		t.Fatalf("a region given twice: %v, want an *ambiguousParamError", err)
	}
	var front pool.Front
	if allocs := testing.AllocsPerRun(100, func() { front = paramHeaders(hd) }); allocs != 0 || front == nil {
		t.Fatalf("%v allocations to pass the headers as a pool.Front, want 0", allocs)
	}
}

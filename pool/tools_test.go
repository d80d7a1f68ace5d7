package pool

import (
	"fmt"
	"slices"
	"testing"
)

// Only annotations statically reachable through properties count.
func TestAnnotations(t *testing.T) {
	schema := `{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},
		"query":{"type":"string"},
		"limits":{"type":"object","properties":{"count":{"type":"integer","x-mcp-header":"Count"}}},
		"list":{"type":"array","items":{"type":"string","x-mcp-header":"Item"}},
		"either":{"oneOf":[{"type":"string","x-mcp-header":"Either"}]},
		"bad":{"type":"string","x-mcp-header":"Not a token"},
		"empty":{"type":"string","x-mcp-header":""},
		"number":{"type":"string","x-mcp-header":7}
	}}`
	var got []string
	for _, h := range annotations([]byte(schema)) {
		got = append(got, fmt.Sprintf("%v=%s", h.Path, h.Name))
	}
	slices.Sort(got)
	if want := []string{"[limits count]=Count", "[region]=Region"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if annotations([]byte(`{"type":"object"}`)) != nil || annotations(nil) != nil {
		t.Fatal("annotations without any")
	}
}

// The cache learns whole listings, keeps pages, forgets on list_changed,
// and ignores answers to listings that started before it forgot.
func TestToolCache(t *testing.T) {
	var tc toolCache
	list := func(tools, next string) []byte {
		s := `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + tools + `]`
		if next != "" {
			s += `,"nextCursor":"` + next + `"`
		}
		return []byte(s + `}}`)
	}
	a := `{"name":"a","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"R"}}}}`
	b := `{"name":"b","inputSchema":{"type":"object"}}`

	gen := tc.generation()
	tc.learnAnswer(gen, true, list(a, "p2"))
	if h, known, complete := tc.lookup("a"); !known || complete || len(h) != 1 || h[0].Name != "R" {
		t.Fatalf("after a first page: %v %v %v", h, known, complete)
	}
	tc.learnAnswer(gen, false, list(b, ""))
	if _, known, complete := tc.lookup("b"); !known || complete {
		t.Fatalf("after the last page: %v %v", known, complete)
	}
	tc.learnAnswer(gen, true, list(a+","+b, ""))
	if _, known, complete := tc.lookup("zzz"); known || !complete {
		t.Fatalf("after a whole listing: %v %v", known, complete)
	}

	tc.invalidate()
	if _, known, complete := tc.lookup("a"); known || complete {
		t.Fatal("list_changed did not empty the cache")
	}
	tc.learnAnswer(gen, true, list(a, "")) // started before the change
	tc.setAll(gen, map[string][]ParamHeader{"a": nil}, true)
	if _, known, _ := tc.lookup("a"); known {
		t.Fatal("a listing of before the change was learned")
	}
	tc.learnAnswer(tc.generation(), true, list(b, ""))
	if _, known, complete := tc.lookup("b"); !known || !complete {
		t.Fatal("a listing after the change was not learned")
	}
	tc.learnAnswer(tc.generation(), true, []byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`))
	if _, known, _ := tc.lookup("b"); !known {
		t.Fatal("an error answer changed the cache")
	}
}

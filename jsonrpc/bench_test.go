package jsonrpc

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchMessages are what the bridge sees most: a client's tools/call, a
// server's small answer and its progress notifications. BenchmarkParse adds
// a large tool result, where the cost is the scan itself; it is built there
// rather than here so that the package's tests do not pay for it.
var benchMessages = []struct {
	name string
	data []byte
}{
	{"tools-call", []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_files","arguments":{"path":"/srv/project","pattern":"*.go","recursive":true,"limit":100},"_meta":{"progressToken":42}}}`)},
	{"response", []byte(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"Found 3 files:\nmain.go\nscan.go\nscan_test.go"}],"isError":false}}`)},
	{"progress", []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":42,"progress":50,"total":100,"message":"Indexing files"}}`)},
}

// bigResult is a tools/call result of about size bytes whose text is log-like
// lines, encoded as encoding/json encodes them (quotes, newlines and <>
// escaped), as a server returning a large file would send it.
func bigResult(size int) []byte {
	var text strings.Builder
	for i := 0; text.Len() < size; i++ {
		text.WriteString(`2025-06-18T12:00:00Z INFO handler: served "GET /api/items?id=`)
		text.WriteString(strings.Repeat("7", i%13))
		text.WriteString(`" <200> in 3ms, user=álvaro` + "\n\t")
	}
	msg := map[string]any{
		"jsonrpc": "2.0",
		"id":      42,
		"result": map[string]any{
			"content": []any{map[string]any{"type": "text", "text": text.String()}},
			"isError": false,
		},
	}
	b, err := json.Marshal(msg)
	if err != nil {
		panic(err)
	}
	return b
}

func BenchmarkParse(b *testing.B) {
	cases := append(benchMessages[:len(benchMessages):len(benchMessages)], struct {
		name string
		data []byte
	}{"result-10MiB", bigResult(10 << 20)})
	for _, bm := range cases {
		b.Run(bm.name, func(b *testing.B) {
			if _, err := Parse(bm.data); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bm.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bm.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package peer

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOversizedResponseID(t *testing.T) {
	big := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name, head, tail, want string
	}{
		{"go sdk", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + big, big + `"}]}}`, "7"},
		{"string id", `{"jsonrpc":"2.0","id":"a\"b","result":{"` + big, big + `"}}`, `"a\"b"`},
		{"ts sdk", `{"result":{"content":[{"type":"text","text":"` + big, big + `"}]},"jsonrpc":"2.0","id":12}`, "12"},
		{"ts sdk, string id", `{"result":{"x":"` + big, big + `"},"jsonrpc":"2.0","id":"r-1"}` + "\n", `"r-1"`},
		{"nested id only", `{"result":{"id":5,"x":"` + big, big + `"}}`, ""},
		{"nested id at the end", `{"result":{"x":"` + big, big + `","id":5}}`, ""},
		{"request", `{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"` + big, big + `"}}`, ""},
		{"ts request", `{"method":"roots/list","params":{"` + big, big + `"},"jsonrpc":"2.0","id":3}`, ""},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/message","params":{"` + big, big + `"}}`, ""},
		{"not json", big, big, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := oversizedResponseID([]byte(tc.head), []byte(tc.tail))
			if string(id) != tc.want || ok != (tc.want != "") {
				t.Fatalf("got %q %v, want %q", id, ok, tc.want)
			}
		})
	}
}

// FuzzOversizedResponseID: any ends of a line give either no id or one
// that is a JSON string or number.
func FuzzOversizedResponseID(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":7,"result":{"a":"`), []byte(`"}}`))
	f.Add([]byte(`{"result":{"a":"`), []byte(`"},"jsonrpc":"2.0","id":"x"}`))
	f.Fuzz(func(t *testing.T, head, tail []byte) {
		id, ok := oversizedResponseID(head, tail)
		if !ok {
			return
		}
		var v any
		if err := json.Unmarshal(id, &v); err != nil {
			t.Fatalf("id %q is not JSON: %v", id, err)
		}
		switch v.(type) {
		case string, float64:
		default:
			t.Fatalf("id %q is neither a string nor a number", id)
		}
	})
}

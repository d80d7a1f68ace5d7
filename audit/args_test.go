package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// --audit-args once wrote a client's arguments as they came:
// invalid UTF-8 made the line invalid JSON, and neither depth nor size was
// bounded. Each line is now valid JSON, with markers where bounds cut.
func TestArgsValidAndBounded(t *testing.T) {
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	huge := `{"x":"` + strings.Repeat("y", MaxArgsBytes) + `"}`
	for _, c := range []struct {
		name, args, want string
	}{
		{"plain", `{"a": [1, 2], "b": "c"}`, `{"a":[1,2],"b":"c"}`},
		{"invalid UTF-8", "{\"a\":\"x\xffy\"}", "{\"a\":\"x\uFFFDy\"}"},
		{"invalid UTF-8 in a key", "{\"k\xc3\":1}", "{\"k\uFFFD\":1}"},
		{"not JSON", "{\"a\":\xff", "\"{\\\"a\\\":\uFFFD\""},
		{"deep", deep, ""},
		{"huge", huge, `{"truncated":"` + ArgsSizeMarker + `","bytes":` + itoaInternal(len(huge)) + `}`},
	} {
		r := &Record{Event: "request", Outcome: "ok", Args: json.RawMessage(c.args)}
		line := r.appendJSON(nil)
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Errorf("%s: not valid JSON: %q", c.name, line)
			continue
		}
		var got struct {
			Args json.RawMessage `json:"args"`
		}
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatal(err)
		}
		if c.want != "" && string(got.Args) != c.want {
			t.Errorf("%s: args %s, want %s", c.name, got.Args, c.want)
		}
		if c.name == "deep" && (!bytes.Contains(got.Args, []byte(ArgsDepthMarker)) || bytes.Count(got.Args, []byte("[")) != MaxArgsDepth) {
			t.Errorf("deep: %s, want %d levels then the marker", got.Args, MaxArgsDepth)
		}
	}
}

func itoaInternal(n int) string { b, _ := json.Marshal(n); return string(b) }

func FuzzArgsValidJSON(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte("{\"a\":\"\xff\"}"))
	f.Add([]byte(`[[[[[[]]]]]]`))
	f.Fuzz(func(t *testing.T, args []byte) {
		if len(args) == 0 {
			return
		}
		line := appendArgs(nil, args)
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Fatalf("args %q gave %q", args, line)
		}
	})
}

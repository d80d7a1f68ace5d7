package bridge

import "testing"

func TestAccepts(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"application/json, text/event-stream", "application/json", true},
		{"application/json, text/event-stream", "text/event-stream", true},
		{"text/event-stream,application/json", "application/json", true},
		{" Application/JSON ; charset=utf-8 ", "application/json", true},
		{"application/*;q=0.9", "application/json", true},
		{"application/*", "text/event-stream", false},
		{"text/*", "text/event-stream", true},
		{"*/*", "text/event-stream", true},
		{"application/jsonx", "application/json", false},
		{"application/json-seq", "application/json", false},
		{"text/html", "application/json", false},
		{"", "application/json", false},
		{",,", "application/json", false},
	}
	for _, tc := range tests {
		if got := accepts(tc.header, tc.want); got != tc.ok {
			t.Errorf("accepts(%q, %q) = %v, want %v", tc.header, tc.want, got, tc.ok)
		}
	}
}

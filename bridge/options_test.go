package bridge_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// Validate refuses a relative Path, an origin no Origin header holds and a
// negative SSERetry, each with an OptionError naming the field.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []bridge.Options{{}, {Path: "/mcp", AllowedOrigins: []string{"*", "https://app.example.com", "http://localhost:3000/"}, SSERetry: 0}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, tc := range []struct {
		o     bridge.Options
		field string
		msg   string
	}{
		{bridge.Options{Path: "mcp"}, "Path", `"mcp" must start with /`},
		{bridge.Options{AllowedOrigins: []string{"https://a.example", "app.example"}}, "AllowedOrigins",
			`"app.example": want an origin such as https://app.example.com (scheme://host[:port], no path) or *`},
		{bridge.Options{AllowedOrigins: []string{"https://a.example/path"}}, "AllowedOrigins",
			`"https://a.example/path": want an origin such as https://app.example.com (scheme://host[:port], no path) or *`},
		{bridge.Options{SSERetry: -time.Second}, "SSERetry", "-1s: want 0 or more"},
	} {
		var oe *bridge.OptionError
		if err := tc.o.Validate(); !errors.As(err, &oe) || oe.Field != tc.field || err.Error() != tc.msg ||
			oe.Option() != "bridge.Options."+tc.field {
			t.Errorf("%+v: %v, want %s: %s", tc.o, err, tc.field, tc.msg)
		}
	}
}

package bridge

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// An OptionError is an Options field whose value the package refuses
// (Options.Validate). Its message says the value and what is wanted;
// cmd/bridge names the flag or key that set it (Option).
type OptionError struct {
	Field string // the field of Options, e.g. "AllowedOrigins"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct,
// e.g. "bridge.Options.AllowedOrigins".
func (e *OptionError) Option() string { return "bridge.Options." + e.Field }

// Validate refuses what no Handler can serve: a Path that is not absolute,
// an AllowedOrigins entry that no Origin header holds, a negative
// SSERetry (an SSE retry field is a count of milliseconds).
func (o *Options) Validate() error {
	if o.Path != "" && !strings.HasPrefix(o.Path, "/") {
		return &OptionError{Field: "Path", Err: fmt.Errorf("%q must start with /", o.Path)}
	}
	for _, origin := range o.AllowedOrigins {
		if err := checkOrigin(origin); err != nil {
			return &OptionError{Field: "AllowedOrigins", Err: fmt.Errorf("%q: %w", origin, err)}
		}
	}
	if o.SSERetry < 0 {
		return &OptionError{Field: "SSERetry", Err: fmt.Errorf("%s: want 0 or more", o.SSERetry)}
	}
	return nil
}

// checkOrigin accepts what an Origin header holds (scheme://host[:port]) or *.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("want an origin such as https://app.example.com (scheme://host[:port], no path) or *")
	}
	return nil
}

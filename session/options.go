package session

import "fmt"

// An OptionError is an Options field whose value the package refuses
// (Options.Validate). Its message says the value and what is wanted;
// cmd/bridge names the flag or key that set it (Option).
type OptionError struct {
	Field string // the field of Options, e.g. "MaxSessions"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct,
// e.g. "session.Options.MaxSessions".
func (e *OptionError) Option() string { return "session.Options." + e.Field }

// Validate refuses what no Registry can do: a negative bound (zero means
// the field's default, as each field says; the timeouts' negative values
// mean none). The limits it shares with the pool are peer.Limits's
// (Limits(nil).Validate), whose OptionError names peer.Limits's field.
func (o *Options) Validate() error {
	for _, f := range []struct {
		field string
		v     int64
	}{
		{"MaxSessions", int64(o.MaxSessions)},
		{"MaxMessageBytes", int64(o.MaxMessageBytes)},
		{"LogMaxEvents", int64(o.LogMaxEvents)},
		{"LogMaxBytes", o.LogMaxBytes},
	} {
		if f.v < 0 {
			return &OptionError{Field: f.field, Err: fmt.Errorf("%d: want 1 or more", f.v)}
		}
	}
	l := o.Limits(nil)
	return l.Validate()
}

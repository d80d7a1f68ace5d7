package pool

import "fmt"

// An OptionError is an Options field whose value the package refuses
// (Options.Validate). Its message says the value and what is wanted;
// cmd/bridge names the flag or key that set it (Option).
type OptionError struct {
	Field string // the field of Options, e.g. "Max"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct,
// e.g. "pool.Options.Max".
func (e *OptionError) Option() string { return "pool.Options." + e.Field }

// A BoundsError is a Min above Max (the OptionError of Min): the pool
// could never keep that many children.
type BoundsError struct{ Min, Max int }

func (e *BoundsError) Error() string { return fmt.Sprintf("Min %d is above Max %d", e.Min, e.Max) }

// Validate refuses what no Pool can do: a negative Max or StateTTL, a Min
// above Max (DefaultMax when zero), and what Limits.Validate refuses.
// (New clamps Min to Max instead, for callers that do not validate.)
// Zero means the field's default; the negative values the fields document
// (Min, MaxPerPrincipal, EvictIdle, ...) are valid.
func (o *Options) Validate() error {
	if o.Max < 0 {
		return &OptionError{Field: "Max", Err: fmt.Errorf("%d: want 1 or more", o.Max)}
	}
	if o.StateTTL < 0 {
		return &OptionError{Field: "StateTTL", Err: fmt.Errorf("%s: want a positive duration", o.StateTTL)}
	}
	max := o.Max
	if max == 0 {
		max = DefaultMax
	}
	if o.Min > max {
		return &OptionError{Field: "Min", Err: &BoundsError{Min: o.Min, Max: max}}
	}
	return o.Limits.Validate()
}

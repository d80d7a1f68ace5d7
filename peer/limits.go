package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
)

// Defaults of Limits, the same for both eras.
const (
	// DefaultRequestTimeout is generous: a tool call may run for minutes
	// (and progress notifications extend it).
	DefaultRequestTimeout = 10 * time.Minute
	// DefaultInitializeTimeout matches the request timeout of the usual
	// clients: one that waited longer for initialize would be rare.
	DefaultInitializeTimeout = time.Minute
	// DefaultMaxRequests bounds the requests in flight of one session (a
	// pool admits that many per child it may run): clients run a few at
	// once; 40,000 unanswered ones cost 43 MB.
	DefaultMaxRequests = 100
)

// CodeRequestTimeout answers a request the MCP server did not answer
// within the request timeout (the code the MCP TypeScript SDK uses for its
// own request timeouts), in either era.
const CodeRequestTimeout = -32001

// ErrTooManyRequests: the bound on requests in flight (Limits.MaxRequests)
// is reached; the client may send the request again once answers come.
var ErrTooManyRequests = errors.New("too many requests in flight")

// Limits bound what clients may hold of the MCP servers, the same way in
// both eras: the 2025 sessions (session.Options) and the 2026-07-28 pool
// (pool.Options) honour one Limits each. The eras differ only where the
// protocol does: the unit of MaxRequests is a session there, and a child
// the pool may run here (a pool has no sessions).
type Limits struct {
	// RequestTimeout answers a request the server has not answered after
	// this long with a JSON-RPC error (CodeRequestTimeout), and sends the
	// server notifications/cancelled for it (CancelledNotification). Zero
	// means DefaultRequestTimeout; negative disables it.
	RequestTimeout time.Duration
	// InitializeTimeout bounds the initialize the bridge (legacy children
	// of the pool) or the client (sessions) sends a server. Zero means
	// DefaultInitializeTimeout; negative disables it.
	InitializeTimeout time.Duration
	// InitializeHint is added to the error of an initialize that timed
	// out: what the caller knows of the command (cmd/bridge: how to pass
	// environment variables, and to run a Python server unbuffered).
	InitializeHint string
	// MaxRequests bounds the requests in flight per unit (a session; a
	// child the pool may run): beyond it a request fails with
	// ErrTooManyRequests. Zero means DefaultMaxRequests.
	MaxRequests int
	// MaxQueuedBytes bounds the bytes waiting for a server's stdin
	// (Options.MaxQueuedBytes): beyond it a request fails with ErrBusy.
	// Zero means DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// KeepAlive is how often a quiet stream gets an SSE comment. Zero
	// means the package's default; negative, none.
	KeepAlive time.Duration
	// Inflight, if set, is told the number of client requests in flight
	// each time it rises or falls, on the request's path: it must be
	// quick (the GOMAXPROCS governor, internal/procs). Nil: nobody.
	Inflight func(n int)
}

// An OptionError is a Limits field whose value the package refuses
// (Limits.Validate). Its message says the value and what is wanted;
// cmd/bridge names the flag or key that set it (Option).
type OptionError struct {
	Field string // the field of Limits, e.g. "MaxRequests"
	Err   error  // what is wrong with it
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Option names the option with its package and struct,
// e.g. "peer.Limits.MaxRequests".
func (e *OptionError) Option() string { return "peer.Limits." + e.Field }

// Validate refuses a negative bound, which means nothing (zero means the
// default; the timeouts' and KeepAlive's negative values mean none).
func (l *Limits) Validate() error {
	if l.MaxRequests < 0 {
		return &OptionError{Field: "MaxRequests", Err: fmt.Errorf("%d: want 0 or more", l.MaxRequests)}
	}
	if l.MaxQueuedBytes < 0 {
		return &OptionError{Field: "MaxQueuedBytes", Err: fmt.Errorf("%d: want 0 or more", l.MaxQueuedBytes)}
	}
	return nil
}

// WithDefaults returns l with its zero values replaced by the defaults.
func (l Limits) WithDefaults() Limits {
	if l.RequestTimeout == 0 {
		l.RequestTimeout = DefaultRequestTimeout
	}
	if l.InitializeTimeout == 0 {
		l.InitializeTimeout = DefaultInitializeTimeout
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = DefaultMaxRequests
	}
	if l.MaxQueuedBytes <= 0 {
		l.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	return l
}

// CancelledNotification is the notifications/cancelled for the request
// whose id is rawID (as written), with reason: the one builder both eras
// use. "When a party wants to cancel an in-progress request, it sends a
// notifications/cancelled notification containing: The ID of the request
// to cancel; An optional reason string" (basic/utilities/cancellation).
// rawID must be a JSON-RPC id as parsed from a request.
func CancelledNotification(rawID []byte, reason string) jsonrpc.Message {
	data := make([]byte, 0, 96+len(rawID)+len(reason))
	data = append(data, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	data = append(data, rawID...)
	data = append(data, `,"reason":`...)
	quoted, _ := json.Marshal(reason) // a string always marshals
	data = append(data, quoted...)
	data = append(data, "}}"...)
	env, err := jsonrpc.Parse(data)
	if err != nil {
		panic("peer: a cancellation does not parse: " + err.Error()) // rawID came from a parsed request
	}
	return jsonrpc.Message{Data: data, Env: env}
}

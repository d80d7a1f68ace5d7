package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Kind is the kind of a JSON-RPC message.
type Kind uint8

const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// ID is a JSON-RPC id in a canonical form usable as a map key: "s" followed
// by the string for string ids, "n" followed by the number for numeric ids.
// The zero ID means "no id". IDs are only ever used to route; the bytes sent
// on either side are always the peer's own, unchanged.
type ID string

// Envelope is what the bridge needs to know of a JSON-RPC message to route it.
// Parsing it never copies the message's params or result.
type Envelope struct {
	Kind   Kind
	ID     ID     // requests and responses
	Method string // requests and notifications
	// ProgressToken is params._meta.progressToken of a request, or
	// params.progressToken of a notifications/progress.
	ProgressToken ID
	// RequestID is params.requestId of a notifications/cancelled.
	RequestID ID
	// IsError reports a response carrying "error" rather than "result".
	IsError bool
}

// Errors of Parse. All wrap ErrInvalidMessage.
var (
	ErrInvalidMessage = errors.New("invalid JSON-RPC message")
	errParse          = &parseError{"not valid JSON"}
)

type parseError struct{ what string }

func (e *parseError) Error() string { return "invalid JSON-RPC message: " + e.what }
func (e *parseError) Unwrap() error { return ErrInvalidMessage }

// IsParseError reports whether err means the input was not JSON at all
// (JSON-RPC -32700), as opposed to JSON that is not a valid message (-32600).
func IsParseError(err error) bool { return err == errParse }

// present records that a JSON member exists without copying its value.
type present bool

func (p *present) UnmarshalJSON([]byte) error { *p = true; return nil }

// rawID keeps the bytes of an id without copying more than the id itself.
type rawID []byte

func (r *rawID) UnmarshalJSON(b []byte) error { *r = append(rawID(nil), b...); return nil }

type wireMessage struct {
	JSONRPC string  `json:"jsonrpc"`
	ID      rawID   `json:"id"`
	Method  *string `json:"method"`
	Params  struct {
		Meta struct {
			ProgressToken rawID `json:"progressToken"`
		} `json:"_meta"`
		ProgressToken rawID `json:"progressToken"`
		RequestID     rawID `json:"requestId"`
	} `json:"params"`
	Result present `json:"result"`
	Error  present `json:"error"`
}

// Parse reads the routing envelope of one JSON-RPC message.
func Parse(data []byte) (Envelope, error) {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case !errors.As(err, &typeErr):
			return Envelope{}, errParse
		case !strings.HasPrefix(typeErr.Field, "params"):
			return Envelope{}, &parseError{"member " + typeErr.Field + " has the wrong type"}
		}
		// A params member of an unexpected type (JSON-RPC allows
		// by-position params) only means there is nothing to route on;
		// encoding/json decoded every other member.
	}
	if w.JSONRPC != "2.0" {
		return Envelope{}, &parseError{`"jsonrpc" must be "2.0"`}
	}
	var env Envelope
	if w.ID != nil {
		id, err := canonicalID(w.ID)
		if err != nil {
			return Envelope{}, err
		}
		env.ID = id
	}
	switch {
	case w.Method != nil:
		if w.Result || w.Error {
			return Envelope{}, &parseError{`a message cannot have both "method" and "result" or "error"`}
		}
		if *w.Method == "" {
			return Envelope{}, &parseError{`"method" must not be empty`}
		}
		env.Method = *w.Method
		env.Kind = KindRequest
		if w.ID == nil {
			env.Kind = KindNotification
		} else if env.ID == "" {
			return Envelope{}, &parseError{`a request's "id" must not be null`}
		}
		switch {
		case env.Kind == KindRequest && w.Params.Meta.ProgressToken != nil:
			env.ProgressToken, _ = canonicalID(w.Params.Meta.ProgressToken)
		case env.Method == "notifications/progress" && w.Params.ProgressToken != nil:
			env.ProgressToken, _ = canonicalID(w.Params.ProgressToken)
		case env.Method == "notifications/cancelled" && w.Params.RequestID != nil:
			env.RequestID, _ = canonicalID(w.Params.RequestID)
		}
	case bool(w.Result) || bool(w.Error):
		if w.Result && w.Error {
			return Envelope{}, &parseError{`a response cannot have both "result" and "error"`}
		}
		if w.ID == nil {
			return Envelope{}, &parseError{`a response needs an "id"`}
		}
		env.Kind = KindResponse
		env.IsError = bool(w.Error)
	default:
		return Envelope{}, &parseError{`a message needs "method", "result" or "error"`}
	}
	return env, nil
}

// canonicalID turns a raw JSON id into its map key. Strings and numbers are
// accepted; null is accepted only on error responses by the caller's choice
// (it yields the zero ID).
func canonicalID(raw []byte) (ID, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", &parseError{"empty id"}
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", &parseError{"id is not a valid string"}
		}
		return ID("s" + s), nil
	case 'n':
		return "", nil // null: only meaningful for error responses
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		s := string(raw)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return ID("n" + strconv.FormatInt(i, 10)), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "", &parseError{"id is not a valid number"}
		}
		return ID("n" + strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return "", &parseError{"id must be a string or a number"}
}

// SplitBatch splits a JSON array of messages into its elements. It reports
// ok=false when data is not an array (after leading white space).
func SplitBatch(data []byte) (msgs []json.RawMessage, ok bool, err error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, false, nil
	}
	if err := json.Unmarshal(trimmed, &msgs); err != nil {
		return nil, true, errParse
	}
	if len(msgs) == 0 {
		return nil, true, &parseError{"empty batch"}
	}
	return msgs, true, nil
}

// ErrorResponse renders a JSON-RPC error response. rawID is the id exactly as
// the peer sent it (nil renders "id":null).
func ErrorResponse(rawID []byte, code int, message string, data any) []byte {
	type errObj struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	id := json.RawMessage("null")
	if len(rawID) > 0 {
		id = rawID
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   errObj          `json:"error"`
	}{"2.0", id, errObj{code, message, data}})
	return b
}

// RawID extracts the raw bytes of a message's id, for ErrorResponse.
func RawID(data []byte) []byte {
	var w struct {
		ID rawID `json:"id"`
	}
	_ = json.Unmarshal(data, &w)
	return w.ID
}

// Standard JSON-RPC error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInternalError  = -32603
	// CodeServerError is what the bridge answers when the session or its
	// server ends before a request was answered (implementation-defined range).
	CodeServerError = -32000
)

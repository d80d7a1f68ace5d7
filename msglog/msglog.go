// Package msglog logs every JSON-RPC message between clients and an MCP
// server, both ways, at peer/'s interception point: one log line per
// message with its direction, method, id, size and body (cut at a bound),
// on the logger of its connection (which names the session, or the
// stateless pool's child). Being an interceptor, it sees the messages of
// every era and front end (2025 sessions, the 2026-07-28 pool's children,
// legacy HTTP+SSE sessions) and the bridge's own requests.
//
// It is off unless asked for (--log-messages): message bodies hold what
// users and tools exchange. It never sees HTTP headers, so no bearer token
// or Authorization header can reach its lines; a token a client puts into
// a message body is logged like the rest of the body, as the server
// receives it.
//
// It runs first in a connection's chain, so it logs a client's message as
// the client wrote it (also one the policy then refuses, with the
// refusal's code) and a server's message as the server wrote it (before
// the policy or pinning filter a list).
package msglog

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"unicode/utf8"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// DefaultMaxBody is how much of a message's body a line holds when
// Options.MaxBody is zero: enough for a request and a short answer; a long
// tool result is cut, its size logged whole.
const DefaultMaxBody = 2048

// Options configure the logging. The zero value is usable.
type Options struct {
	// MaxBody bounds the bytes of a body logged (cut at a UTF-8 boundary,
	// with the number of bytes left out); zero means DefaultMaxBody, a
	// negative value logs no body.
	MaxBody int
	// Level is the level of the lines; zero means slog.LevelInfo, so that
	// turning the logging on is enough to see them.
	Level slog.Level
}

// Interceptor returns the interceptor that logs each message on logger.
func Interceptor(logger *slog.Logger, o *Options) peer.Interceptor {
	if o == nil {
		o = &Options{}
	}
	maxBody := o.MaxBody
	if maxBody == 0 {
		maxBody = DefaultMaxBody
	}
	level := o.Level
	if level == 0 {
		level = slog.LevelInfo
	}
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if m.Abandoned || !logger.Enabled(context.Background(), level) {
				return next(m) // the server sent nothing (peer.Message.Abandoned)
			}
			// Read before next: m may be replaced down the chain.
			attrs := Attrs(m, maxBody)
			if m.Dir == peer.FromChild {
				// Logged before it goes on: the router's delivery may wait
				// on the client, and a line written after it would come
				// late, after lines of later messages.
				logger.LogAttrs(context.Background(), level, "MCP message", attrs...)
				return next(m)
			}
			err := next(m)
			var rpcErr *jsonrpc.Error
			if errors.As(err, &rpcErr) {
				attrs = append(attrs, slog.String("refused", strconv.Itoa(rpcErr.Code)+" "+rpcErr.Message))
			}
			logger.LogAttrs(context.Background(), level, "MCP message", attrs...)
			return err
		}
	}
}

// Attrs are the attributes of m's log line: dir (to_server, from_server),
// kind, method, id (as JSON), own (a request of the bridge's own or its
// answer), bytes, and body, cut after maxBody bytes (none if negative).
func Attrs(m *peer.Message, maxBody int) []slog.Attr {
	dir := "to_server"
	if m.Dir == peer.FromChild {
		dir = "from_server"
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("dir", dir), slog.String("kind", m.Env.Kind.String()))
	if m.Method != "" {
		attrs = append(attrs, slog.String("method", m.Method))
	}
	if m.Env.Kind == jsonrpc.KindRequest || m.Env.Kind == jsonrpc.KindResponse {
		attrs = append(attrs, slog.String("id", string(m.Env.ID.AppendJSON(nil))))
	}
	if m.Own {
		attrs = append(attrs, slog.Bool("own", true))
	}
	attrs = append(attrs, slog.Int("bytes", len(m.Data)))
	if maxBody >= 0 {
		attrs = append(attrs, slog.String("body", Cut(m.Data, maxBody)))
	}
	return attrs
}

// Cut returns data as a string of at most max bytes, cut at a UTF-8
// boundary, followed by how many bytes were left out.
func Cut(data []byte, max int) string {
	if len(data) <= max {
		return string(data)
	}
	n := max
	for n > 0 && !utf8.RuneStart(data[n]) {
		n--
	}
	return string(data[:n]) + "…(" + strconv.Itoa(len(data)-n) + " more bytes)"
}

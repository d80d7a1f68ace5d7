package connect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// legacy speaks the HTTP+SSE transport of revision 2024-11-05 through the
// Go SDK's SSEClientTransport: a GET stream whose first event names the
// endpoint for POSTs, and every message of the server on that stream. Its
// Connection reads and writes jsonrpc messages, ids and params untouched.
type legacy struct {
	*forwarder
	conn mcp.Connection
	wg   sync.WaitGroup // the reader
	once sync.Once

	mu sync.Mutex
	// pending holds the ids of the client's requests not answered yet,
	// answered with an error if the stream fails: a single stream carries
	// every answer, so one malformed message ends them all.
	pending map[string]json.RawMessage
}

func (f *forwarder) dialSSE() (*legacy, error) {
	t := &mcp.SSEClientTransport{Endpoint: f.opts.URL, HTTPClient: f.client, MaxEventSize: f.opts.MaxMessageBytes + 4<<10}
	conn, err := t.Connect(f.ctx)
	if err != nil {
		if status, challenge := f.auth.refused(); status != 0 {
			return nil, f.unauthorized(status, challenge, "the SSE stream's GET")
		}
		return nil, fmt.Errorf("connecting to the HTTP+SSE endpoint %s: %w", f.opts.URL, err)
	}
	l := &legacy{forwarder: f, conn: conn, pending: make(map[string]json.RawMessage)}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			msg, err := conn.Read(f.ctx)
			if err != nil {
				if f.ctx.Err() == nil {
					err = fmt.Errorf("the remote's SSE stream ended: %w", err)
					f.log.Error("giving up the remote", "err", err)
					// Run's error is settled before the answers go out, so
					// that a client closing stdin on reading them cannot
					// end Run as if all were well.
					f.fail(err)
					l.failPending(err)
				}
				return
			}
			data, err := jsonrpc.EncodeMessage(msg)
			if err == nil {
				err = checkMessage(data)
			}
			if err != nil {
				f.log.Error("skipping a message of the remote", "err", err)
				if r, ok := msg.(*jsonrpc.Response); ok && r.ID.IsValid() {
					// The answer the client waits for is unusable.
					if id, merr := json.Marshal(r.ID.Raw()); merr == nil {
						l.mu.Lock()
						delete(l.pending, string(id))
						l.mu.Unlock()
						l.answerError(id, codeInternalError, fmt.Sprintf("bridge connect: the answer of the remote was refused: %v", err))
					}
				}
				continue
			}
			if _, ok := msg.(*jsonrpc.Response); ok {
				var env envelope
				if json.Unmarshal(data, &env) == nil {
					l.mu.Lock()
					delete(l.pending, string(bytes.TrimSpace(env.ID)))
					l.mu.Unlock()
				}
			}
			f.deliver(data)
		}
	}()
	return l, nil
}

func (l *legacy) send(env *envelope, raw []byte) error {
	msg, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		l.log.Warn("skipping a stdin line that is not a JSON-RPC message", "err", err)
		l.answerError(env.ID, codeInvalidRequest, err.Error())
		return nil
	}
	if env.isRequest() {
		id := bytes.TrimSpace(env.ID)
		l.mu.Lock()
		l.pending[string(id)] = id
		l.mu.Unlock()
	}
	if err := l.conn.Write(l.ctx, msg); err != nil {
		if status, challenge := l.auth.refused(); status != 0 {
			return l.unauthorized(status, challenge, env.Method)
		}
		if l.ctx.Err() != nil {
			return context.Cause(l.ctx)
		}
		l.log.Warn("a message did not reach the remote", "method", env.Method, "err", err)
		l.mu.Lock()
		delete(l.pending, string(bytes.TrimSpace(env.ID)))
		l.mu.Unlock()
		l.answerError(env.ID, codeInternalError, fmt.Sprintf("bridge connect: %v", err))
	}
	return nil
}

// close ends the GET stream (the legacy transport has no DELETE) and waits
// for the reader.
func (l *legacy) close() {
	l.once.Do(func() {
		_ = l.conn.Close()
		l.wg.Wait()
	})
}

// failPending answers every request in flight with an error.
func (l *legacy) failPending(cause error) {
	l.mu.Lock()
	ids := l.pending
	l.pending = map[string]json.RawMessage{}
	l.mu.Unlock()
	for _, id := range ids {
		l.answerError(id, codeInternalError, fmt.Sprintf("bridge connect: %v", cause))
	}
}

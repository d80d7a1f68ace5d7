package connect

import (
	"context"
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
	l := &legacy{forwarder: f, conn: conn}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			msg, err := conn.Read(f.ctx)
			if err != nil {
				if f.ctx.Err() == nil {
					f.fail(fmt.Errorf("the remote's SSE stream ended: %w", err))
				}
				return
			}
			data, err := jsonrpc.EncodeMessage(msg)
			if err == nil {
				err = checkMessage(data)
			}
			if err != nil {
				f.log.Error("skipping a message of the remote", "err", err)
				continue
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
	if err := l.conn.Write(l.ctx, msg); err != nil {
		if status, challenge := l.auth.refused(); status != 0 {
			return l.unauthorized(status, challenge, env.Method)
		}
		if l.ctx.Err() != nil {
			return context.Cause(l.ctx)
		}
		l.log.Warn("a message did not reach the remote", "method", env.Method, "err", err)
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

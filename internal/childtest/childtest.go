// Package childtest is what the tests of the interception point's packages
// (policy, pin, audit) share: the Go SDK's everything-server built once per
// test binary, started as a real child behind a peer.Conn, and clients that
// send requests through the Conn and wait for their answers.
package childtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/auth"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

var (
	everythingOnce sync.Once
	everythingBin  string
	everythingErr  error
)

// EverythingServer builds the Go SDK's conformance everything-server, a
// real stdio MCP server with tools, prompts, resources and templates,
// once per test binary, and returns its path. Its test_trigger_tool_change
// tool adds a tool after start and sends notifications/tools/list_changed.
func EverythingServer(t testing.TB) string {
	t.Helper()
	everythingOnce.Do(func() {
		dir, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			everythingErr = err
			return
		}
		everythingBin = filepath.Join(strings.TrimSpace(string(dir)), "mcp-bridge-test-everything-server")
		out, err := exec.Command("go", "build", "-o", everythingBin,
			"github.com/modelcontextprotocol/go-sdk/conformance/everything-server").CombinedOutput()
		if err != nil {
			everythingErr = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if everythingErr != nil {
		t.Fatalf("building the everything-server: %v", everythingErr)
	}
	return everythingBin
}

// Child is a real child behind a peer.Conn, with a Router that hands each
// client's answers to the request waiting for them.
type Child struct {
	Conn *peer.Conn
	// Callers says whom each client acts for, by name (nil, or a nil
	// result: nobody): the principal of the Client that Call, TryCall,
	// CallRaw and Begin send as. Set it before the first of them.
	Callers func(name string) *auth.Principal
	r       *router
}

// A Client is a test's client of a child, as the Origin of its messages
// (peer.Origin): a name, and the principal it acts for (nil: none). Two
// are the same client when both are equal.
type Client struct {
	Name      string
	Principal *auth.Principal
}

// Caller is the client's principal.
func (c Client) Caller() *auth.Principal { return c.Principal }

// Client is the client called name, acting for whom Callers says.
func (c *Child) Client(name string) Client {
	if c.Callers == nil {
		return Client{Name: name}
	}
	return Client{Name: name, Principal: c.Callers(name)}
}

// Start launches command as a child with the interceptor intercept (nil:
// none) and performs the initialize handshake as the bridge. The child is
// stopped when the test ends.
func Start(t testing.TB, intercept peer.Interceptor, command ...string) *Child {
	t.Helper()
	return StartEnv(t, intercept, nil, command...)
}

// StartEnv is Start with the child's environment (nil: the test's).
func StartEnv(t testing.TB, intercept peer.Interceptor, env []string, command ...string) *Child {
	t.Helper()
	l := sandbox.NewLocal(&sandbox.LocalOptions{
		Command:   command[0],
		Args:      command[1:],
		Env:       env,
		StopGrace: 2 * time.Second,
		Logger:    slog.New(slog.DiscardHandler),
	})
	proc, err := l.Launch(context.Background(), "childtest")
	if err != nil {
		t.Fatal(err)
	}
	r := &router{waiting: map[key]chan []byte{}, notes: make(chan *peer.Message, 64), ended: make(chan struct{})}
	c := &Child{Conn: peer.New(proc, r, &peer.Options{Intercept: intercept, Logger: slog.New(slog.DiscardHandler)}), r: r}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Conn.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Conn.Initialize(ctx, map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{"elicitation": map[string]any{}, "sampling": map[string]any{}, "roots": map[string]any{}},
		"clientInfo":      map[string]any{"name": "childtest", "version": "1"},
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

type key struct {
	origin peer.Origin
	id     jsonrpc.ID
}

type router struct {
	mu      sync.Mutex
	waiting map[key]chan []byte
	notes   chan *peer.Message // the child's requests and notifications, and unexpected messages
	ended   chan struct{}
}

func (r *router) Route(m *peer.Message) {
	if m.Env.Kind == jsonrpc.KindResponse {
		r.mu.Lock()
		ch := r.waiting[key{m.Origin, m.Env.ID}]
		delete(r.waiting, key{m.Origin, m.Env.ID})
		r.mu.Unlock()
		if ch != nil {
			ch <- bytes.Clone(m.Data)
			return
		}
	}
	// m is valid only during the call (the Conn reuses it): keep a copy.
	cp := *m
	cp.Data = bytes.Clone(m.Data)
	select {
	case r.notes <- &cp:
	default: // a test that does not read them
	}
}

func (r *router) Ended(error) { close(r.ended) }

// Notes are the messages from the child that answer no request waited for.
func (c *Child) Notes() <-chan *peer.Message { return c.r.notes }

// Ended is closed when the child's connection ended.
func (c *Child) Ended() <-chan struct{} { return c.r.ended }

// Call sends a request of the client called who (Client) with params
// (marshalled) and returns the raw answer. The id is a fresh number per
// call.
func (c *Child) Call(t testing.TB, who string, method string, params any) []byte {
	t.Helper()
	data, err := c.TryCall(who, method, params)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var ids struct {
	sync.Mutex
	n int
}

// TryCall is Call returning its error.
func (c *Child) TryCall(who string, method string, params any) ([]byte, error) {
	_, wait, err := c.Begin(who, method, params)
	if err != nil {
		return nil, err
	}
	return wait()
}

// Begin sends a request of the client called who (Client) and returns its
// id (as JSON) and a function that waits for its answer.
func (c *Child) Begin(who string, method string, params any) (id string, wait func() ([]byte, error), err error) {
	origin := c.Client(who)
	ids.Lock()
	ids.n++
	n := ids.n
	ids.Unlock()
	msg := map[string]any{"jsonrpc": "2.0", "id": n, "method": method}
	if params != nil {
		msg["params"] = params
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return "", nil, err
	}
	env, err := jsonrpc.Parse(data)
	if err != nil {
		return "", nil, err
	}
	ch := make(chan []byte, 1)
	k := key{origin, env.ID}
	c.r.mu.Lock()
	c.r.waiting[k] = ch
	c.r.mu.Unlock()
	if err := c.Conn.Send(origin, jsonrpc.Message{Data: data, Env: env}); err != nil {
		return "", nil, err
	}
	return string(env.IDAt.In(data)), func() ([]byte, error) {
		select {
		case answer := <-ch:
			return answer, nil
		case <-c.r.ended:
			return nil, fmt.Errorf("%s: the child ended before answering", method)
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("%s: no answer in a minute", method)
		}
	}, nil
}

// CallRaw sends data, a request of the client called who (Client) written
// by the test (byte for byte), and returns the raw answer.
func (c *Child) CallRaw(t testing.TB, who string, data []byte) []byte {
	t.Helper()
	origin := c.Client(who)
	env, err := jsonrpc.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []byte, 1)
	c.r.mu.Lock()
	c.r.waiting[key{origin, env.ID}] = ch
	c.r.mu.Unlock()
	if err := c.Conn.Send(origin, jsonrpc.Message{Data: data, Env: env}); err != nil {
		t.Fatal(err)
	}
	select {
	case answer := <-ch:
		return answer
	case <-c.r.ended:
		t.Fatalf("the child ended before answering %s", data)
	case <-time.After(time.Minute):
		t.Fatalf("no answer to %s in a minute", data)
	}
	return nil
}

// Names returns the names (or key members) of the items of the list
// result.<array> in answer.
func Names(t testing.TB, answer []byte, array, key string) []string {
	t.Helper()
	var r struct {
		Result map[string]json.RawMessage
		Error  *jsonrpc.Error
	}
	var items []map[string]any
	err := json.Unmarshal(answer, &r)
	if err == nil && r.Error == nil {
		err = json.Unmarshal(r.Result[array], &items)
	}
	if err != nil || r.Error != nil {
		t.Fatalf("not a list answer: %s (%v)", answer, err)
	}
	var out []string
	for _, it := range items {
		s, _ := it[key].(string)
		out = append(out, s)
	}
	return out
}

// Error returns the error of answer, or nil.
func Error(t testing.TB, answer []byte) *jsonrpc.Error {
	t.Helper()
	_, rpcErr, err := jsonrpc.DecodeResponse(answer)
	if err != nil {
		t.Fatalf("not a response: %s (%v)", answer, err)
	}
	return rpcErr
}

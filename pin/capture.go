package pin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

// maxPages bounds the pages of one list Capture reads: a server whose
// cursors never end must not keep it forever.
const maxPages = 10000

// A Problem is an item Capture found wrong (see Inspection): bridge pin
// refuses to pin it.
type Problem struct {
	Kind, Name, Problem string
}

func (p Problem) String() string { return fmt.Sprintf("%s %q: %s", p.Kind, p.Name, p.Problem) }

// Capture initializes a child that no client initialized, as the bridge,
// and reads its tools, prompts, resources and resource templates (every
// page), into a lock. Items the inspection refuses are left out of the
// lock and returned as problems. A list the server does not offer (no capability,
// or method not found) pins nothing of its kind.
func Capture(ctx context.Context, conn *peer.Conn, in Inspection) (*Lock, []Problem, error) {
	res, err := conn.Initialize(ctx, map[string]any{
		"protocolVersion": "2025-11-25",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "mcp-bridge-pin", "version": "1"},
	})
	if err != nil {
		return nil, nil, err
	}
	var init struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
		ServerInfo   *ServerInfo                `json:"serverInfo"`
	}
	if err := json.Unmarshal(res, &init); err != nil {
		return nil, nil, fmt.Errorf("the MCP server's initialize answer: %w", err)
	}
	l := NewLock()
	l.Server = init.ServerInfo
	var problems []Problem
	for _, k := range Kinds {
		capability := map[string]string{"tool": "tools", "prompt": "prompts", "resource template": "resources", "resource": "resources"}[k.Name]
		if _, ok := init.Capabilities[capability]; !ok {
			continue
		}
		err := eachItem(ctx, conn.Call, k, func(name string, item []byte) error {
			if p := in.inspect(k, item); p != "" {
				problems = append(problems, Problem{k.Name, name, p})
				return nil
			}
			return l.Set(k, item)
		})
		if err != nil && !errors.Is(err, errNotSupported) {
			return nil, nil, err
		}
	}
	return l, problems, nil
}

// CallFunc sends a request of the bridge's own and returns its result:
// peer.Conn.Call.
type CallFunc func(ctx context.Context, method string, params any) (json.RawMessage, error)

// eachItem calls f with each item of a list, following nextCursor.
func eachItem(ctx context.Context, call CallFunc, k *Kind, f func(name string, item []byte) error) error {
	var cursor *string
	for range maxPages {
		var params any
		if cursor != nil {
			params = map[string]any{"cursor": *cursor}
		}
		res, err := call(ctx, k.Method, params)
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
			return errNotSupported
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k.Method, err)
		}
		var page map[string]json.RawMessage
		if err := json.Unmarshal(res, &page); err != nil {
			return fmt.Errorf("%s: the result is not an object: %w", k.Method, err)
		}
		var items []json.RawMessage
		if raw, ok := page[k.Array]; ok {
			if err := json.Unmarshal(raw, &items); err != nil {
				return fmt.Errorf("%s: result.%s is not an array: %w", k.Method, k.Array, err)
			}
		}
		for _, it := range items {
			var named map[string]json.RawMessage
			var name string
			if json.Unmarshal(it, &named) != nil || json.Unmarshal(named[k.Key], &name) != nil || name == "" {
				return fmt.Errorf("%s: an item without a %s: %s", k.Method, k.Key, it)
			}
			if err := f(name, it); err != nil {
				return err
			}
		}
		next, ok := page["nextCursor"]
		if !ok || string(next) == "null" {
			return nil
		}
		var c string
		if err := json.Unmarshal(next, &c); err != nil {
			return fmt.Errorf("%s: nextCursor is not a string: %s", k.Method, next)
		}
		if cursor != nil && *cursor == c {
			return fmt.Errorf("%s: the server returned the same cursor twice (%q)", k.Method, c)
		}
		cursor = &c
	}
	return fmt.Errorf("%s: more than %d pages", k.Method, maxPages)
}

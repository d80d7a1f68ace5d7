package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/internal/configfile"
	"github.com/mcp-bridge/mcp-bridge/pin"
)

// Every key a server of the config file may set reaches its
// endpoint.ServerOptions: endpointOptions maps each one (a key it forgot
// would be accepted and silently ignored).
func TestServerKeysReachServerOptions(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("tools:\n  deny: [delete_*]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(dir, "lock.json")
	if err := pin.NewLock().WriteFile(lockFile); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{
		"sandbox": "docker", "image": "other:1", "pull": "always",
		"sandbox-network": "bridge", "sandbox-egress": []string{"example.com:443"}, "sandbox-runtime": "runsc",
		"user-env": []string{"TOKEN=github"}, "sandbox-mount": []string{"/tmp:/data:ro"}, "sandbox-env": []string{"A=b"},
		"sandbox-memory": "1g", "sandbox-cpus": 2, "sandbox-pids": 512, "sandbox-user": "1000:1000",
		"warm": 2, "stop-grace": "7s", "stderr-line-bytes": 999,
		"session-idle-timeout": "7m", "initialize-timeout": "7s", "request-timeout": "7m",
		"max-sessions": 7, "max-requests-per-session": 7, "max-queued-bytes": 7777, "max-message-bytes": 77777,
		"log-max-events": 7, "log-max-bytes": 7777, "json-response": true, "sse-poll-after": "7s", "sse-retry": "7s",
		"policy": policyFile, "pin-file": lockFile, "on-pin-violation": "end-session", "audit-log": filepath.Join(dir, "audit.log"),
		"child-era": "modern", "pool-min": 2, "pool-max": 7, "pool-max-per-principal": 2, "pool-evict-idle": "7s", "request-state-ttl": "7m",
	}
	for _, key := range configfile.ServerKeys {
		v, ok := values[key]
		if !ok {
			t.Errorf("key %q: no test value", key)
			continue
		}
		global, err := parseConfig([]string{"--", "true"})
		if err != nil {
			t.Fatal(err)
		}
		// Docker's keys are compared between two Docker servers.
		base := map[string]json.RawMessage{"sandbox": json.RawMessage(`"docker"`), "image": json.RawMessage(`"srv:1"`)}
		if key == "sandbox" || key == "user-env" || key == "warm" {
			base = map[string]json.RawMessage{}
		}
		with := map[string]json.RawMessage{}
		for k, r := range base {
			with[k] = r
		}
		raw, _ := json.Marshal(v)
		with[key] = raw
		if key == "sandbox" {
			with["image"] = json.RawMessage(`"srv:1"`)
		}
		opts := func(keys map[string]json.RawMessage) any {
			entry := map[string]json.RawMessage{"command": json.RawMessage(`"true"`)}
			for k, r := range keys {
				entry[k] = r
			}
			raw, err := json.Marshal(entry)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := configfile.ParseServer("servers.json", "s", raw)
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			sc, err := serverConfig(global, "servers.json", spec)
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			return *endpointOptions(sc)
		}
		if reflect.DeepEqual(opts(base), opts(with)) {
			t.Errorf("key %q = %s: the server's endpoint.ServerOptions do not change", key, raw)
		}
	}
}

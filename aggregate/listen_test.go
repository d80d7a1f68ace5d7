package aggregate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/aggregate"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// listenMsg is a message of a subscriptions/listen stream.
type listenMsg struct {
	Method string `json:"method"`
	Params struct {
		URI           string `json:"uri"`
		Notifications struct {
			ToolsListChanged      bool     `json:"toolsListChanged"`
			PromptsListChanged    bool     `json:"promptsListChanged"`
			ResourcesListChanged  bool     `json:"resourcesListChanged"`
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"notifications"`
	} `json:"params"`
	Raw string `json:"-"`
}

// post sends one request of revision 2026-07-28 as raw HTTP, with the
// same (empty) client capabilities each time, so that the pool serves
// every such request with one group of virtual children.
func post(t *testing.T, ctx context.Context, url, id, method, name, params string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`","params":{`+params+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: %s %s", method, resp.Status, body)
	}
	return resp
}

// events reads the SSE data lines of resp into a channel.
func events(t *testing.T, resp *http.Response) <-chan listenMsg {
	msgs := make(chan listenMsg, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m listenMsg
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Errorf("not a message on the stream: %q", data)
				continue
			}
			m.Raw = data
			msgs <- m
		}
	}()
	t.Cleanup(func() {
		resp.Body.Close()
		<-done
	})
	return msgs
}

// waitMsg returns the first message of msgs that match accepts.
func waitMsg(t *testing.T, ctx context.Context, msgs <-chan listenMsg, what string, match func(listenMsg) bool) listenMsg {
	t.Helper()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the listen stream ended before %s", what)
			}
			if match(m) {
				return m
			}
		case <-ctx.Done():
			t.Fatalf("no %s on the listen stream", what)
		}
	}
}

// A 2026-07-28 subscriptions/listen on an aggregate of a member with
// resources.subscribe (every) and one without (plain): the acknowledgment
// lists the resource of the member that honours subscriptions and not
// the other's (refused without starting plain's child), and
// toolsListChanged; every's resource updates and its list change reach
// the stream.
func TestListenAcknowledgesPerMember(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plain := &counting{l: sandbox.NewLocal(&sandbox.LocalOptions{Command: exe,
		Env:       append(os.Environ(), cacheEnv+"=60000 public", cacheResourceEnv+"=plain://note"),
		StopGrace: 2 * time.Second, Logger: logger(t)})}
	f := newFixture(t, func(o *aggregate.Options) {
		o.Members = append(o.Members, aggregate.Member{Name: "plain", Launcher: plain})
	})
	ctx := ctxT(t)
	if err := f.agg.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	stream := events(t, post(t, ctx, f.url, "1", "subscriptions/listen", "",
		`"notifications":{"toolsListChanged":true,"resourceSubscriptions":["test://watched-resource","plain://note"]},`))
	ack := waitMsg(t, ctx, stream, "acknowledgment", func(listenMsg) bool { return true })
	if ack.Method != "notifications/subscriptions/acknowledged" {
		t.Fatalf("the first message is %s", ack.Raw)
	}
	n := ack.Params.Notifications
	if !n.ToolsListChanged || !slices.Equal(n.ResourceSubscriptions, []string{"test://watched-resource"}) {
		t.Errorf("acknowledged %s; want toolsListChanged and test://watched-resource only (plain does not support subscriptions)", ack.Raw)
	}
	if runs := plain.sessions(); len(runs) != 0 {
		t.Errorf("plain's children started for sessions: %v; refusing a subscription it cannot honour should start none", runs)
	}
	// The everything-server updates its watched resource every 3 s.
	waitMsg(t, ctx, stream, "resources/updated of test://watched-resource", func(m listenMsg) bool {
		return m.Method == "notifications/resources/updated" && m.Params.URI == "test://watched-resource"
	})
	call := post(t, ctx, f.url, "2", "tools/call", "every__test_trigger_tool_change", `"name":"every__test_trigger_tool_change","arguments":{},`)
	call.Body.Close()
	waitMsg(t, ctx, stream, "tools/list_changed", func(m listenMsg) bool { return m.Method == "notifications/tools/list_changed" })
}

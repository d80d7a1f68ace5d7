package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-bridge/mcp-bridge/internal/childtest"
	"github.com/mcp-bridge/mcp-bridge/internal/oauthtest"
)

// The policy and the pin file hold for subscriptions/listen as for reads,
// and resource updates from the stateless pool's children reach each
// caller by its own scopes: against the everything-server (whose
// test://watched-resource changes every 3 seconds), modern and forced
// legacy, a caller whose token grants the scope the policy puts on the
// watched resource gets its updates, and its subscription's
// acknowledgment leaves out a URI the policy denies and one the pin file
// does not cover; a caller without the scope is acknowledged without the
// watched resource, and gets no update of it until the bridge shuts down
// (each subscription then ends with a completion result).
func TestListenGuards(t *testing.T) {
	bin, _ := buildBinaries(t)
	server := childtest.EverythingServer(t)
	lockFile, policyFile := guardFiles(t, bin, server, "resources:\n  deny: [\"test://static-binary\"]\n  scopes:\n    \"test://watched-*\": [watch]\n")
	const resource = "http://localhost/mcp"
	as := oauthtest.New(t, oauthtest.Options{Audience: []string{resource}, Scopes: []string{"watch"}})
	args := []string{"--oauth-issuer", as.URL, "--resource-url", resource, "--policy", policyFile, "--pin-file", lockFile}
	for _, era := range []string{"auto", "legacy"} {
		t.Run(era, func(t *testing.T) {
			listenGuards(t, as, startBridgeBinary(t, bin, append(args, "--child-era", era, "--", server)...), resource)
		})
	}
}

func listenGuards(t *testing.T, as *oauthtest.Server, b *bridgeProc, resource string) {
	url := b.url
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	watcher := as.Sign(t, as.Claims("alice", resource, "watch"))
	other := as.Sign(t, as.Claims("bob", resource))

	// The watcher asks for the watched resource, a denied one, and one the
	// pin file does not cover.
	a := openListen(t, ctx, url, watcher, `"w"`, `"notifications":{"resourceSubscriptions":["test://watched-resource","test://static-binary","test://elsewhere"]},`)
	if got := a.ack(t); !slices.Equal(got.ResourceSubscriptions, []string{"test://watched-resource"}) {
		t.Errorf("the watcher's acknowledgment: %+v, want only test://watched-resource", got)
	}
	o := openListen(t, ctx, url, other, `"o"`, `"notifications":{"toolsListChanged":true,"resourceSubscriptions":["test://watched-resource","test://static-text"]},`)
	if got := o.ack(t); !slices.Equal(got.ResourceSubscriptions, []string{"test://static-text"}) || !got.ToolsListChanged {
		t.Errorf("the other caller's acknowledgment: %+v, want test://static-text and toolsListChanged", got)
	}
	// Two updates after the other caller's acknowledgment: the second
	// comes from a tick (3 s apart) after the other caller subscribed.
	for range 2 {
		if m := a.next(t, ctx); m.Method != "notifications/resources/updated" || m.Params.URI != "test://watched-resource" {
			t.Fatalf("the watcher got %+v, want an update of test://watched-resource", m)
		}
	}
	// Then the bridge shuts down, and each subscription ends with a
	// completion result, queued after whatever its stream got before.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		m := o.next(t, ctx)
		if m.Method == "notifications/resources/updated" {
			t.Fatalf("a caller without the scope got an update of %s", m.Params.URI)
		}
		if m.Method == "" {
			if !strings.Contains(m.Raw, `"resultType":"complete"`) {
				t.Fatalf("the other caller's subscription ended with %s", m.Raw)
			}
			break
		}
	}
}

// listenStream is one subscriptions/listen stream of a caller.
type listenStream struct {
	msgs chan listenMsg
}

type listenMsg struct {
	Method string
	Params struct {
		URI           string `json:"uri"`
		Notifications struct {
			ToolsListChanged      bool     `json:"toolsListChanged"`
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"notifications"`
	} `json:"params"`
	Raw string `json:"-"`
}

func openListen(t *testing.T, ctx context.Context, url, token, id, params string) *listenStream {
	t.Helper()
	resp := statelessPostAs(t, ctx, url, token, id, "subscriptions/listen", params)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		t.Fatalf("subscriptions/listen: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &listenStream{msgs: make(chan listenMsg, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m listenMsg
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Errorf("not a message on the listen stream: %q", data)
				continue
			}
			m.Raw = data
			s.msgs <- m
		}
	}()
	t.Cleanup(func() {
		resp.Body.Close()
		<-done
	})
	return s
}

// next returns the stream's next message.
func (s *listenStream) next(t *testing.T, ctx context.Context) listenMsg {
	t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			t.Fatal("the listen stream ended")
		}
		return m
	case <-ctx.Done():
		t.Fatal("nothing on the listen stream")
	}
	return listenMsg{}
}

// ack reads the acknowledgment, the first message, and returns what it
// acknowledges.
func (s *listenStream) ack(t *testing.T) struct {
	ToolsListChanged      bool
	ResourceSubscriptions []string
} {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m := s.next(t, ctx)
	if m.Method != "notifications/subscriptions/acknowledged" {
		t.Fatalf("the first message is %s", m.Raw)
	}
	return struct {
		ToolsListChanged      bool
		ResourceSubscriptions []string
	}{m.Params.Notifications.ToolsListChanged, m.Params.Notifications.ResourceSubscriptions}
}

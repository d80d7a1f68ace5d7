package bridge_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/pool"
)

// A pool's list changes reach every subscriptions/listen of the pool,
// whichever child announces them: with two modern
// children, the listen passes through to one and test_trigger_tool_change
// lands on the other.
func TestStatelessListenTwoChildren(t *testing.T) {
	b, p := startStatelessCommand(t, []string{everythingServer(t)}, pool.Options{Min: 2})
	if _, err := p.Era(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Await(ctxT(t), func(s pool.Stats) bool { return s.Children == 2 }); err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 10)
	c := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callText(t, cs, "test_trigger_tool_change", nil)
	select {
	case <-changed:
	case <-ctxT(t).Done():
		t.Fatal("no notifications/tools/list_changed on the listen stream")
	}
}

// The same with a legacy pool, for a child started after the listen: a
// call parked on the first child (its elicitation unanswered) makes the
// next call that may ask start a second one, whose list change must reach
// the listen.
func TestStatelessListenLaterChild(t *testing.T) {
	b, p := startStatelessCommand(t, []string{everythingServer(t)}, pool.Options{Era: pool.EraLegacy})
	changed := make(chan struct{}, 10)
	asked, release := make(chan struct{}, 1), make(chan struct{})
	c := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: b.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if s := p.Stats(); s.Children != 1 {
		t.Fatalf("after the listen: %+v", s)
	}
	parked := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "test_elicitation", Arguments: map[string]any{"message": "who?"}})
		parked <- err
	}()
	<-asked
	callText(t, cs, "test_trigger_tool_change", nil)
	if s := p.Stats(); s.Children < 2 {
		t.Fatalf("the trigger ran on the listen's child: %+v", s)
	}
	select {
	case <-changed:
	case <-ctxT(t).Done():
		t.Fatal("no notifications/tools/list_changed from the child started after the listen")
	}
	close(release)
	if err := <-parked; err != nil && !strings.Contains(err.Error(), "decline") {
		t.Logf("the parked call: %v", err)
	}
}

// The TypeScript SDK 2.4 client's listen() hears a list change announced
// by the other child of a pool of two.
func TestStatelessListenTwoChildrenTS(t *testing.T) {
	peers := npmPeers(t)
	b, p := startStatelessCommand(t, []string{everythingServer(t)}, pool.Options{Min: 2})
	if _, err := p.Era(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Await(ctxT(t), func(s pool.Stats) bool { return s.Children == 2 }); err != nil {
		t.Fatal(err)
	}
	got := tsClient(t, peers, b.URL, "listen")
	if got["changed"] != true {
		t.Fatalf("the TS client heard no tools/list_changed on its listen: %v", got)
	}
}

package peer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

func message(t testing.TB, data string) jsonrpc.Message {
	t.Helper()
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return jsonrpc.Message{Data: []byte(data), Env: env}
}

// TestSendCompactsPrettyJSON: stdio framing is one message per line, so a
// client's pretty-printed message is compacted on its way to the child.
func TestSendCompactsPrettyJSON(t *testing.T) {
	proc := memchild.New(nil)
	conn := peer.New(proc, newChanRouter(), &peer.Options{Logger: slog.New(slog.DiscardHandler)})
	defer func() { proc.Exit(nil); <-conn.Done() }()
	pretty := "{\r\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"ping\",\n  \"params\": {\"s\": \"a b\"}\n}"
	if err := conn.Send(client("a"), message(t, pretty)); err != nil {
		t.Fatal(err)
	}
	if got, want := heard(t, proc), `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"a b"}}`; got != want {
		t.Fatalf("the child read %s, want %s", got, want)
	}
}

// stuckProcess is a child that never reads its stdin: a write blocks until
// the child is stopped, and says it started on entered.
type stuckProcess struct {
	*memchild.Child
	entered chan struct{}
	stop    chan struct{}
	once    sync.Once
}

type stuckStdin struct{ p *stuckProcess }

func (s stuckStdin) Write(b []byte) (int, error) {
	s.p.entered <- struct{}{}
	<-s.p.stop
	return 0, io.ErrClosedPipe
}
func (s stuckStdin) Close() error { return nil }

func (p *stuckProcess) Stdin() io.WriteCloser { return stuckStdin{p} }
func (p *stuckProcess) Stop(ctx context.Context) error {
	p.once.Do(func() { close(p.stop) })
	return p.Child.Stop(ctx)
}

// TestSendBoundsWaitingBytes: while a child does not read its stdin, Sends
// wait for it only up to MaxQueuedBytes; beyond, they fail at once with
// ErrBusy and nothing of them is registered or written.
func TestSendBoundsWaitingBytes(t *testing.T) {
	proc := &stuckProcess{Child: memchild.New(nil), entered: make(chan struct{}, 1), stop: make(chan struct{})}
	router := newChanRouter()
	conn := peer.New(proc, router, &peer.Options{MaxQueuedBytes: 100, Logger: slog.New(slog.DiscardHandler)})
	first := make(chan error, 1)
	go func() {
		first <- conn.Send(client("a"), message(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":1}}`))
	}()
	<-proc.entered // the first Send is blocked writing
	err := conn.Send(client("b"), message(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"padding":"`+strings.Repeat("x", 40)+`"}}`))
	if !errors.Is(err, peer.ErrBusy) {
		t.Fatalf("a Send beyond MaxQueuedBytes: %v, want ErrBusy", err)
	}
	conn.Close(context.Background())
	if err := <-first; err == nil || errors.Is(err, peer.ErrBusy) {
		t.Fatalf("the blocked Send: %v, want the write error", err)
	}
	<-router.ended
}

// answerBench measures the answer path of one client request: the request
// goes out (Send), its answer of size bytes comes back (the reader's work)
// and reaches the Router. With renamed, another client holds the same id,
// so the answer is copied to restore the client's id.
func answerBench(b *testing.B, size int, renamed bool) {
	proc := memchild.New(nil)
	go func() {
		for range proc.Lines() {
		}
	}()
	conn := peer.New(proc, discardRouter{}, &peer.Options{Logger: slog.New(slog.DiscardHandler)})
	defer func() { proc.Exit(nil); <-conn.Done() }()
	req := message(b, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big"}}`)
	if renamed {
		if err := conn.Send(client("other"), req); err != nil { // holds id 1 on the child
			b.Fatal(err)
		}
	}
	// The child knows a renamed request by a fresh id, one more each time.
	id := 1
	if renamed {
		id = 1 << 30
	}
	answerFor := func(id int) []byte {
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"%s"}]}}`, id, strings.Repeat("x", size)))
	}
	answer := answerFor(id)
	b.SetBytes(int64(len(answer)))
	b.ReportAllocs()
	for b.Loop() {
		if err := conn.Send(client("a"), req); err != nil {
			b.Fatal(err)
		}
		conn.Receive(answer)
		if renamed {
			b.StopTimer()
			id++
			answer = answerFor(id)
			b.StartTimer()
		}
	}
}

type discardRouter struct{}

func (discardRouter) Route(*peer.Message) {}
func (discardRouter) Ended(error)         {}

// BenchmarkAnswer compares an answer passed as it is with one whose id is
// restored (a copy): the cost that collision-only rewriting saves a child
// owned by one client.
func BenchmarkAnswer(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		for _, renamed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dKiB/renamed=%v", size>>10, renamed), func(b *testing.B) { answerBench(b, size, renamed) })
		}
	}
}

// BenchmarkShortCall is the Conn's own work for a short call through an
// interception point that passes everything: the request out (the chain,
// the table, the write), the answer back (the table, the chain, the
// Router). allocs/op counts what a call costs the collector.
func BenchmarkShortCall(b *testing.B) {
	proc := memchild.New(nil)
	go func() {
		for range proc.Lines() {
		}
	}()
	pass := func(next peer.Handler) peer.Handler { return next }
	conn := peer.New(proc, discardRouter{}, &peer.Options{Intercept: pass, Logger: slog.New(slog.DiscardHandler)})
	defer func() { proc.Exit(nil); <-conn.Done() }()
	req := message(b, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`)
	answer := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := conn.Send(client("a"), req); err != nil {
			b.Fatal(err)
		}
		conn.Receive(answer)
	}
}

package session

import (
	"context"
	"errors"
	"testing"
)

// A single-stream session (legacy HTTP+SSE): every message of the server,
// answers included, goes to the one stream in the order written, and Post
// opens no stream of its own. Its end answers what is in flight there.
func TestSingleStream(t *testing.T) {
	checkLeaks(t)
	reg, l := newTestRegistry(t, Options{})
	s, err := reg.CreateWith(context.Background(), "", &CreateOptions{SingleStream: true})
	if err != nil {
		t.Fatal(err)
	}
	<-l.ids
	p := <-l.procs
	if !s.SingleStream() {
		t.Fatal("SingleStream() = false")
	}
	stream, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Detach()
	if r := postMsg(t, s, `{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":"t"}}}`); r != nil {
		t.Fatal("Post opened a stream in a single-stream session")
	}
	postMsg(t, s, `{"jsonrpc":"2.0","id":2,"method":"b"}`)
	p.Read(t)
	p.Read(t)
	for _, line := range []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
	} {
		p.Write(t, line+"\n")
		if got := next(t, stream); got != line {
			t.Fatalf("stream got %s, want %s", got, line)
		}
	}
	if err := s.Answer([]byte(`{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"x"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := next(t, stream); got != `{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"x"}}` {
		t.Fatalf("the front end's answer: %s", got)
	}
	// The stream does not end with the answers: a request in flight at
	// the session's end gets its error there, then the stream ends.
	postMsg(t, s, `{"jsonrpc":"2.0","id":3,"method":"c"}`)
	p.Read(t)
	s.Close(ErrDeleted)
	if got := next(t, stream); got != `{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"session ended: the client ended the session (HTTP DELETE)"}}` {
		t.Fatalf("at the end: %s", got)
	}
	if _, _, err := stream.Next(context.Background()); err == nil {
		t.Fatal("the stream outlived its session")
	}
}

// A retired registry takes no new session and no new request, but lets
// responses and notifications through so that calls in flight can finish;
// its sessions then end with ErrRetired.
func TestRetire(t *testing.T) {
	checkLeaks(t)
	reg, l := newTestRegistry(t, Options{})
	s, p := startSession(t, reg, l)
	call := postMsg(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
	p.Read(t)
	p.Write(t, `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}`+"\n")
	if got := next(t, call); got != `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}` {
		t.Fatalf("server request: %s", got)
	}
	reg.Retire()
	if _, err := reg.Create(context.Background(), ""); !errors.Is(err, ErrRetired) {
		t.Fatalf("Create after Retire: %v", err)
	}
	if _, err := s.Post([]Message{msg(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)}, PostOptions{Resumable: true}); !errors.Is(err, ErrRetired) {
		t.Fatalf("a new request after Retire: %v", err)
	}
	postMsg(t, s, `{"jsonrpc":"2.0","id":"s1","result":{}}`) // the client's answer passes
	if got := p.Read(t); got != `{"jsonrpc":"2.0","id":"s1","result":{}}` {
		t.Fatalf("the server got %s", got)
	}
	p.Write(t, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
	if got := next(t, call); got != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("answer: %s", got)
	}
	if err := reg.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Err(), ErrRetired) {
		t.Fatalf("the session ended with %v, want ErrRetired", s.Err())
	}
}

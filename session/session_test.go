package session

// Session tests with an in-memory child: the test plays the MCP server on
// the other end of two pipes, so that it can misbehave exactly when and how
// a test needs (close stdout and keep running, never answer, write a bare
// CR). Tests of real children live in bridge/ and cmd/bridge/.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/internal/testlog"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// memLauncher hands out in-memory children (the server is the test) and
// lets the test take each one.
type memLauncher struct {
	procs  chan *memchild.Child
	ids    chan string
	paused bool // children start without reading their stdin
}

func newMemLauncher() *memLauncher {
	return &memLauncher{procs: make(chan *memchild.Child, 16), ids: make(chan string, 16)}
}

func (l *memLauncher) Launch(_ context.Context, id string) (peer.Process, error) {
	p := memchild.New(&memchild.Options{ID: "mem 1", Paused: l.paused,
		StopStatus: &sandbox.ExitError{Code: -1, Signal: "killed", Stderr: []string{"mem: stopped"}}})
	l.procs <- p
	l.ids <- id
	return p, nil
}

// newTestRegistry returns a registry of in-memory children, shut down at
// the end of the test. A test outside testing/synctest (whose bubble
// checks this itself) calls checkLeaks before it, so that its check runs
// after the shutdown.
func newTestRegistry(t *testing.T, opts Options) (*Registry, *memLauncher) {
	t.Helper()
	l := newMemLauncher()
	opts.Launcher = l
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := NewRegistry(&opts)
	t.Cleanup(func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r, l
}

func checkLeaks(t *testing.T) { t.Cleanup(func() { goleak.VerifyNone(t) }) }

// msg parses a client message for Post.
func msg(t *testing.T, data string) Message {
	t.Helper()
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		t.Fatalf("jsonrpc.Parse(%s): %v", data, err)
	}
	return Message{Data: []byte(data), Env: env}
}

// postMsg sends one message and returns the reader of its stream (nil for a
// notification or response).
func postMsg(t *testing.T, s *Session, data string) *Reader {
	t.Helper()
	r, err := s.Post([]Message{msg(t, data)}, PostOptions{Resumable: true})
	if err != nil {
		t.Fatalf("Post(%s): %v", data, err)
	}
	return r
}

// next returns the next event of r, failing the test at the stream's end.
func next(t *testing.T, r *Reader) string {
	t.Helper()
	_, data, err := r.Next(context.Background())
	if err != nil {
		t.Fatalf("reading a stream: %v", err)
	}
	return string(data)
}

// startSession creates a session and takes its child.
func startSession(t *testing.T, reg *Registry, l *memLauncher) (*Session, *memchild.Child) {
	t.Helper()
	s, err := reg.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	<-l.ids
	return s, <-l.procs
}

// TestServerCRIsWhiteSpace: a bare CR is JSON white space, and a server
// may put one between tokens; it must not reach the SSE framing, where it
// ends a line.
func TestServerCRIsWhiteSpace(t *testing.T) {
	checkLeaks(t)
	reg, l := newTestRegistry(t, Options{})
	s, p := startSession(t, reg, l)
	r := postMsg(t, s, `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	p.Read(t)
	p.Write(t, "{\"jsonrpc\":\"2.0\",\r\"id\":5,\r\"result\":{\"tools\":[],\"x\":\"a\\rb\"}\r}\r\n")
	got := next(t, r)
	if want := `{"jsonrpc":"2.0", "id":5, "result":{"tools":[],"x":"a\rb"} }`; got != want {
		t.Fatalf("event data %q, want %q", got, want)
	}
	if bytes.ContainsAny([]byte(got), "\r\n") {
		t.Fatalf("event data holds a line break: %q", got)
	}
	if _, _, err := r.Next(context.Background()); err != io.EOF {
		t.Fatalf("the stream must end after its answer, got %v", err)
	}
}

// TestCancelledBeforeItCame: each POST is handled on its own, so a
// client that cancels at once can have its notifications/cancelled
// handled before the POST of the request it names. That request is not
// sent to the server, which would run it for nobody, and its stream ends
// without an answer; the session keeps the latest four such
// cancellations only.
func TestCancelledBeforeItCame(t *testing.T) {
	checkLeaks(t)
	reg, l := newTestRegistry(t, Options{IdleTimeout: -1})
	s, p := startSession(t, reg, l)
	cancel := func(id string) {
		if r := postMsg(t, s, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"`+id+`"}}`); r != nil {
			t.Fatal("a notification opened a stream")
		}
	}
	cancel("call-3")
	r := postMsg(t, s, `{"jsonrpc":"2.0","id":"call-3","method":"tools/call"}`)
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, d, err := r.Next(ctx); err != io.EOF {
		t.Fatalf("the stream of a request cancelled before it came: %q, %v; want its end", d, err)
	}
	// The server reads the next request first: it was sent neither the
	// cancelled one nor the cancellation of a request it never had.
	r = postMsg(t, s, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if got := p.Read(t); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("the server read %s, want the ping", got)
	}
	p.Write(t, `{"jsonrpc":"2.0","id":4,"result":{}}`+"\n")
	if got := next(t, r); got != `{"jsonrpc":"2.0","id":4,"result":{}}` {
		t.Fatalf("answer %s", got)
	}
	// Five cancellations of no request: the oldest is forgotten, and its
	// request (a client that reuses ids breaks the spec, but gets its
	// request run) goes to the server.
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		cancel(id)
	}
	r = postMsg(t, s, `{"jsonrpc":"2.0","id":"a","method":"ping"}`)
	if got := p.Read(t); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("the server read %s, want the ping of the forgotten cancellation", got)
	}
	p.Write(t, `{"jsonrpc":"2.0","id":"a","result":{}}`+"\n")
	if got := next(t, r); !strings.Contains(got, `"id":"a"`) {
		t.Fatalf("answer %s", got)
	}
	// A POST of two requests, one cancelled before it came: the other is
	// sent and answered on the POST's stream.
	r, err := s.Post([]Message{msg(t, `{"jsonrpc":"2.0","id":"e","method":"ping"}`), msg(t, `{"jsonrpc":"2.0","id":6,"method":"ping"}`)}, PostOptions{Resumable: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Read(t); !strings.Contains(got, `"id":6`) {
		t.Fatalf("the server read %s, want the ping of id 6", got)
	}
	p.Write(t, `{"jsonrpc":"2.0","id":6,"result":{}}`+"\n")
	if got := next(t, r); !strings.Contains(got, `"id":6`) {
		t.Fatalf("answer %s", got)
	}
	if _, _, err := r.Next(context.Background()); err != io.EOF {
		t.Fatalf("the stream must end after the one answer: %v", err)
	}
}

// TestStdoutClosedEndsSession: a server that closes its stdout and keeps
// running can answer nothing more. The session ends, its requests in
// flight get an error that says why, and the server is stopped,
// instead of a zombie session waiting for DELETE or idle.
func TestStdoutClosedEndsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1})
		s, p := startSession(t, reg, l)
		r := postMsg(t, s, `{"jsonrpc":"2.0","id":5,"method":"tools/call"}`)
		p.Read(t)
		p.CloseStdout() // stdout closed; the process lives on
		got := next(t, r)
		if !strings.Contains(got, `"id":5`) || !strings.Contains(got, "closed its stdout") {
			t.Fatalf("answer %s, want an error for id 5 saying the server closed its stdout", got)
		}
		<-s.Done()
		<-p.Stopped()
		if !errors.Is(s.Err(), ErrStdoutClosed) {
			t.Fatalf("Err() = %v, want ErrStdoutClosed", s.Err())
		}
		if _, err := reg.Get(s.ID()); err != ErrNotFound {
			t.Fatalf("the session is still registered: %v", err)
		}
	})
}

// TestServerExitReportsStatus: a server that exits (closing its stdout as
// it does) still ends its session with its exit status and stderr.
func TestServerExitReportsStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1})
		s, p := startSession(t, reg, l)
		r := postMsg(t, s, `{"jsonrpc":"2.0","id":5,"method":"tools/call"}`)
		p.Read(t)
		p.Exit(&sandbox.ExitError{Code: 3, Stderr: []string{"crashing on purpose"}})
		got := next(t, r)
		if !strings.Contains(got, "exited with status 3") || !strings.Contains(got, "crashing on purpose") {
			t.Fatalf("answer %s, want the exit status and stderr", got)
		}
		if !errors.Is(s.Err(), ErrServerExited) {
			t.Fatalf("Err() = %v, want ErrServerExited", s.Err())
		}
	})
}

// TestLogsHideSessionID: without tokens the session ID is the session's
// only credential; logs and the launcher (container labels) get a short
// hash of it, unless debug logging is on.
func TestLogsHideSessionID(t *testing.T) {
	checkLeaks(t)
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf testlog.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		reg, l := newTestRegistry(t, Options{Logger: logger})
		s, err := reg.Create(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		launched, p := <-l.ids, <-l.procs
		p.Exit(&sandbox.ExitError{Code: 1})
		<-s.Stopped()
		sum := sha256.Sum256([]byte(s.ID()))
		short := hex.EncodeToString(sum[:4])
		want := short
		if level == slog.LevelDebug {
			want = s.ID()
		}
		if s.LogID() != want || launched != want || LogForm(logger, s.ID()) != want {
			t.Errorf("level %v: LogID %q, launched with %q, LogForm %q; want %q", level, s.LogID(), launched, LogForm(logger, s.ID()), want)
		}
		out := buf.String()
		if !strings.Contains(out, "session="+want) || !strings.Contains(out, "session ended") {
			t.Errorf("level %v: the log does not name the session as %s:\n%s", level, want, out)
		}
		if level != slog.LevelDebug && strings.Contains(out, s.ID()) {
			t.Errorf("level %v: the log shows the session ID:\n%s", level, out)
		}
	}
}

// TestRequestTimeout: a request the server never answers gets a JSON-RPC
// error after the request timeout, and the server a notifications/cancelled
// for it; a late answer is dropped.
func TestRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1, RequestTimeout: time.Minute})
		s, p := startSession(t, reg, l)
		start := time.Now()
		r := postMsg(t, s, `{"jsonrpc":"2.0","id":"call-7","method":"tools/call"}`)
		p.Read(t)
		got := next(t, r)
		if waited := time.Since(start); waited != time.Minute {
			t.Errorf("answered after %s, want the request timeout", waited)
		}
		if !strings.Contains(got, `"id":"call-7"`) || !strings.Contains(got, `"code":-32001`) || !strings.Contains(got, "timed out") {
			t.Fatalf("answer %s, want a timeout error for call-7", got)
		}
		if _, _, err := r.Next(context.Background()); err != io.EOF {
			t.Fatalf("the stream must end after the timeout answer: %v", err)
		}
		cancel := p.Read(t)
		env, err := jsonrpc.Parse([]byte(cancel))
		if err != nil || env.Method != "notifications/cancelled" || env.RequestID != "scall-7" {
			t.Fatalf("the server got %s (%+v, %v), want notifications/cancelled for call-7", cancel, env, err)
		}
		// The late answer goes nowhere, and the session lives on.
		p.Write(t, `{"jsonrpc":"2.0","id":"call-7","result":{}}`+"\n")
		r = postMsg(t, s, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
		p.Read(t)
		p.Write(t, `{"jsonrpc":"2.0","id":8,"result":{}}`+"\n")
		if got := next(t, r); got != `{"jsonrpc":"2.0","id":8,"result":{}}` {
			t.Fatalf("next answer %s", got)
		}
		if s.Err() != nil {
			t.Fatalf("the session ended: %v", s.Err())
		}
	})
}

// TestProgressExtendsRequestTimeout: a progress notification for a
// request restarts its timeout.
func TestProgressExtendsRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1, RequestTimeout: 10 * time.Second})
		s, p := startSession(t, reg, l)
		start := time.Now()
		r := postMsg(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"tok"}}}`)
		p.Read(t)
		for range 3 {
			time.Sleep(8 * time.Second)
			p.Write(t, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1}}`+"\n")
			if got := next(t, r); !strings.Contains(got, "notifications/progress") {
				t.Fatalf("got %s, want the progress notification", got)
			}
		}
		got := next(t, r)
		if waited := time.Since(start); waited != 34*time.Second || !strings.Contains(got, "timed out") {
			t.Fatalf("answer %s after %s, want a timeout 10 s after the last progress (34 s)", got, waited)
		}
	})
}

// TestInitializeTimeout: a command that never answers initialize (cat
// echoes it) ends the session with an error naming the server and its
// last stderr lines, and is stopped.
func TestInitializeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1, InitializeTimeout: 30 * time.Second})
		s, p := startSession(t, reg, l)
		r := postMsg(t, s, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
		p.Read(t)
		got := next(t, r)
		for _, want := range []string{`"id":0`, "did not answer initialize", "mem 1", "mem: stopped", "30s"} {
			if !strings.Contains(got, want) {
				t.Errorf("answer %s does not say %q", got, want)
			}
		}
		<-p.Stopped()
		<-s.Done()
		if !errors.Is(s.Err(), ErrInitTimeout) {
			t.Fatalf("Err() = %v", s.Err())
		}
	})
}

// TestMaxRequests: requests in flight per session are bounded.
func TestMaxRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1, MaxRequests: 2})
		s, p := startSession(t, reg, l)
		postMsg(t, s, `{"jsonrpc":"2.0","id":1,"method":"a"}`)
		r2 := postMsg(t, s, `{"jsonrpc":"2.0","id":2,"method":"a"}`)
		if _, err := s.Post([]Message{msg(t, `{"jsonrpc":"2.0","id":3,"method":"a"}`)}, PostOptions{Resumable: true}); !errors.Is(err, ErrTooManyRequests) {
			t.Fatalf("a third request: %v, want ErrTooManyRequests", err)
		}
		// Notifications still pass; an answer makes room.
		if r, err := s.Post([]Message{msg(t, `{"jsonrpc":"2.0","method":"notifications/x"}`)}, PostOptions{Resumable: true}); r != nil || err != nil {
			t.Fatalf("a notification: %v", err)
		}
		p.Read(t)
		p.Read(t)
		p.Write(t, `{"jsonrpc":"2.0","id":2,"result":{}}`+"\n")
		next(t, r2)
		postMsg(t, s, `{"jsonrpc":"2.0","id":3,"method":"a"}`)
	})
}

// TestStdinBudget: a server that does not read its stdin makes POSTs fail
// at once beyond MaxQueuedBytes, instead of each waiting with its body.
func TestStdinBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1, MaxQueuedBytes: 100})
		l.paused = true
		s, err := reg.Create(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		<-l.ids
		p := <-l.procs
		one := `{"jsonrpc":"2.0","method":"notifications/a","params":{"x":"` + strings.Repeat("y", 20) + `"}}`
		done := make(chan error)
		go func() {
			_, err := s.Post([]Message{msg(t, one)}, PostOptions{Resumable: true})
			done <- err
		}()
		synctest.Wait() // that POST waits in write
		_, err = s.Post([]Message{msg(t, one)}, PostOptions{Resumable: true})
		if !errors.Is(err, ErrStdinFull) {
			t.Fatalf("a second POST while the first waits: %v, want ErrStdinFull", err)
		}
		p.Resume()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		p.Read(t)
		if _, err := s.Post([]Message{msg(t, one)}, PostOptions{Resumable: true}); err != nil {
			t.Fatalf("once written, the budget is free again: %v", err)
		}
	})
}

// TestIdleTimeoutSparesRunningCall: a call running longer than the idle
// timeout keeps its session.
func TestIdleTimeoutSparesRunningCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: 5 * time.Second})
		s, p := startSession(t, reg, l)
		r := postMsg(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
		p.Read(t)
		time.Sleep(9 * time.Second)
		p.Write(t, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
		if got := next(t, r); got != `{"jsonrpc":"2.0","id":1,"result":{}}` {
			t.Fatalf("answer %s", got)
		}
		if s.Err() != nil {
			t.Fatalf("the session ended during the call: %v", s.Err())
		}
		// Idle again: it ends 5 s after the call's end.
		<-s.Done()
		if !errors.Is(s.Err(), ErrIdle) {
			t.Fatalf("Err() = %v", s.Err())
		}
	})
}

// TestLaunchErrorIsErrLaunch: a launcher's error reaches the caller as
// ErrLaunch (which the front end maps to 502), with its own text and
// without a second copy of ErrLaunch's.
func TestLaunchErrorIsErrLaunch(t *testing.T) {
	cause := errors.New("cannot start the MCP server: exec: \"nope\": executable file not found in $PATH")
	reg := NewRegistry(&Options{
		Launcher: LauncherOf(failingLauncher{cause}),
		Logger:   slog.New(slog.DiscardHandler),
	})
	defer reg.Shutdown(context.Background())
	_, err := reg.Create(context.Background(), "")
	if !errors.Is(err, ErrLaunch) || !errors.Is(err, cause) {
		t.Fatalf("Create: %v; want ErrLaunch wrapping the launcher's error", err)
	}
	if strings.Count(err.Error(), "cannot start the MCP server") != 1 || reg.Len() != 0 {
		t.Fatalf("Create: %q, %d sessions", err, reg.Len())
	}
}

// failingLauncher fails every launch; its processes have a type of their
// own, as sandbox's do, so that LauncherOf adapts it.
type failingLauncher struct{ err error }

func (l failingLauncher) Launch(context.Context, string) (*memchild.Child, error) { return nil, l.err }

// TestDuplicateIDLeavesNoStream: a POST refused for an id already in
// flight (here twice in one batch) sends nothing and leaves no stream in
// the session's log: the stream it opened for its answers is freed.
func TestDuplicateIDLeavesNoStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, l := newTestRegistry(t, Options{IdleTimeout: -1})
		s, _ := startSession(t, reg, l)
		_, _, before := s.Log().Stats()
		batch := []Message{msg(t, `{"jsonrpc":"2.0","id":1,"method":"a"}`), msg(t, `{"jsonrpc":"2.0","id":1,"method":"b"}`)}
		for _, resumable := range []bool{true, false} {
			if r, err := s.Post(batch, PostOptions{Resumable: resumable}); r != nil || !errors.Is(err, ErrDuplicateID) {
				t.Fatalf("a batch with one id twice: %v, %v; want ErrDuplicateID", r, err)
			}
			if _, _, after := s.Log().Stats(); after != before {
				t.Fatalf("resumable %v: %d streams in the log after the refused POST, %d before", resumable, after, before)
			}
		}
		if n := reg.inflight.Load(); n != 0 {
			t.Fatalf("%d requests in flight after the refused POSTs", n)
		}
	})
}

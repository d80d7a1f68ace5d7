package peer_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

var update = flag.Bool("update", false, "rewrite the expected lines of testdata/transcripts/*.txtar with what happened")

// TestTranscripts plays each testdata/transcripts/*.txtar: clients and a
// scripted child exchange messages through a Conn, step by step, and every
// message that comes out is compared with the script.
//
// The "script" file holds one step per line ("#" starts a comment):
//
//	A> MSG        client A (any word) sends MSG (Conn.Send with origin "A")
//	A! ERR        client A sends MSG; Send fails with an error containing ERR
//	             (the next line holds the message: "A> MSG")
//	child< MSG    the child reads MSG next, byte for byte
//	child> MSG    the child writes MSG
//	child exit    the child exits (its stdout ends)
//	A< MSG        the Router gets MSG next, addressed to client A
//	router< MSG   the Router gets MSG next, addressed to no client
//	own> N METHOD PARAMS   the bridge starts its own call N (Conn.Call)
//	own cancel N  the bridge gives up call N (its context ends)
//	own< N RESULT call N returns RESULT (the result, or "error: ..." )
//	ended< ERR    the Router is told the connection ended, with ERR
//
// The "options" file sets Options: "maxline N", "deny TOOL" (an
// interceptor refuses tools/call of TOOL), "drop METHOD" (one drops the
// child's notifications of METHOD), "redact WORD" (one replaces WORD in
// what the child sends), "log" (an interceptor records
// every message it sees as "seen< ..." lines, checked at the end against
// the "seen" file).
//
// With -update, the lines the Conn produced (child<, A<, router<, own<,
// ended<, and the seen file) are rewritten from what happened.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/transcripts/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			runTranscript(t, file)
		})
	}
}

func runTranscript(t *testing.T, file string) {
	ar, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]*txtar.File{}
	for i := range ar.Files {
		sections[ar.Files[i].Name] = &ar.Files[i]
	}
	script := sections["script"]
	if script == nil {
		t.Fatal("no script section")
	}
	opts := &peer.Options{Logger: slog.New(slog.DiscardHandler)}
	seen := new(seenLog)
	var interceptors []peer.Interceptor
	if o := sections["options"]; o != nil {
		for _, line := range strings.Split(strings.TrimSpace(string(o.Data)), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "maxline":
				opts.MaxMessageBytes, _ = strconv.Atoi(f[1])
			case len(f) == 2 && f[0] == "deny":
				interceptors = append(interceptors, denyTool(f[1]))
			case len(f) == 2 && f[0] == "drop":
				interceptors = append(interceptors, dropFromChild(f[1]))
			case len(f) == 2 && f[0] == "redact":
				interceptors = append(interceptors, redact(f[1]))
			case len(f) == 1 && f[0] == "log":
				interceptors = append(interceptors, recordAll(seen))
			case len(f) > 0:
				t.Fatalf("unknown option %q", line)
			}
		}
	}
	if len(interceptors) > 0 {
		opts.Intercept = peer.Chain(interceptors...)
	}

	proc := memchild.New(nil)
	router := newChanRouter()
	conn := peer.New(proc, router, opts)
	calls := map[string]chan string{}
	cancels := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
		proc.Exit(nil)
		<-conn.Done()
	}()

	lines := strings.Split(string(script.Data), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		step := strings.TrimSpace(line)
		if step == "" || strings.HasPrefix(step, "#") {
			out = append(out, line)
			continue
		}
		who, rest, _ := strings.Cut(step, " ")
		check := func(got string) {
			t.Helper()
			if *update {
				out = append(out, who+" "+got)
				return
			}
			out = append(out, line)
			if got != rest {
				t.Fatalf("%s:%d: got\n\t%s %s\nwant\n\t%s", file, i+1, who, got, step)
			}
		}
		switch {
		case who == "child<":
			check(heard(t, proc))
		case who == "child>":
			proc.Say(t, rest)
			out = append(out, line)
		case step == "child exit":
			proc.Exit(nil)
			out = append(out, line)
		case who == "router<" || (strings.HasSuffix(who, "<") && who != "own<" && who != "ended<"):
			m := router.next(t)
			name := "router<"
			if m.origin != nil {
				name = string(m.origin.(client)) + "<"
			}
			if name != who && !*update {
				t.Fatalf("%s:%d: %s got %s, want it for %s", file, i+1, name, m.data, who)
			}
			who = name
			check(m.data)
		case who == "ended<":
			select {
			case err := <-router.ended:
				check(err.Error())
			case <-conn.Done():
				check((<-router.ended).Error())
			}
		case who == "own>":
			f := strings.SplitN(rest, " ", 3)
			var params any
			if len(f) == 3 {
				params = json.RawMessage(f[2])
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancels[f[0]] = cancel
			ch := make(chan string, 1)
			calls[f[0]] = ch
			go func() {
				res, err := conn.Call(ctx, f[1], params)
				if err != nil {
					ch <- "error: " + err.Error()
					return
				}
				ch <- string(res)
			}()
			out = append(out, line)
		case step == "own cancel "+strings.TrimPrefix(step, "own cancel "):
			cancels[strings.TrimPrefix(step, "own cancel ")]()
			out = append(out, line)
		case who == "own<":
			name, _, _ := strings.Cut(rest, " ")
			got := <-calls[name]
			who, rest = "own< "+name, strings.TrimPrefix(rest, name+" ")
			check(got)
		case strings.HasSuffix(who, ">"):
			origin := strings.TrimSuffix(who, ">")
			if err := send(conn, origin, rest); err != nil {
				t.Fatalf("%s:%d: Send: %v", file, i+1, err)
			}
			out = append(out, line)
		case strings.HasSuffix(who, "!"):
			// "A! ERR" then "A> MSG": the Send must fail.
			i++
			msg := strings.TrimSpace(lines[i])
			_, data, _ := strings.Cut(msg, " ")
			err := send(conn, strings.TrimSuffix(who, "!"), data)
			got := "<nil>"
			if err != nil {
				got = err.Error()
			}
			if !*update && !strings.Contains(got, rest) {
				t.Fatalf("%s:%d: Send: %s, want an error containing %q", file, i, got, rest)
			}
			out = append(out, line, lines[i])
		default:
			t.Fatalf("%s:%d: unknown step %q", file, i+1, step)
		}
	}
	select {
	case m := <-router.msgs:
		t.Errorf("%s: the router got more than the script says: %s", file, m.data)
	default:
	}
	if f := sections["seen"]; f != nil || len(seen.lines) > 0 {
		got := strings.Join(seen.get(), "\n") + "\n"
		if *update {
			if f == nil {
				ar.Files = append(ar.Files, txtar.File{Name: "seen"})
				f = &ar.Files[len(ar.Files)-1]
			}
			f.Data = []byte(got)
		} else if string(f.Data) != got {
			t.Errorf("%s: the interceptor saw\n%s\nwant\n%s", file, got, f.Data)
		}
	}
	if *update {
		script.Data = []byte(strings.Join(out, "\n"))
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func send(conn *peer.Conn, origin, data string) error {
	env, err := jsonrpc.Parse([]byte(data))
	if err != nil {
		return fmt.Errorf("the script's message does not parse: %w", err)
	}
	return conn.Send(client(origin), jsonrpc.Message{Data: []byte(data), Env: env})
}

// denyTool refuses tools/call of one tool, reading its name from the
// envelope only.
func denyTool(tool string) peer.Interceptor {
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if m.Dir == peer.ToChild && m.Env.Method == "tools/call" && m.Env.Name(m.Data) == tool {
				return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tool " + strconv.Quote(tool) + " is not allowed"}
			}
			return next(m)
		}
	}
}

// dropFromChild drops the child's notifications of one method.
func dropFromChild(method string) peer.Interceptor {
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindNotification && m.Method == method {
				return nil
			}
			return next(m)
		}
	}
}

// redact replaces a word in what the child sends with "[redacted]".
func redact(word string) peer.Interceptor {
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if m.Dir == peer.FromChild && strings.Contains(string(m.Data), word) {
				if err := m.Replace([]byte(strings.ReplaceAll(string(m.Data), word, "[redacted]"))); err != nil {
					return err
				}
			}
			return next(m)
		}
	}
}

// recordAll records every message it sees with its direction, origin and
// method, and passes it on.
func recordAll(seen *seenLog) peer.Interceptor {
	return func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			origin := "-"
			switch {
			case m.Own:
				origin = "own"
			case m.Origin != nil:
				origin = string(m.Origin.(client))
			}
			seen.add(fmt.Sprintf("%s %s %s %s", m.Dir, origin, m.Method, m.Data))
			err := next(m)
			var rpcErr *jsonrpc.Error
			if errors.As(err, &rpcErr) {
				seen.add("refused: " + rpcErr.Message)
			}
			return err
		}
	}
}

// seenLog is what recordAll saw, from the sender's and the reader's
// goroutines.
type seenLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *seenLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *seenLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

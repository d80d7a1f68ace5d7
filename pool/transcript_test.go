package pool

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/mcp-bridge/mcp-bridge/internal/memchild"
	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
)

var update = flag.Bool("update", false, "rewrite the expected lines of testdata/transcripts/*.txtar with what happened")

// TestTranscripts plays each testdata/transcripts/*.txtar: clients of
// revision 2026-07-28 send requests to a Pool whose children are scripted
// (in memory), step by step, and every message that comes out, to a child
// or to a client, is compared with the script.
//
// The "script" file holds one step per line ("#" starts a comment):
//
//	caps A JSON   client A (any word) declares these capabilities
//	              (_meta's clientCapabilities) in its requests from now on
//	A> MSG        client A sends MSG (Pool.Serve, on a goroutine of its own)
//	A< MSG        client A gets MSG next: a message the child sent for its
//	              request (progress, a log), or the answer
//	A! ERR        Serve returned the error ERR to client A
//	childN< MSG   child N (numbered from 1 as they start) reads MSG next
//	childN> MSG   child N writes MSG
//	childN exit   child N exits
//
// A requestState in what a client gets is written $STATE, and $STATE in
// what a client sends is the last one it got: it is signed, with a random
// ID and an expiry, so no two runs agree on it.
//
// The "options" file sets Options: "era legacy" or "era modern" (no
// probe), "max N". Other options are fixed so that nothing happens that
// the script does not say: no children kept running (Min), one per core
// with one core (no growth for busy children), no settling time and no
// keep-alive.
//
// With -update, the lines the pool produced (childN< and A<, A!) are
// rewritten from what happened.
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

// stateValue finds a requestState's value in what a client gets.
var stateValue = regexp.MustCompile(`"requestState":"[^"]*"`)

// stepWait bounds each wait of a transcript for what the script says
// comes next.
const stepWait = 10 * time.Second

// transcriptClient is one client of a transcript.
type transcriptClient struct {
	caps  json.RawMessage
	state string      // the last requestState it got
	out   chan string // what it gets, in order: messages, answers, "! err"
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
	launched := make(chan *memchild.Child, 16)
	opts := Options{
		Min:       -1,
		Cores:     1,
		Settle:    -1,
		KeepAlive: -1,
		Secret:    []byte("0123456789abcdef0123456789abcdef"),
		Logger:    slog.New(slog.DiscardHandler),
		Launch: func(_ context.Context, name string) (peer.Process, error) {
			c := memchild.New(&memchild.Options{ID: name})
			launched <- c
			return c, nil
		},
	}
	if o := sections["options"]; o != nil {
		for _, line := range strings.Split(strings.TrimSpace(string(o.Data)), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "era":
				if opts.Era, err = ParseEra(f[1]); err != nil {
					t.Fatal(err)
				}
			case len(f) == 2 && f[0] == "max":
				opts.Max, _ = strconv.Atoi(f[1])
			case len(f) > 0:
				t.Fatalf("unknown option %q", line)
			}
		}
	}
	p, err := New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var serving sync.WaitGroup
	defer func() {
		cancel()
		serving.Wait()
		closeCtx, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		if err := p.Close(closeCtx); err != nil {
			t.Error(err)
		}
	}()

	var children []*memchild.Child
	child := func(n int) *memchild.Child {
		t.Helper()
		for len(children) < n {
			select {
			case c := <-launched:
				children = append(children, c)
			case <-time.After(stepWait):
				t.Fatalf("child %d did not start", n)
			}
		}
		return children[n-1]
	}
	clients := map[string]*transcriptClient{}
	client := func(name string) *transcriptClient {
		c := clients[name]
		if c == nil {
			c = &transcriptClient{out: make(chan string, 64)}
			clients[name] = c
		}
		return c
	}

	lines := strings.Split(string(script.Data), "\n")
	var out []string
	for i, line := range lines {
		step := strings.TrimSpace(line)
		if step == "" || strings.HasPrefix(step, "#") {
			out = append(out, line)
			continue
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s:%d: %s\n\t%s", file, i+1, step, fmtf(format, args...))
		}
		who, rest, _ := strings.Cut(step, " ")
		check := func(prefix, got string) {
			t.Helper()
			if *update {
				out = append(out, prefix+" "+got)
				return
			}
			out = append(out, line)
			if prefix+" "+got != step {
				fail("got\n\t%s %s", prefix, got)
			}
		}
		name, isChild := strings.CutPrefix(who, "child")
		n := 0
		if isChild {
			n, err = strconv.Atoi(strings.TrimRight(name, "<>"))
			isChild = err == nil && n > 0
		}
		switch {
		case isChild && strings.HasSuffix(who, "<"):
			select {
			case got, ok := <-child(n).Lines():
				if !ok {
					fail("the child's stdin ended")
				}
				check(who, got)
			case <-time.After(stepWait):
				fail("the child read nothing")
			}
		case isChild && strings.HasSuffix(who, ">"):
			child(n).Say(t, rest)
			out = append(out, line)
		case strings.HasPrefix(step, "child") && strings.HasSuffix(step, " exit"):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(step, "child"), " exit"))
			if err != nil {
				fail("which child?")
			}
			child(n).Exit(nil)
			out = append(out, line)
		case who == "caps":
			name, caps, _ := strings.Cut(rest, " ")
			client(name).caps = json.RawMessage(caps)
			out = append(out, line)
		case strings.HasSuffix(who, ">"):
			c := client(strings.TrimSuffix(who, ">"))
			data := []byte(strings.ReplaceAll(rest, "$STATE", c.state))
			env, err := jsonrpc.Parse(data)
			if err != nil {
				fail("the script's message does not parse: %v", err)
			}
			req := &Request{Principal: "alice", Msg: jsonrpc.Message{Data: data, Env: env}, Caps: c.caps}
			serving.Add(1)
			go func() {
				defer serving.Done()
				ans, err := p.Serve(ctx, req, func(m []byte) error { c.out <- string(m); return nil })
				if err != nil {
					c.out <- "! " + err.Error()
					return
				}
				c.out <- string(ans)
			}()
			out = append(out, line)
		case strings.HasSuffix(who, "<") || strings.HasSuffix(who, "!"):
			name := strings.TrimRight(who, "<!")
			c := client(name)
			select {
			case got := <-c.out:
				if e, ok := strings.CutPrefix(got, "! "); ok {
					check(name+"!", e)
					break
				}
				if s := stateValue.FindString(got); s != "" {
					c.state = strings.TrimSuffix(strings.TrimPrefix(s, `"requestState":"`), `"`)
					got = stateValue.ReplaceAllString(got, `"requestState":"$$STATE"`)
				}
				check(name+"<", got)
			case <-time.After(stepWait):
				fail("client %s got nothing", name)
			}
		default:
			fail("unknown step")
		}
	}
	for name, c := range clients {
		select {
		case m := <-c.out:
			t.Errorf("%s: client %s got more than the script says: %s", file, name, m)
		default:
		}
	}
	for i, c := range children {
		select {
		case l, ok := <-c.Lines():
			if ok {
				t.Errorf("%s: child %d read more than the script says: %s", file, i+1, l)
			}
		default:
		}
	}
	if *update {
		script.Data = []byte(strings.Join(out, "\n"))
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fmtf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

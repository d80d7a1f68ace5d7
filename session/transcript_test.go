package session

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the expected lines of testdata/transcripts/*.txtar with what happened")

// TestTranscripts plays each testdata/transcripts/*.txtar against one
// session whose server is a scripted child, without HTTP: a client posts
// messages and reads the streams the session opens for them, the child
// reads and writes lines, and every message that comes out is compared
// with the script. The "script" file holds one step per line:
//
//	post N> MSG   the client posts MSG (resumable stream); N names its stream
//	json N> MSG   the same with a stream that is not resumable
//	post> MSG     the client posts MSG, which opens no stream
//	listen N      the client opens the standalone stream (GET), named N
//	N< MSG        stream N's next event is MSG
//	N end         stream N ends (after its events)
//	child< MSG    the child reads MSG next
//	child> MSG    the child writes MSG
//	child exit    the child exits
//	close REASON  the session is closed (e.g. deleted)
//	ended< ERR    the session has ended, with ERR
//
// With -update, the lines the session produced (child<, N<) are rewritten
// from what happened.
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
	var script *txtar.File
	for i := range ar.Files {
		if ar.Files[i].Name == "script" {
			script = &ar.Files[i]
		}
	}
	if script == nil {
		t.Fatal("no script section")
	}
	reg, l := newTestRegistry(t, Options{})
	sess, proc := startSession(t, reg, l)
	readers := map[string]*Reader{}
	defer func() {
		for _, r := range readers {
			r.Detach()
		}
	}()

	lines := strings.Split(string(script.Data), "\n")
	var out []string
	for i, line := range lines {
		step := strings.TrimSpace(line)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s:%d: %s: %s", file, i+1, step, strings.TrimSpace(fmtf(format, args...)))
		}
		if step == "" || strings.HasPrefix(step, "#") {
			out = append(out, line)
			continue
		}
		who, rest, _ := strings.Cut(step, " ")
		check := func(prefix, got, want string) {
			t.Helper()
			if *update {
				out = append(out, prefix+got)
				return
			}
			out = append(out, line)
			if got != want {
				fail("got %s", got)
			}
		}
		switch {
		case who == "child<":
			check("child< ", proc.Read(t), rest)
		case who == "child>":
			proc.Write(t, rest+"\n")
			out = append(out, line)
		case step == "child exit":
			proc.Exit(nil)
			out = append(out, line)
		case who == "post>":
			if r, err := sess.Post([]Message{msg(t, rest)}, PostOptions{Resumable: true}); err != nil || r != nil {
				fail("Post: %v, %v", r, err)
			}
			out = append(out, line)
		case who == "post" || who == "json":
			name, data, _ := strings.Cut(rest, "> ")
			r, err := sess.Post([]Message{msg(t, data)}, PostOptions{Resumable: who == "post"})
			if err != nil || r == nil {
				fail("Post: %v, %v", r, err)
			}
			readers[name] = r
			out = append(out, line)
		case who == "listen":
			r, err := sess.Listen()
			if err != nil {
				fail("Listen: %v", err)
			}
			readers[rest] = r
			out = append(out, line)
		case strings.HasSuffix(who, "<") && who != "ended<":
			r := readers[strings.TrimSuffix(who, "<")]
			_, data, err := nextEvent(r)
			if err != nil {
				fail("Next: %v", err)
			}
			check(who+" ", string(data), rest)
		case rest == "end":
			r := readers[who]
			if _, data, err := nextEvent(r); err != io.EOF {
				fail("the stream goes on: %s, %v", data, err)
			}
			out = append(out, line)
		case who == "close":
			sess.Close(errors.New(rest))
			out = append(out, line)
		case who == "ended<":
			<-sess.Done()
			check("ended< ", sess.Err().Error(), rest)
		default:
			fail("unknown step")
		}
	}
	if *update {
		script.Data = []byte(strings.Join(out, "\n"))
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// nextEvent reads the next event of a stream, failing after 10s.
func nextEvent(r *Reader) (uint64, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Next(ctx)
}

func fmtf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

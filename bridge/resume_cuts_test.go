package bridge_test

// The property test: random connection cuts under concurrent calls.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// TestResumeRandomCuts is the property test: many concurrent calls on one
// session, every connection (the POST streams, their resumptions and the
// standalone GET stream) cut at a random byte. Every answer must arrive
// exactly once, every progress notification exactly once and in order,
// every log message exactly once on exactly one stream, and every event ID
// must be unique in the session and name its stream and position.
func TestResumeRandomCuts(t *testing.T) {
	seed := rsSeed(t)
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	resp := c.post(ctx, `{"jsonrpc":"2.0","id":"lvl","method":"logging/setLevel","params":{"level":"debug"}}`)
	if _, err := rsReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("logging/setLevel: %s %v", resp.Status, err)
	}
	resp.Body.Close()

	// The standalone stream, cut and resumed like the others, until the
	// test has every log message it expects.
	type logged struct {
		text, id string
	}
	standalone := make(chan logged, 1000)
	getCtx, stopGet := context.WithCancel(ctx)
	getDone := make(chan error, 1)
	var getStream *rsStream
	go func() {
		rng := rand.New(rand.NewPCG(seed, 1<<32))
		resp, err := c.get(getCtx, "")
		if err != nil || resp.StatusCode != http.StatusOK {
			getDone <- fmt.Errorf("opening the standalone stream: %v %v", err, resp)
			return
		}
		st, err := c.rsFollow(getCtx, resp, func() int64 { return rng.Int64N(600) },
			func(e rsEvent) {
				if m, err := rsParse(e.Data); err == nil && m.Method == "notifications/message" {
					standalone <- logged{fmt.Sprint(m.Params.Data), e.ID}
				}
			},
			func([]rsEvent) bool { return false }) // it never ends by itself
		getStream = st
		getDone <- err
	}()

	const calls, workers = 48, 8
	type result struct {
		id  int
		st  *rsStream
		err error
	}
	results := make(chan result, calls)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for id := range jobs {
				rng := rand.New(rand.NewPCG(seed, uint64(id)))
				var resp *http.Response
				var err error
				switch id % 3 {
				case 0:
					resp, err = c.callE(ctx, id, "progress", map[string]any{"n": id % 17}, "tok-"+strconv.Itoa(id))
				case 1:
					resp, err = c.callE(ctx, id, "log", map[string]any{"text": "log-" + strconv.Itoa(id)}, "")
				default:
					resp, err = c.callE(ctx, id, "echo", map[string]any{"text": "echo-" + strconv.Itoa(id)}, "")
				}
				if err != nil {
					results <- result{id, nil, err}
					continue
				}
				st, err := c.rsFollow(ctx, resp, func() int64 { return rng.Int64N(700) }, nil, rsAnswered(id))
				results <- result{id, st, err}
			}
		})
	}
	for id := 1; id <= calls; id++ {
		jobs <- id
	}
	close(jobs)
	wg.Wait()
	close(results)

	streams := map[string]int{} // stream -> call
	ids := map[string]string{}  // event ID -> data
	wantLogs := map[string]bool{}
	gotLogs := map[string]string{} // text -> event ID
	cuts, resumes := 0, 0
	for r := range results {
		if r.err != nil {
			t.Errorf("call %d: %v (seed %d)", r.id, r.err, seed)
			continue
		}
		cuts += r.st.cuts
		resumes += r.st.resumes
		if other, dup := streams[r.st.stream]; dup {
			t.Errorf("calls %d and %d got the same stream %s", r.id, other, r.st.stream)
		}
		streams[r.st.stream] = r.id
		answers, progress := 0, 0.0
		for i, e := range r.st.events {
			if _, dup := ids[e.ID]; dup {
				t.Errorf("event ID %s delivered twice in the session", e.ID)
			}
			ids[e.ID] = e.Data
			m, err := rsParse(e.Data)
			if err != nil {
				t.Errorf("call %d: event %s is not JSON: %q", r.id, e.ID, e.Data)
				continue
			}
			switch {
			case m.Method == "notifications/progress":
				if m.Params.ProgressToken != "tok-"+strconv.Itoa(r.id) || m.Params.Progress != progress+1 {
					t.Errorf("call %d: progress %v of %v after %v", r.id, m.Params.Progress, m.Params.ProgressToken, progress)
				}
				progress = m.Params.Progress
			case m.Method == "notifications/message":
				text := fmt.Sprint(m.Params.Data)
				if prev, dup := gotLogs[text]; dup {
					t.Errorf("log %q delivered twice: %s and %s", text, prev, e.ID)
				}
				gotLogs[text] = e.ID
			case m.Method == "":
				answers++
				if string(m.ID) != strconv.Itoa(r.id) {
					t.Errorf("call %d's stream carries the answer to %s", r.id, m.ID)
				}
				if i != len(r.st.events)-1 {
					t.Errorf("call %d: events after its answer", r.id)
				}
				want := map[int]string{0: "sent " + strconv.Itoa(r.id%17), 1: "logged", 2: "echo-" + strconv.Itoa(r.id)}[r.id%3]
				if m.text() != want {
					t.Errorf("call %d answered %q, want %q (%s)", r.id, m.text(), want, e.Data)
				}
			default:
				t.Errorf("call %d: unexpected message %s", r.id, e.Data)
			}
		}
		if answers != 1 {
			t.Errorf("call %d got %d answers", r.id, answers)
		}
		if r.id%3 == 0 && progress != float64(r.id%17) {
			t.Errorf("call %d got progress up to %v, want %d", r.id, progress, r.id%17)
		}
		if r.id%3 == 1 {
			wantLogs["log-"+strconv.Itoa(r.id)] = true
		}
	}
	// Every log message went to its call's stream or to the standalone
	// stream; those of the standalone stream must all arrive, once.
	missing := 0
	for text := range wantLogs {
		if _, ok := gotLogs[text]; !ok {
			missing++
		}
	}
	for missing > 0 {
		select {
		case l := <-standalone:
			if prev, dup := gotLogs[l.text]; dup {
				t.Errorf("log %q delivered twice: %s and %s (seed %d)", l.text, prev, l.id, seed)
				continue
			}
			if !wantLogs[l.text] {
				t.Errorf("unexpected log %q on the standalone stream", l.text)
				continue
			}
			gotLogs[l.text] = l.id
			missing--
		case err := <-getDone:
			t.Fatalf("the standalone stream ended with %v while %d log messages were missing (seed %d)", err, missing, seed)
		case <-ctx.Done():
			t.Fatalf("%d log messages never arrived (seed %d)", missing, seed)
		}
	}
	stopGet()
	if err := <-getDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the standalone stream failed: %v (seed %d)", err, seed)
	}
	if getStream == nil {
		t.Fatal("the standalone stream was never read")
	}
	if _, dup := streams[getStream.stream]; dup {
		t.Errorf("the standalone stream %s is also a call's stream", getStream.stream)
	}
	close(standalone)
	for l := range standalone {
		t.Errorf("log %q delivered again on the standalone stream (%s)", l.text, l.id)
	}
	if cuts < 10 || resumes == 0 {
		t.Errorf("only %d cuts and %d resumptions: the test did not exercise resumption (seed %d)", cuts, resumes, seed)
	}
	t.Logf("%d calls, %d cuts, %d resumptions of POST streams; standalone stream: %d cuts", calls, cuts, resumes, getStream.cuts)
}

package bridge_test

// Resumable streams (issue 3), end to end through real children and real
// TCP connections: event IDs, replay with Last-Event-ID, the 400 and 410
// refusals, disconnects that are not cancellations, priming by revision,
// polling, bounded logs under a flood, and three independent clients that
// reconnect by themselves: raw HTTP cut at random points, the official Go
// SDK's StreamableClientTransport, and github.com/r3labs/sse/v2.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"

	"github.com/mcp-bridge/mcp-bridge/bridge"
	"github.com/mcp-bridge/mcp-bridge/session"
)

var rsSeedFlag = flag.Uint64("resume.seed", 0, "seed of the random connection cuts in the resume tests (0: a new seed)")

// rsSeed returns the seed of a randomized test and logs it. The seed fixes
// where connections are cut (byte offsets, event counts); the interleaving
// of concurrent calls still varies from run to run.
func rsSeed(t testing.TB) uint64 {
	seed := *rsSeedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("random cuts use seed %d (rerun with -resume.seed=%d)", seed, seed)
	return seed
}

// ---- a raw Streamable HTTP client -------------------------------------

// rsClient speaks Streamable HTTP by hand, so that a test controls every
// connection and sees every byte.
type rsClient struct {
	t       testing.TB
	url     string
	hc      *http.Client
	sid     string
	version string // negotiated; sent as MCP-Protocol-Version
}

// rsOpen starts a session of the given revision and completes the
// handshake.
func rsOpen(t testing.TB, url, version string) *rsClient {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	c := &rsClient{t: t, url: url, hc: &http.Client{Transport: tr}}
	ctx := ctxT(t)
	resp := c.post(ctx, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"`+version+
		`","capabilities":{"sampling":{}},"clientInfo":{"name":"resume-test","version":"1"}}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %s: %s", resp.Status, readAll(t, resp.Body))
	}
	c.sid = resp.Header.Get("Mcp-Session-Id")
	if c.sid == "" {
		t.Fatal("initialize answered without Mcp-Session-Id")
	}
	var evs []rsEvent
	var err error
	if resp.Header.Get("Content-Type") == "application/json" { // --json-response
		var b []byte
		b, err = io.ReadAll(resp.Body)
		evs = []rsEvent{{Data: string(b)}}
	} else {
		evs, err = rsReadAll(resp.Body)
	}
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the initialize answer: %v", err)
	}
	var res struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if len(evs) == 0 || json.Unmarshal([]byte(evs[len(evs)-1].Data), &res) != nil || res.Result.ProtocolVersion != version {
		t.Fatalf("initialize for %s answered %+v", version, evs)
	}
	c.version = version
	if resp := c.post(ctx, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s", resp.Status)
	} else {
		resp.Body.Close()
	}
	return c
}

func (c *rsClient) headers(req *http.Request) {
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
	if c.version != "" {
		req.Header.Set("MCP-Protocol-Version", c.version)
	}
}

// post sends one message; the caller closes the body. It fails the test,
// so it runs on the test's goroutine only; goroutines use postE.
func (c *rsClient) post(ctx context.Context, body string) *http.Response {
	c.t.Helper()
	resp, err := c.postE(ctx, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

func (c *rsClient) postE(ctx context.Context, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	c.headers(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", body, err)
	}
	return resp, nil
}

// get opens a GET stream, resuming after lastID unless it is empty. It
// returns an error rather than failing the test: it runs in goroutines.
func (c *rsClient) get(ctx context.Context, lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.headers(req)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return c.hc.Do(req)
}

// call posts a tools/call and returns the response, an SSE stream; the
// caller closes its body. It fails the test; goroutines use callE.
func (c *rsClient) call(ctx context.Context, id int, tool string, args map[string]any, token string) *http.Response {
	c.t.Helper()
	resp, err := c.callE(ctx, id, tool, args, token)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (c *rsClient) callE(ctx context.Context, id int, tool string, args map[string]any, token string) (*http.Response, error) {
	if args == nil {
		args = map[string]any{}
	}
	params := map[string]any{"name": tool, "arguments": args}
	if token != "" {
		params["_meta"] = map[string]any{"progressToken": token}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	resp, err := c.postE(ctx, string(b))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("tools/call %s: %s %s: %s", tool, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	return resp, nil
}

// drain reads a whole stream and closes it.
func (c *rsClient) drain(resp *http.Response) []rsEvent {
	c.t.Helper()
	defer resp.Body.Close()
	evs, err := rsReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading a stream: %v (read so far: %v)", err, evs)
	}
	return evs
}

// ---- SSE parsing ----------------------------------------------------------

// rsEvent is one SSE event as the bridge writes it (one data line at most).
type rsEvent struct {
	ID, Data, Retry string
	HasID           bool
}

func (e rsEvent) priming() bool { return e.HasID && e.Data == "" }

// rsNext reads one event. An event cut short by the end of the input is
// discarded, as the SSE standard says: it returns io.EOF only at an event
// boundary, io.ErrUnexpectedEOF or the read error otherwise.
func rsNext(br *bufio.Reader) (rsEvent, error) {
	var ev rsEvent
	fields := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && fields == 0 {
				return ev, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if fields == 0 {
				continue
			}
			return ev, nil
		}
		fields++
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			ev.ID, ev.HasID = value, true
		case "data":
			if ev.Data != "" {
				ev.Data += "\n"
			}
			ev.Data += value
		case "retry":
			ev.Retry = value
		}
	}
}

// rsReadAll reads a whole stream.
func rsReadAll(r io.Reader) ([]rsEvent, error) {
	br := bufio.NewReader(r)
	var out []rsEvent
	for {
		ev, err := rsNext(br)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// rsMsg is what the tests look at in a JSON-RPC message.
type rsMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProgressToken any     `json:"progressToken"`
		Progress      float64 `json:"progress"`
		Data          any     `json:"data"`
	} `json:"params"`
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func rsParse(data string) (rsMsg, error) {
	var m rsMsg
	err := json.Unmarshal([]byte(data), &m)
	return m, err
}

func (m rsMsg) text() string {
	if m.Result == nil || len(m.Result.Content) == 0 {
		return ""
	}
	return m.Result.Content[0].Text
}

// ---- cutting connections ----------------------------------------------

var errRsCut = errors.New("connection cut by the test")

// rsCutBody passes a response body through until its first event (the
// priming event) has gone by, then allows left more bytes, then closes the
// connection and fails the read, like a network failure in the middle of a
// stream. A cut before the priming event is not made: a client without an
// event ID has nothing to resume with. left < 0 never cuts.
type rsCutBody struct {
	rc    io.ReadCloser
	left  int64
	armed bool // the first event went through
	prev  byte
	cut   bool
	onCut func()
}

func (b *rsCutBody) Read(p []byte) (int, error) {
	if b.cut {
		return 0, errRsCut
	}
	if b.armed && b.left == 0 {
		b.cut = true
		b.rc.Close()
		if b.onCut != nil {
			b.onCut()
		}
		return 0, errRsCut
	}
	if b.armed && b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	if !b.armed {
		for i := 0; i < n; i++ {
			if p[i] == '\n' && b.prev == '\n' {
				b.armed = true
				if rest := int64(n - i - 1); b.left >= 0 && rest > b.left {
					n, b.left, err = i+1+int(b.left), 0, nil
				} else if b.left >= 0 {
					b.left -= rest
				}
				return n, err
			}
			b.prev = p[i]
		}
		return n, err
	}
	if b.left > 0 {
		b.left -= int64(n)
	}
	return n, err
}

func (b *rsCutBody) Close() error { return b.rc.Close() }

// rsStream is what a client read of one stream across its connections.
type rsStream struct {
	stream  string    // the stream's ID, from the first priming event
	events  []rsEvent // data events, in order
	resumes int       // GETs with Last-Event-ID that were answered 200
	cuts    int
}

// rsFollow reads a stream to its end across cut connections: after each
// cut (or each connection the server ended before done said the stream was
// complete) it resumes with GET and Last-Event-ID. cutAfter gives the byte
// budget of each connection after its priming event (< 0: no cut). It
// checks on the way what issue 3 promises of every connection: a priming
// event naming the stream and the resume point, then events of that stream
// only, each one position after the last.
func (c *rsClient) rsFollow(ctx context.Context, resp *http.Response, cutAfter func() int64, onEvent func(rsEvent), done func([]rsEvent) bool) (*rsStream, error) {
	st := &rsStream{}
	lastID := ""
	for {
		cb := &rsCutBody{rc: resp.Body, left: cutAfter(), onCut: func() { st.cuts++ }}
		br := bufio.NewReader(cb)
		prime, err := rsNext(br)
		if err != nil {
			resp.Body.Close()
			return st, fmt.Errorf("reading the priming event: %w", err)
		}
		if !prime.priming() {
			resp.Body.Close()
			return st, fmt.Errorf("the stream starts with %+v, not a priming event", prime)
		}
		stream, seq, perr := bridge.ParseEventID(prime.ID)
		if perr != nil {
			resp.Body.Close()
			return st, fmt.Errorf("priming event ID %q: %v", prime.ID, perr)
		}
		if lastID == "" {
			st.stream = strconv.FormatInt(stream, 10)
			if seq != 0 {
				return st, fmt.Errorf("a new stream is primed with %q, want position 0", prime.ID)
			}
		} else if prime.ID != lastID {
			resp.Body.Close()
			return st, fmt.Errorf("resumed after %q but primed with %q", lastID, prime.ID)
		}
		lastID = prime.ID
		for {
			ev, err := rsNext(br)
			if err == io.EOF {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					resp.Body.Close()
					return st, ctx.Err()
				}
				break // cut: resume
			}
			if ev.priming() || !ev.HasID {
				if ev.Retry != "" && !ev.HasID {
					continue // the poll's closing "retry:" event
				}
				resp.Body.Close()
				return st, fmt.Errorf("after %q: unexpected event %+v", lastID, ev)
			}
			s, q, _ := bridge.ParseEventID(lastID)
			if want := bridge.EventID(s, q+1); ev.ID != want {
				resp.Body.Close()
				return st, fmt.Errorf("after %q came %q (data %s), want %q: a gap, a repeat or another stream's event", lastID, ev.ID, ev.Data, want)
			}
			lastID = ev.ID
			st.events = append(st.events, ev)
			if onEvent != nil {
				onEvent(ev)
			}
		}
		resp.Body.Close()
		if done(st.events) {
			return st, nil
		}
		resp, err = c.get(ctx, lastID)
		if err != nil {
			return st, fmt.Errorf("resuming after %q: %w", lastID, err)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return st, fmt.Errorf("resuming after %q: %s: %s", lastID, resp.Status, body)
		}
		st.resumes++
	}
}

// rsAnswered says a stream is complete once it holds the response to id.
func rsAnswered(id int) func([]rsEvent) bool {
	want := strconv.Itoa(id)
	return func(evs []rsEvent) bool {
		for _, e := range evs {
			if m, err := rsParse(e.Data); err == nil && string(m.ID) == want && m.Method == "" {
				return true
			}
		}
		return false
	}
}

// ---- tests ------------------------------------------------------------------

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

// TestResumeReplaysAfterLastEventID: a GET with Last-Event-ID replays
// exactly the events of that stream after that ID, then ends; the priming
// event carries the resume point.
func TestResumeReplaysAfterLastEventID(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	// Two streams with events, so that a replay of one could leak the other.
	otherEvs := c.drain(c.call(ctx, 1, "progress", map[string]any{"n": 5}, "other"))
	if len(otherEvs) != 7 {
		t.Fatalf("first call: %d events", len(otherEvs))
	}
	all := c.drain(c.call(ctx, 2, "progress", map[string]any{"n": 10}, "tok"))
	if len(all) != 12 {
		t.Fatalf("second call: %d events", len(all))
	}
	if all[0].ID == otherEvs[0].ID || !all[0].priming() {
		t.Fatalf("streams not distinct or not primed: %+v %+v", all[0], otherEvs[0])
	}
	for _, after := range []int{0, 1, 5, 10, 11} {
		resp, err := c.get(ctx, all[after].ID)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET after %s: %v %v", all[after].ID, err, resp.Status)
		}
		got, err := rsReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || !got[0].priming() || got[0].ID != all[after].ID {
			t.Fatalf("GET after %s starts with %+v, want a priming event with that ID", all[after].ID, got)
		}
		if want := all[after+1:]; !rsSameEvents(got[1:], want) {
			t.Fatalf("GET after %s replayed\n%v\nwant\n%v", all[after].ID, got[1:], want)
		}
	}
}

func rsSameEvents(a, b []rsEvent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Data != b[i].Data {
			return false
		}
	}
	return true
}

// TestResumeRefusals: a resume point that names nothing gets 400, one
// whose events were evicted gets 410 Gone, each with a JSON-RPC error body
// that says which; neither replays anything. Every stream here is read to
// its end before the next call, so what is evicted does not depend on how
// fast a connection is read.
func TestResumeRefusals(t *testing.T) {
	const bound = 40
	b := startBridge(t, bridgeConfig{session: session.Options{LogMaxEvents: bound}})
	c := rsOpen(t, b.URL, "2025-11-25") // 1 event: the initialize answer
	ctx := ctxT(t)
	first := c.drain(c.call(ctx, 1, "echo", map[string]any{"text": "first"}, ""))
	if len(first) != 2 {
		t.Fatalf("echo: %v", first)
	}
	s1, _, _ := bridge.ParseEventID(first[0].ID)
	check := func(lastID string, status int, says string) {
		t.Helper()
		resp, err := c.get(ctx, lastID)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body := readAll(t, resp.Body)
		if resp.StatusCode != status || !strings.Contains(body, says) {
			t.Fatalf("GET with Last-Event-ID %q: %s %s\nwant %d and a body saying %q", lastID, resp.Status, body, status, says)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("a refusal came as %q", ct)
		}
		if m, err := rsParse(body); err != nil || m.Error == nil {
			t.Fatalf("a refusal is not a JSON-RPC error: %s", body)
		}
	}
	for _, id := range []string{"nonsense", "1", "+" + first[1].ID, "0" + first[1].ID, bridge.EventID(s1, 2), bridge.EventID(s1+100, 1)} {
		check(id, http.StatusBadRequest, "names no event of this session")
	}
	// A POST with Last-Event-ID is refused: resumption is always a GET.
	hdr := map[string]string{"Mcp-Session-Id": c.sid, "MCP-Protocol-Version": c.version, "Last-Event-ID": first[1].ID}
	if r := rawPost(t, b.URL, `{"jsonrpc":"2.0","id":10,"method":"ping"}`, hdr); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST with Last-Event-ID: %s", r.Status)
	}

	// 31 events (30 progress and the answer) fit in the log with the 2
	// before them; then 20 one-event calls push out the 13 oldest: the
	// initialize answer, the first echo's and the progress stream's first 11.
	prog := c.drain(c.call(ctx, 2, "progress", map[string]any{"n": 30}, "tok"))
	if len(prog) != 32 {
		t.Fatalf("progress: %d events", len(prog))
	}
	for i := range 20 {
		if evs := c.drain(c.call(ctx, 10+i, "echo", map[string]any{"text": "push"}, "")); len(evs) != 2 {
			t.Fatalf("echo: %v", evs)
		}
	}
	check(first[0].ID, http.StatusGone, "evicted") // the stream itself was freed
	check(first[1].ID, http.StatusGone, "evicted")
	check(prog[0].ID, http.StatusGone, "evicted")
	check(prog[10].ID, http.StatusGone, "evicted")
	// After the last evicted event, the replay is whole.
	resp, err := c.get(ctx, prog[11].ID)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET after %s: %v %v", prog[11].ID, err, resp.Status)
	}
	got, err := rsReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(got) == 0 || got[0].ID != prog[11].ID || !rsSameEvents(got[1:], prog[12:]) {
		t.Fatalf("replay after %s: %v %v, want %v", prog[11].ID, got, err, prog[12:])
	}
}

// TestResumePendingAnswer: a POST stream resumed before its answer exists
// goes on live on the resumed connection, and a second resume supersedes
// the first. Closing the POST connection did not cancel the request: the
// child still waits for the client's sampling answer and then answers.
func TestResumePendingAnswer(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	resp := c.call(ctx, 7, "sample", map[string]any{"text": "hello"}, "")
	br := bufio.NewReader(resp.Body)
	prime, err := rsNext(br)
	if err != nil || !prime.priming() {
		t.Fatalf("priming: %+v %v", prime, err)
	}
	sampling, err := rsNext(br)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rsParse(sampling.Data)
	if err != nil || m.Method != "sampling/createMessage" {
		t.Fatalf("expected the child's sampling request, got %s", sampling.Data)
	}
	resp.Body.Close() // the client leaves

	g1, err := c.get(ctx, prime.ID)
	if err != nil || g1.StatusCode != http.StatusOK {
		t.Fatalf("first resume: %v %v", err, g1.Status)
	}
	br1 := bufio.NewReader(g1.Body)
	if ev, err := rsNext(br1); err != nil || ev.ID != prime.ID || !ev.priming() {
		t.Fatalf("first resume primed with %+v %v", ev, err)
	}
	if ev, err := rsNext(br1); err != nil || ev.ID != sampling.ID || ev.Data != sampling.Data {
		t.Fatalf("first resume replayed %+v %v, want the sampling request", ev, err)
	}
	// A second resume takes the stream over: the first connection ends.
	g2, err := c.get(ctx, sampling.ID)
	if err != nil || g2.StatusCode != http.StatusOK {
		t.Fatalf("second resume: %v %v", err, g2.Status)
	}
	defer g2.Body.Close()
	if rest, err := rsReadAll(br1); err != nil || len(rest) != 0 {
		t.Fatalf("the superseded connection got %v %v, want a clean end", rest, err)
	}
	g1.Body.Close()
	br2 := bufio.NewReader(g2.Body)
	if ev, err := rsNext(br2); err != nil || ev.ID != sampling.ID || !ev.priming() {
		t.Fatalf("second resume primed with %+v %v", ev, err)
	}
	// Answer the sampling request; the tool's answer comes live on g2.
	answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"role":"assistant","model":"test","content":{"type":"text","text":"world"}}}`, m.ID)
	if r := c.post(ctx, answer); r.StatusCode != http.StatusAccepted {
		t.Fatalf("posting the sampling answer: %s", r.Status)
	} else {
		r.Body.Close()
	}
	rest, err := rsReadAll(br2)
	if err != nil || len(rest) != 1 {
		t.Fatalf("the resumed stream carried %v %v, want the answer then its end", rest, err)
	}
	s, q, _ := bridge.ParseEventID(sampling.ID)
	if a, _ := rsParse(rest[0].Data); string(a.ID) != "7" || a.text() != "sampled: world" || rest[0].ID != bridge.EventID(s, q+1) {
		t.Fatalf("answer %s %s", rest[0].ID, rest[0].Data)
	}
}

// TestResumeDisconnectIsNotCancellation: the client leaves right after the
// priming event; the child is not told, and its whole output lands in the
// log, where a resume fetches it.
func TestResumeDisconnectIsNotCancellation(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	resp := c.call(ctx, 3, "progress", map[string]any{"n": 50}, "tok")
	prime, err := rsNext(bufio.NewReader(resp.Body))
	if err != nil || !prime.priming() {
		t.Fatal(prime, err)
	}
	resp.Body.Close()
	g, err := c.get(ctx, prime.ID)
	if err != nil || g.StatusCode != http.StatusOK {
		t.Fatalf("resume: %v %v", err, g.Status)
	}
	evs, err := rsReadAll(g.Body)
	g.Body.Close()
	if err != nil || len(evs) != 52 {
		t.Fatalf("resume read %d events, %v; want priming + 50 progress + answer", len(evs), err)
	}
	if m, _ := rsParse(evs[51].Data); m.text() != "sent 50" {
		t.Fatalf("answer %s: the request was cancelled or lost", evs[51].Data)
	}
}

// rsRecorder is an http.RoundTripper that keeps a transcript of every
// exchange (bodies of SSE responses included, teed as the client reads
// them) and can cut SSE responses at random bytes after their first event.
type rsRecorder struct {
	base http.RoundTripper

	mu       sync.Mutex
	rng      *rand.Rand
	cutsLeft int   // SSE responses still to cut (each one is, until none is left)
	maxCut   int64 // a cut comes within this many bytes after the priming event
	cuts     int
	log      []*rsExchange
	changed  chan struct{} // closed and replaced on every new exchange
}

type rsExchange struct {
	method, lastEventID, reqBody string
	status                       int
	sse                          bool
	mu                           sync.Mutex
	body                         bytes.Buffer
}

func (x *rsExchange) bodyString() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.body.String()
}

func newRsRecorder(seed uint64, cuts int, maxCut int64) *rsRecorder {
	return &rsRecorder{base: &http.Transport{}, rng: rand.New(rand.NewPCG(seed, 7)), cutsLeft: cuts, maxCut: maxCut, changed: make(chan struct{})}
}

func (r *rsRecorder) client(t testing.TB) *http.Client {
	t.Cleanup(r.base.(*http.Transport).CloseIdleConnections)
	return &http.Client{Transport: r}
}

func (r *rsRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	x := &rsExchange{method: req.Method, lastEventID: req.Header.Get("Last-Event-ID")}
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		x.reqBody = string(b)
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	x.status = resp.StatusCode
	x.sse = strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	r.mu.Lock()
	if x.sse {
		body := resp.Body
		if r.cutsLeft > 0 {
			r.cutsLeft--
			body = &rsCutBody{rc: body, left: r.rng.Int64N(r.maxCut), onCut: func() {
				r.mu.Lock()
				r.cuts++
				r.mu.Unlock()
			}}
		}
		resp.Body = &rsTee{rc: body, x: x} // what the client sees
	}
	r.log = append(r.log, x)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return resp, nil
}

// waitFor blocks until the transcript satisfies ok, or ctx ends.
func (r *rsRecorder) waitFor(ctx context.Context, ok func([]*rsExchange) bool) error {
	for {
		r.mu.Lock()
		if ok(r.log) {
			r.mu.Unlock()
			return nil
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *rsRecorder) exchanges() []*rsExchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*rsExchange(nil), r.log...)
}

type rsTee struct {
	rc io.ReadCloser
	x  *rsExchange
}

func (t *rsTee) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	t.x.mu.Lock()
	t.x.body.Write(p[:n])
	t.x.mu.Unlock()
	return n, err
}

func (t *rsTee) Close() error { return t.rc.Close() }

// rsProgress records the SDK client's progress notifications per token.
// The SDK hands a call its answer as soon as it is read, while it may
// still be calling the notification handler for the events before it: a
// test waits for the notifications it expects, then checks them.
type rsProgress struct {
	mu      sync.Mutex
	got     map[string][]float64
	changed chan struct{} // closed and replaced on every notification
}

func newRsProgress() *rsProgress {
	return &rsProgress{got: map[string][]float64{}, changed: make(chan struct{})}
}

func (p *rsProgress) handler(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tok := fmt.Sprint(req.Params.ProgressToken)
	p.got[tok] = append(p.got[tok], req.Params.Progress)
	close(p.changed)
	p.changed = make(chan struct{})
}

// check waits until tok has n notifications (or ctx ends), then requires
// exactly 1..n in order. Run it again after the session is closed to catch
// a repeat that came late.
func (p *rsProgress) check(t testing.TB, ctx context.Context, tok string, n int) {
	t.Helper()
	p.mu.Lock()
	for len(p.got[tok]) < n && ctx.Err() == nil {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	got := p.got[tok]
	ok := len(got) == n
	for i := 0; ok && i < n; i++ {
		ok = got[i] == float64(i+1)
	}
	if !ok {
		t.Errorf("progress of %s: got %d notifications %v, want 1..%d each once in order", tok, len(got), rsShort(got), n)
	}
}

func rsShort(v []float64) string {
	if len(v) > 20 {
		return fmt.Sprint(v[:10], "...", v[len(v)-10:])
	}
	return fmt.Sprint(v)
}

func rsSampler(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	text := req.Params.Messages[0].Content.(*mcp.TextContent).Text
	return &mcp.CreateMessageResult{Role: "assistant", Model: "test", Content: &mcp.TextContent{Text: "re:" + text}}, nil
}

func rsConnectSDK(t testing.TB, url string, hc *http.Client, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "resume-test-sdk", Version: "1.0.0"}, opts)
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: 50}, so)
	if err != nil {
		t.Fatalf("connecting the SDK client: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// rsCall calls a tool and returns the text of its answer.
func rsCall(t testing.TB, ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) string {
	t.Helper()
	res, err := cs.CallTool(ctx, params)
	return rsToolText(t, res, err)
}

// rsToolText is the text of a tool's answer. It reports a failure with
// Errorf (it runs in goroutines) and then returns what it saw.
func rsToolText(t testing.TB, res *mcp.CallToolResult, err error) string {
	t.Helper()
	if err != nil {
		t.Errorf("tools/call: %v", err)
		return "error: " + err.Error()
	}
	if res.IsError || len(res.Content) == 0 {
		t.Errorf("tools/call failed: %+v", res)
		return "failed"
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	if text == nil {
		return fmt.Sprintf("%T", res.Content[0])
	}
	return text.Text
}

// TestResumeSDKClientRecoversCutStreams: the official Go SDK client, whose
// StreamableClientTransport reconnects with Last-Event-ID by itself,
// recovers streams cut at random bytes through the bridge with nothing
// lost: every progress notification once and in order, every answer, and
// a sampling round trip in the middle of a cut stream.
func TestResumeSDKClientRecoversCutStreams(t *testing.T) {
	seed := rsSeed(t)
	// SSEPollAfter makes the priming event carry "retry: 1": the SDK then
	// reconnects after 1 ms instead of its default backoff of 1 s or more.
	// An hour never closes a connection within the test.
	b := startBridge(t, bridgeConfig{
		bridge:  bridge.Options{SSEPollAfter: time.Hour, SSERetry: time.Millisecond},
		session: session.Options{LogMaxEvents: 10000}, // eviction is not under test here
	})
	rec := newRsRecorder(seed, 80, 3000)
	prog := newRsProgress()
	cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{
		ProgressNotificationHandler: prog.handler,
		CreateMessageHandler:        rsSampler,
	}, "")
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %s, want 2025-11-25", v)
	}
	ctx := ctxT(t)
	call := func(k, n int) {
		params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": n}}
		params.SetProgressToken("tok-" + strconv.Itoa(k))
		res, err := cs.CallTool(ctx, params)
		if got := rsToolText(t, res, err); got != "sent "+strconv.Itoa(n) {
			t.Errorf("call %d answered %q", k, got)
		}
	}
	call(0, 300)
	var wg sync.WaitGroup
	for k := 1; k <= 4; k++ {
		wg.Go(func() { call(k, 150) })
	}
	wg.Go(func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "cut"}})
		if got := rsToolText(t, res, err); got != "sampled: re:cut" {
			t.Errorf("sample answered %q", got)
		}
	})
	wg.Wait()
	call(5, 300)
	checkAll := func() {
		prog.check(t, ctx, "tok-0", 300)
		for k := 1; k <= 4; k++ {
			prog.check(t, ctx, "tok-"+strconv.Itoa(k), 150)
		}
		prog.check(t, ctx, "tok-5", 300)
	}
	checkAll()
	if err := cs.Close(); err != nil {
		t.Errorf("closing the SDK session: %v", err)
	}
	checkAll() // nothing came twice, late

	rec.mu.Lock()
	cuts := rec.cuts
	rec.mu.Unlock()
	resumes := 0
	for _, x := range rec.exchanges() {
		if x.method == http.MethodGet && x.lastEventID != "" {
			if x.status != http.StatusOK {
				t.Errorf("a resume after %s was answered %d: %s", x.lastEventID, x.status, x.bodyString())
			}
			resumes++
		}
	}
	if cuts < 5 || resumes == 0 {
		t.Errorf("%d cuts, %d resumptions: the SDK's reconnection was not exercised (seed %d)", cuts, resumes, seed)
	}
	t.Logf("%d cuts, %d resumptions with Last-Event-ID", cuts, resumes)
}

// TestResumeSDKClientDefaultBackoff: without a retry field (no polling),
// the SDK waits its own backoff and still recovers a cut stream.
func TestResumeSDKClientDefaultBackoff(t *testing.T) {
	seed := rsSeed(t)
	b := startBridge(t, bridgeConfig{})
	rec := newRsRecorder(seed, 0, 2000)
	prog := newRsProgress()
	cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{ProgressNotificationHandler: prog.handler}, "")
	// Cut the next SSE response: the call's POST stream (about 25 kB),
	// within 2 kB after its priming event.
	rec.mu.Lock()
	rec.cutsLeft = 1
	rec.mu.Unlock()
	ctx := ctxT(t)
	params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 200}}
	params.SetProgressToken("tok")
	if got := rsCall(t, ctx, cs, params); got != "sent 200" {
		t.Fatalf("answered %q", got)
	}
	prog.check(t, ctx, "tok", 200)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.cuts != 1 {
		t.Fatalf("%d cuts, want 1 (seed %d)", rec.cuts, seed)
	}
	for _, x := range rec.log {
		if x.method == http.MethodGet && x.lastEventID != "" && x.status == http.StatusOK {
			return // the SDK resumed
		}
	}
	t.Fatal("the SDK recovered without a GET with Last-Event-ID")
}

// TestResumeSDKPolling: with SSEPollAfter the bridge closes connections of
// 2025-11-25 sessions after the interval, having sent retry; the SDK
// client resumes with Last-Event-ID and the answer arrives on a resumed
// connection.
func TestResumeSDKPolling(t *testing.T) {
	b := startBridge(t, bridgeConfig{bridge: bridge.Options{SSEPollAfter: 20 * time.Millisecond, SSERetry: time.Millisecond}})
	rec := newRsRecorder(1, 0, 1)
	ctx := ctxT(t)
	var callStream string
	cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			// Hold the sampling answer until the call's stream was closed by
			// the bridge and resumed by the client at least twice.
			var post *rsExchange
			if err := rec.waitFor(ctx, func(log []*rsExchange) bool {
				for _, x := range log {
					if x.method == http.MethodPost && strings.Contains(x.reqBody, `"tools/call"`) && x.sse {
						post = x
						return true
					}
				}
				return false
			}); err != nil {
				return nil, err
			}
			evs, _ := rsReadAll(strings.NewReader(post.bodyString()))
			if len(evs) == 0 {
				return nil, fmt.Errorf("the call's stream has no priming event")
			}
			s, _, _ := bridge.ParseEventID(evs[0].ID)
			callStream = strconv.FormatInt(s, 10)
			if err := rec.waitFor(ctx, func(log []*rsExchange) bool {
				resumes := 0
				for _, x := range log {
					if x.method == http.MethodGet && strings.HasPrefix(x.lastEventID, callStream+"_") && x.status == http.StatusOK {
						resumes++
					}
				}
				return resumes >= 2
			}); err != nil {
				return nil, err
			}
			return rsSampler(ctx, req)
		},
	}, "")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "poll"}})
	if got := rsToolText(t, res, err); got != "sampled: re:poll" {
		t.Fatalf("sample answered %q", got)
	}
	// The transcript: the POST was primed with retry, closed by the bridge
	// with a retry event and without the answer; the answer came on a GET
	// that resumed the same stream.
	var answeredOn *rsExchange
	for _, x := range rec.exchanges() {
		evs, _ := rsReadAll(strings.NewReader(x.bodyString()))
		if x.method == http.MethodPost && strings.Contains(x.reqBody, `"tools/call"`) {
			if len(evs) < 2 || evs[0].Retry != "1" || !evs[0].priming() || evs[len(evs)-1].Retry != "1" || evs[len(evs)-1].HasID {
				t.Errorf("the call's POST stream: %q, want priming with retry: 1 ... closing retry: 1", x.bodyString())
			}
		}
		for _, e := range evs {
			if m, err := rsParse(e.Data); err == nil && m.text() == "sampled: re:poll" {
				if answeredOn != nil {
					t.Errorf("the answer was delivered twice")
				}
				answeredOn = x
			}
		}
	}
	if answeredOn == nil || answeredOn.method != http.MethodGet || !strings.HasPrefix(answeredOn.lastEventID, callStream+"_") {
		t.Fatalf("the answer did not come on a GET resuming stream %s: %+v", callStream, answeredOn)
	}
}

// TestResumeOlderRevisions: sessions of 2025-03-26 and 2025-06-18 get no
// priming event and no retry field (their clients may not expect an event
// without data) and are never polled; everything works. 2025-11-25 gets
// both, for contrast. Every event still carries an ID.
func TestResumeOlderRevisions(t *testing.T) {
	for _, version := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			b := startBridge(t, bridgeConfig{bridge: bridge.Options{SSEPollAfter: time.Hour, SSERetry: time.Millisecond}})
			rec := newRsRecorder(1, 0, 1)
			prog := newRsProgress()
			logs := make(chan string, 10)
			cs := rsConnectSDK(t, b.URL, rec.client(t), &mcp.ClientOptions{
				ProgressNotificationHandler: prog.handler,
				CreateMessageHandler:        rsSampler,
				LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
					logs <- fmt.Sprint(req.Params.Data)
				},
			}, version)
			if v := cs.InitializeResult().ProtocolVersion; v != version {
				t.Fatalf("negotiated %s, want %s", v, version)
			}
			ctx := ctxT(t)
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 100}}
			params.SetProgressToken("p")
			if got := rsCall(t, ctx, cs, params); got != "sent 100" {
				t.Fatalf("progress answered %q", got)
			}
			prog.check(t, ctx, "p", 100)
			if got := rsCall(t, ctx, cs, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "old"}}); got != "sampled: re:old" {
				t.Fatalf("sample answered %q", got)
			}
			if got := rsCall(t, ctx, cs, &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"text": "hi"}}); got != "logged" {
				t.Fatalf("log answered %q", got)
			}
			if got := <-logs; got != "hi" {
				t.Fatalf("log message %q", got)
			}
			primed := version >= "2025-11-25"
			sse := 0
			for _, x := range rec.exchanges() {
				if !x.sse {
					continue
				}
				if x.method == http.MethodGet && x.lastEventID != "" {
					t.Errorf("the client resumed after %s: a connection was closed early", x.lastEventID)
				}
				evs, err := rsReadAll(strings.NewReader(x.bodyString()))
				if x.method == http.MethodGet {
					// The standalone stream is still open: what the client
					// read of it so far is its priming event in a 2025-11-25
					// session, or nothing.
					if len(evs) > 1 || (len(evs) == 1 && !(primed && evs[0].priming())) {
						t.Errorf("%s session, standalone stream so far: %q", version, x.bodyString())
					}
					continue
				}
				sse++
				if err != nil || len(evs) == 0 {
					t.Fatalf("SSE body %q: %v", x.bodyString(), err)
				}
				for i, e := range evs {
					if !e.HasID {
						t.Errorf("event without ID: %+v", e)
					}
					if _, _, err := bridge.ParseEventID(e.ID); err != nil {
						t.Errorf("event ID %q: %v", e.ID, err)
					}
					if e.priming() != (primed && i == 0) || (e.Retry != "") != (primed && i == 0) {
						t.Errorf("%s session, event %d of a POST stream: %+v (priming and retry expected: %v)", version, i, e, primed && i == 0)
					}
				}
			}
			if sse < 4 {
				t.Fatalf("only %d SSE responses recorded", sse)
			}
		})
	}
}

// TestResumeR3labsClient: github.com/r3labs/sse/v2, an SSE client written
// with no knowledge of MCP, resumes a POST stream by GET with
// Last-Event-ID and keeps resuming through cut connections (cut at event
// boundaries: that client treats the bytes before a cut as a whole event)
// until the stream ends with the answer, with nothing lost or repeated.
func TestResumeR3labsClient(t *testing.T) {
	seed := rsSeed(t)
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	const n = 300
	resp := c.call(ctx, 11, "progress", map[string]any{"n": n}, "r3")
	prime, err := rsNext(bufio.NewReader(resp.Body))
	resp.Body.Close() // the client leaves after the priming event
	if err != nil || !prime.priming() {
		t.Fatal(prime, err)
	}

	cutter := &rsEventCutter{base: &http.Transport{}, rng: rand.New(rand.NewPCG(seed, 3))}
	t.Cleanup(cutter.base.CloseIdleConnections)
	client := sse.NewClient(b.URL)
	client.Connection = &http.Client{Transport: cutter}
	client.Headers["Mcp-Session-Id"] = c.sid
	client.Headers["MCP-Protocol-Version"] = c.version
	client.LastEventID.Store([]byte(prime.ID))
	client.ReconnectStrategy = backoff.WithContext(backoff.NewConstantBackOff(time.Millisecond), ctx)
	client.ResponseValidator = func(_ *sse.Client, resp *http.Response) error {
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return backoff.Permanent(fmt.Errorf("%s: %s", resp.Status, body))
		}
		return nil
	}
	var ids, data []string
	err = client.SubscribeWithContext(ctx, "", func(ev *sse.Event) {
		if len(ev.Data) == 0 {
			return // a priming event
		}
		ids = append(ids, string(ev.ID))
		data = append(data, string(ev.Data))
	})
	if err != nil {
		t.Fatalf("r3labs client: %v (seed %d)", err, seed)
	}
	stream, _, _ := bridge.ParseEventID(prime.ID)
	if len(ids) != n+1 {
		t.Fatalf("r3labs client got %d events, want %d (seed %d)", len(ids), n+1, seed)
	}
	for i := range n + 1 {
		if ids[i] != bridge.EventID(stream, uint64(i+1)) {
			t.Fatalf("event %d has ID %q (seed %d)", i, ids[i], seed)
		}
		m, err := rsParse(data[i])
		switch {
		case err != nil:
			t.Fatalf("event %s: %q", ids[i], data[i])
		case i < n && m.Params.Progress != float64(i+1):
			t.Fatalf("event %s: %s, want progress %d", ids[i], data[i], i+1)
		case i == n && m.text() != fmt.Sprintf("sent %d", n):
			t.Fatalf("last event %s", data[i])
		}
	}
	cutter.mu.Lock()
	defer cutter.mu.Unlock()
	if cutter.cuts < 3 {
		t.Fatalf("only %d cuts (seed %d)", cutter.cuts, seed)
	}
	for i, last := range cutter.lastIDs {
		if last == "" {
			t.Fatalf("connection %d of the r3labs client had no Last-Event-ID", i)
		}
	}
	t.Logf("r3labs client: %d connections, %d cuts", len(cutter.lastIDs), cutter.cuts)
}

// rsEventCutter cuts each SSE response after a random number (1 to 40) of
// whole events, with a read error, so that the client reconnects.
type rsEventCutter struct {
	base *http.Transport
	mu   sync.Mutex
	rng  *rand.Rand
	cuts int
	// lastIDs are the Last-Event-ID headers the client sent, per connection.
	lastIDs []string
}

func (c *rsEventCutter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.lastIDs = append(c.lastIDs, req.Header.Get("Last-Event-ID"))
	k := 1 + c.rng.IntN(40)
	c.mu.Unlock()
	resp, err := c.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = &rsBoundaryCut{rc: resp.Body, events: k + 1, onCut: func() {
		c.mu.Lock()
		c.cuts++
		c.mu.Unlock()
	}}
	return resp, nil
}

// rsBoundaryCut ends a body with an error after a number of events.
type rsBoundaryCut struct {
	rc     io.ReadCloser
	events int // still to pass, counting the priming event
	prev   byte
	onCut  func()
	cut    bool
}

func (b *rsBoundaryCut) Read(p []byte) (int, error) {
	if b.cut || b.events == 0 {
		if !b.cut {
			b.cut = true
			b.rc.Close()
			b.onCut()
		}
		return 0, errRsCut
	}
	n, err := b.rc.Read(p)
	for i := 0; i < n; i++ {
		if p[i] == '\n' && b.prev == '\n' {
			b.events--
			if b.events == 0 {
				b.prev = 0
				return i + 1, nil
			}
		}
		b.prev = p[i]
	}
	return n, err
}

func (b *rsBoundaryCut) Close() error { return b.rc.Close() }

// TestResumeFloodStaysBounded: children flood notifications while no client
// reads. Each session's log stays within its bounds all along, a flooding
// session blocks neither itself nor another session, the answer still
// lands in the log, and the evicted start of a stream is refused with 410
// rather than replayed in part.
func TestResumeFloodStaysBounded(t *testing.T) {
	const maxEvents, maxBytes, n = 200, 16 << 10, 5000
	b := startBridge(t, bridgeConfig{session: session.Options{LogMaxEvents: maxEvents, LogMaxBytes: maxBytes}})
	ctx := ctxT(t)
	gone := rsOpen(t, b.URL, "2025-11-25")  // its client leaves after the priming event
	stuck := rsOpen(t, b.URL, "2025-11-25") // its client holds the connection and does not read
	other := rsOpen(t, b.URL, "2025-11-25") // a bystander

	resp := gone.call(ctx, 1, "progress", map[string]any{"n": n}, "gone")
	goneID, err := rsNext(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if err != nil || !goneID.priming() {
		t.Fatal(goneID, err)
	}
	stuckResp := stuck.call(ctx, 1, "progress", map[string]any{"n": n}, "stuck")
	stuckBody := bufio.NewReader(stuckResp.Body)
	stuckID, err := rsNext(stuckBody) // the first event, then nothing until the end
	if err != nil || !stuckID.priming() {
		t.Fatal(stuckID, err)
	}

	// The bystander is answered while the stuck connection stays unread
	// (it is read only at the end of the test).
	for i := range 5 {
		evs := other.drain(other.call(ctx, 100+i, "echo", map[string]any{"text": "alive"}, ""))
		if m, _ := rsParse(evs[len(evs)-1].Data); len(evs) != 2 || m.text() != "alive" {
			t.Fatalf("the bystander got %v", evs)
		}
	}

	type watched struct {
		name   string
		log    *session.EventLog
		stream int64
		peak   [3]int64 // events, bytes, streams
	}
	var ws []*watched
	for _, w := range []struct {
		name string
		c    *rsClient
		id   string
	}{{"gone", gone, goneID.ID}, {"stuck", stuck, stuckID.ID}} {
		sess, err := b.Reg.Get(w.c.sid)
		if err != nil {
			t.Fatal(err)
		}
		stream, _, _ := bridge.ParseEventID(w.id)
		ws = append(ws, &watched{name: w.name, log: sess.Log(), stream: stream})
	}
	// Watch the logs until both answers are in them (both streams
	// finished), checking the bounds at every look. Nobody reads these
	// streams, so no event marks the end: the loop waits on the logs'
	// state, never on time.
	looks := 0
	for running := true; running; looks++ {
		if ctx.Err() != nil {
			t.Fatal("the floods never ended")
		}
		running = false
		for _, w := range ws {
			ev, by, streams := w.log.Stats()
			if ev > maxEvents || by > maxBytes {
				t.Fatalf("%s: the log holds %d events / %d bytes; bounds %d / %d", w.name, ev, by, maxEvents, maxBytes)
			}
			w.peak = [3]int64{max(w.peak[0], int64(ev)), max(w.peak[1], by), max(w.peak[2], int64(streams))}
			running = running || w.log.State(w.stream).Open
		}
		runtime.Gosched()
	}
	for _, w := range ws {
		t.Logf("%s: %d looks during the flood: at most %d events, %d bytes, %d streams held", w.name, looks, w.peak[0], w.peak[1], w.peak[2])
		// The initialize stream (until its event is evicted) and the call's.
		if w.peak[2] > 2 {
			t.Errorf("%s: %d streams held at once", w.name, w.peak[2])
		}
	}

	// The start of the abandoned stream is gone: refused, not replayed in part.
	g, err := gone.get(ctx, goneID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, g.Body); g.StatusCode != http.StatusGone || !strings.Contains(body, "evicted") {
		t.Fatalf("resume of the flooded stream from its start: %s %s, want 410", g.Status, body)
	}
	g.Body.Close()
	// Its answer is there: the disconnect cancelled nothing.
	g, err = gone.get(ctx, bridge.EventID(ws[0].stream, n))
	if err != nil || g.StatusCode != http.StatusOK {
		t.Fatalf("resume before the answer: %v %v", err, g.Status)
	}
	evs, err := rsReadAll(g.Body)
	g.Body.Close()
	if err != nil || len(evs) != 2 {
		t.Fatalf("resume before the answer read %v %v", evs, err)
	}
	if m, _ := rsParse(evs[1].Data); m.text() != fmt.Sprintf("sent %d", n) || evs[1].ID != bridge.EventID(ws[0].stream, n+1) {
		t.Fatalf("answer %s %s", evs[1].ID, evs[1].Data)
	}

	// The unread connection: what it delivers is in order with no gap. It
	// either kept up (the kernel's buffers took the flood) and ends with
	// the answer, or it fell behind the log and ended early; then a resume
	// from its last event is refused with 410.
	last := stuckID.ID
	answered := false
	for {
		ev, err := rsNext(stuckBody)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s, q, _ := bridge.ParseEventID(last)
		if ev.ID != bridge.EventID(s, q+1) {
			t.Fatalf("after %s came %s", last, ev.ID)
		}
		last = ev.ID
		if m, _ := rsParse(ev.Data); m.Method == "" {
			answered = true
		}
	}
	if !answered {
		g, err := stuck.get(ctx, last)
		if err != nil {
			t.Fatal(err)
		}
		if g.StatusCode != http.StatusGone {
			t.Fatalf("the unread connection ended at %s without its answer, and a resume from there got %s", last, g.Status)
		}
		g.Body.Close()
	}
	t.Logf("the unread connection delivered up to %s (answer: %v)", last, answered)
}

// TestResumeLogFreedWithSession: when a session ends, its open streams end
// (a call in flight gets an error), its log refuses nothing more because
// the session is gone (404), and the log's memory is released: nothing
// keeps it reachable.
func TestResumeLogFreedWithSession(t *testing.T) {
	b := startBridge(t, bridgeConfig{})
	c := rsOpen(t, b.URL, "2025-11-25")
	ctx := ctxT(t)
	if _, err := rsReadAll(c.call(ctx, 1, "progress", map[string]any{"n": 100}, "p").Body); err != nil {
		t.Fatal(err)
	}
	waiting := c.call(ctx, 2, "wait", nil, "")
	defer waiting.Body.Close()
	listen, err := c.get(ctx, "")
	if err != nil || listen.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v", err, listen.Status)
	}
	defer listen.Body.Close()
	var logRef weak.Pointer[session.EventLog]
	var sessRef weak.Pointer[session.Session]
	func() {
		s, err := b.Reg.Get(c.sid)
		if err != nil {
			t.Fatal(err)
		}
		if ev, _, _ := s.Log().Stats(); ev < 100 {
			t.Fatalf("the log holds %d events", ev)
		}
		logRef, sessRef = weak.Make(s.Log()), weak.Make(s)
	}()

	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, b.URL, nil)
	c.headers(req)
	if resp, err := c.hc.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	evs, err := rsReadAll(waiting.Body)
	if err != nil || len(evs) != 2 {
		t.Fatalf("the call in flight got %v %v", evs, err)
	}
	if m, _ := rsParse(evs[1].Data); m.Error == nil || !strings.Contains(m.Error.Message, "session ended") {
		t.Fatalf("the call in flight got %s, want an error saying the session ended", evs[1].Data)
	}
	if rest, err := rsReadAll(listen.Body); err != nil || len(rest) != 1 {
		t.Fatalf("the GET stream got %v %v, want its priming event and its end", rest, err)
	}
	if g, err := c.get(ctx, evs[0].ID); err != nil || g.StatusCode != http.StatusNotFound {
		t.Fatalf("resume in an ended session: %v %v, want 404", err, g.Status)
	} else {
		g.Body.Close()
	}

	// Wait for every goroutine that could hold the session: the child's
	// stop and stdout reader (Shutdown waits for them) and the HTTP
	// handlers (Close waits for them).
	if err := b.Reg.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c.hc.CloseIdleConnections()
	b.srv.Close()
	// A goroutine that has called wg.Done still holds the session on its
	// stack until it returns: collect until it has (a real leak stays
	// reachable through every cycle). This test found that a stopped idle
	// timer, still in the runtime's timer heap, kept ended sessions alive.
	for i := 0; i < 200 && (logRef.Value() != nil || sessRef.Value() != nil); i++ {
		runtime.Gosched()
		runtime.GC()
	}
	if logRef.Value() != nil || sessRef.Value() != nil {
		t.Fatalf("the ended session (%v) or its log (%v) is still reachable", sessRef.Value() != nil, logRef.Value() != nil)
	}
}

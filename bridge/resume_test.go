package bridge_test

// Resumable streams, end to end through real children and real
// TCP connections: event IDs, replay with Last-Event-ID, the 400 and 410
// refusals, disconnects that are not cancellations, priming by revision,
// polling, bounded logs under a flood, and three independent clients that
// reconnect by themselves: raw HTTP cut at random points, the official Go
// SDK's StreamableClientTransport, and github.com/r3labs/sse/v2. This file
// holds the helpers; each resume_*_test.go file one kind of scenario.

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
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-bridge/mcp-bridge/bridge"
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
// checks on the way what resumption promises of every connection: a priming
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

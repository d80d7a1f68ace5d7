package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The load generator is the same for every target: Go's net/http client,
// one keep-alive connection per worker, the same request bytes.

const protocolVersion = "2025-11-25"

func newTransport(conns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil, // loopback only, never through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}

// mcpClient is one MCP session over Streamable HTTP (or one client of a
// target without sessions: the HTTP floor, supergateway stateless).
type mcpClient struct {
	hc    *http.Client
	url   string
	sid   string
	proto string
	// stateless: revision 2026-07-28, no session; each call carries the
	// mirrored headers and its _meta.
	stateless bool
	// tool is the name echo calls; empty: "echo" (an aggregate's is
	// prefixed).
	tool   string
	nextID int64
	req    []byte       // request body being built
	body   bytes.Buffer // response body, reused
}

func newMCPClient(hc *http.Client, url string) *mcpClient {
	return &mcpClient{hc: hc, url: url}
}

// post sends one message and reads the whole answer into c.body.
func (c *mcpClient) post(ctx context.Context, msg []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(msg))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	if c.sid != "" {
		h["Mcp-Session-Id"] = []string{c.sid}
	}
	if c.proto != "" {
		h["Mcp-Protocol-Version"] = []string{c.proto}
	}
	if c.stateless {
		h["Mcp-Protocol-Version"] = statelessVersion
		h["Mcp-Method"] = toolsCall
		h["Mcp-Name"] = echoName
		if c.tool != "" {
			h["Mcp-Name"] = []string{c.tool}
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	c.body.Reset()
	_, err = c.body.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp, nil
}

// answer extracts the JSON-RPC answer from c.body: the body itself, or the
// data of the last non-empty SSE event.
func (c *mcpClient) answer(resp *http.Response) []byte {
	b := c.body.Bytes()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return b
	}
	var last []byte
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			d = bytes.TrimSpace(d)
			if len(d) > 0 {
				last = d
			}
		}
	}
	return last
}

// Headers and _meta of a revision 2026-07-28 echo call (the stateless
// clients only call echo).
var (
	statelessVersion = []string{"2026-07-28"}
	toolsCall        = []string{"tools/call"}
	echoName         = []string{"echo"}
	statelessMeta    = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bridge-bench","version":"1.0.0"},"io.modelcontextprotocol/clientCapabilities":{}}`
)

// initializeMsg is the initialize request every client of the harness
// sends, without a line end.
func initializeMsg(id int64) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) +
		`,"method":"initialize","params":{"protocolVersion":"` + protocolVersion +
		`","capabilities":{},"clientInfo":{"name":"bridge-bench","version":"1.0.0"}}}`)
}

// open sends initialize and checks its answer: the session exists, not
// yet initialized (the session start the harness times).
func (c *mcpClient) open(ctx context.Context) error {
	c.nextID++
	resp, err := c.post(ctx, initializeMsg(c.nextID))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(c.answer(resp), []byte(`"protocolVersion"`)) {
		return fmt.Errorf("initialize: HTTP %d: %s", resp.StatusCode, truncate(c.body.Bytes(), 300))
	}
	c.sid = resp.Header.Get("Mcp-Session-Id")
	c.proto = protocolVersion
	return nil
}

// initialize starts the session: initialize, then notifications/initialized.
func (c *mcpClient) initialize(ctx context.Context) error {
	if err := c.open(ctx); err != nil {
		return err
	}
	resp, err := c.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notifications/initialized: HTTP %d: %s", resp.StatusCode, truncate(c.body.Bytes(), 300))
	}
	return nil
}

// call makes one tools/call and checks that it got a result.
func (c *mcpClient) call(ctx context.Context, tool, args string) ([]byte, error) {
	c.nextID++
	c.req = append(c.req[:0], `{"jsonrpc":"2.0","id":`...)
	c.req = strconv.AppendInt(c.req, c.nextID, 10)
	c.req = append(c.req, `,"method":"tools/call","params":{"name":"`...)
	c.req = append(c.req, tool...)
	c.req = append(c.req, `","arguments":`...)
	c.req = append(c.req, args...)
	if c.stateless {
		c.req = append(c.req, statelessMeta...)
	}
	c.req = append(c.req, `}}`...)
	resp, err := c.post(ctx, c.req)
	if err != nil {
		return nil, err
	}
	a := c.answer(resp)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(a, []byte(`"result"`)) {
		return nil, fmt.Errorf("tools/call %s: HTTP %d: %s", tool, resp.StatusCode, truncate(c.body.Bytes(), 300))
	}
	return a, nil
}

// echo is the call of every throughput figure.
func (c *mcpClient) echo(ctx context.Context) error {
	tool := c.tool
	if tool == "" {
		tool = "echo"
	}
	_, err := c.call(ctx, tool, `{"text":"hello"}`)
	return err
}

// close ends the session (a DELETE), if the target gave one.
func (c *mcpClient) close(ctx context.Context) {
	if c.sid == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", c.sid)
	req.Header.Set("Mcp-Protocol-Version", c.proto)
	if resp, err := c.hc.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// stdioChild is the minimal server driven directly over its stdio pipes:
// the stdio floor, with no HTTP and no bridge.
type stdioChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	nextID int64
	req    []byte
}

func startChild(bin string) (*stdioChild, error) {
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return &stdioChild{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 64<<10)}, nil
}

func (c *stdioChild) roundTrip(msg []byte) ([]byte, error) {
	if _, err := c.stdin.Write(msg); err != nil {
		return nil, err
	}
	line, err := c.out.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("reading the child's answer: %w", err)
	}
	return line, nil
}

func (c *stdioChild) initialize() error {
	c.nextID++
	a, err := c.roundTrip(append(initializeMsg(c.nextID), '\n'))
	if err != nil {
		return err
	}
	if !bytes.Contains(a, []byte(`"protocolVersion"`)) {
		return fmt.Errorf("initialize: %s", truncate(a, 300))
	}
	_, err = c.stdin.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"))
	return err
}

func (c *stdioChild) echo() error {
	c.nextID++
	c.req = append(c.req[:0], `{"jsonrpc":"2.0","id":`...)
	c.req = strconv.AppendInt(c.req, c.nextID, 10)
	c.req = append(c.req, `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`+"\n"...)
	a, err := c.roundTrip(c.req)
	if err != nil {
		return err
	}
	if !bytes.Contains(a, []byte(`"result"`)) {
		return fmt.Errorf("tools/call echo: %s", truncate(a, 300))
	}
	return nil
}

// close ends the child by closing its stdin, as a stdio client should.
func (c *stdioChild) close() error {
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return errors.New("the minimal server did not exit within 10s of its stdin closing; killed")
	}
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

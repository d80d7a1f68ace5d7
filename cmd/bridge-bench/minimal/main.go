// Command minimal is the stdio MCP server bridge-bench puts behind the
// bridge, and with -http the bare HTTP server that is the benchmark's HTTP
// floor. Both modes answer with the same code (package mini), so they send
// the same JSON; neither uses an SDK, so that the figures measure the bridge
// and not the server.
//
//	minimal                  serve MCP over stdin/stdout until stdin ends
//	minimal -http ADDR       serve the same answers over HTTP POST on ADDR;
//	                         prints "http://HOST:PORT/mcp" on stdout once
//	                         listening, and stops when stdin ends
//	minimal -poolhop ADDR    the pool hop floor: HTTP in front of one
//	                         child per core shared by all clients
//	minimal -hop ADDR        the hop floor: HTTP in front of one child
//	                         (this program, stdio) per session, forwarding
//	                         each POST as a line; prints and stops likewise
//	minimal -ssehop ADDR     the SSE hop floor: the hop floor answering
//	                         each request as SSE (headers and a priming
//	                         event flushed at once, then the answer as an
//	                         event with an ID)
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/mcp-bridge/mcp-bridge/cmd/bridge-bench/internal/mini"
)

func main() {
	httpAddr := flag.String("http", "", "serve the HTTP floor on this `address` (loopback, e.g. 127.0.0.1:0) instead of stdio")
	hopAddr := flag.String("hop", "", "serve the hop floor (HTTP to one stdio child per session, nothing else) on this `address`")
	sseHopAddr := flag.String("ssehop", "", "serve the SSE hop floor (the hop floor, answering as SSE events with a priming event) on this `address`")
	poolHopAddr := flag.String("poolhop", "", "serve the pool hop floor (HTTP to one stdio child per core shared by all clients, nothing else) on this `address`")
	flag.Parse()
	var err error
	switch {
	case *httpAddr != "":
		err = serveHTTP(*httpAddr)
	case *hopAddr != "":
		err = serveHop(*hopAddr, false)
	case *sseHopAddr != "":
		err = serveHop(*sseHopAddr, true)
	case *poolHopAddr != "":
		err = servePoolHop(*poolHopAddr)
	default:
		err = serveStdio(stdin(), os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "minimal:", err)
		os.Exit(1)
	}
}

// stdin returns standard input ready for serveStdio, and makes the process
// as cheap as a sequential server can be, so that the benchmark's figures
// are the bridge's and not the child's: on 2 cores shared by 50 children,
// the bridge and the load generator, the children's CPU is part of every
// figure. Two runtime settings matter there (measured with bridge-bench, 50
// sessions; CPU per call of the 50 children together):
//
//   - A blocking read(2) on a pipe, Go's default for an inherited stdin,
//     keeps a P in a system call between messages; the runtime's monitor
//     then polls and hands the P off, and each message costs thread
//     wake-ups. Non-blocking stdin puts the wait in the network poller,
//     where an idle process costs nothing: 62 -> 44 µs.
//   - One P: the server is one goroutine, and a second P only adds
//     spinning threads looking for work: 44 -> 36 µs.
func stdin() *os.File {
	runtime.GOMAXPROCS(1)
	if err := syscall.SetNonblock(0, true); err != nil {
		return os.Stdin
	}
	// NewFile registers a non-blocking descriptor with the poller.
	return os.NewFile(0, "stdin")
}

// serveStdio answers each line of in on out. Answers are flushed when no
// further input is waiting, so a burst of requests costs one write.
func serveStdio(in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	emit := func(line []byte) error {
		if _, err := w.Write(line); err != nil {
			return err
		}
		return w.WriteByte('\n')
	}
	var long []byte // a line longer than r's buffer, gathered
	for {
		frag, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, frag...)
			continue
		}
		line := frag
		if long != nil {
			line = append(long, frag...)
			long = nil
		}
		if len(line) > 0 && (line[0] != '\n' || len(line) > 1) {
			if herr := mini.Handle(line, emit); herr != nil {
				return herr
			}
		}
		if r.Buffered() == 0 || err != nil {
			if ferr := w.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// serveHTTP is the HTTP floor: each POST body is one message, answered
// with the same JSON the stdio server would write, as application/json.
func serveHTTP(addr string) error {
	return serveUntilStdinEnds(addr, http.HandlerFunc(handleHTTP))
}

// serveUntilStdinEnds serves h on addr, printing its URL, until the parent
// closes our stdin (or dies).
func serveUntilStdinEnds(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	stdinDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinDone)
	}()
	select {
	case err := <-served:
		return err
	case <-stdinDone:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// readBody reads a POST's body, answering 400 if that fails.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

func handleHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var answer []byte
	_ = mini.Handle(body, func(line []byte) error { answer = line; return nil })
	if answer == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Mcp-Session-Id", "floor")
	w.Write(answer)
}

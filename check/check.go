// Package check is `bridge check`: it starts a stdio MCP server once, as
// the bridge would for a session, runs initialize and the lists through
// the project's own child connection (peer.Conn and pin.Capture, as
// `bridge pin` does), and says in plain words what is wrong: not an MCP
// server (what it writes on stdout is not JSON-RPC), alive but silent (a
// block-buffered stdout), exited, slow to start, noisy on stderr, or
// descriptions hiding Unicode a reviewer does not see.
//
// The package holds the inspection and its report; the command
// (cmd/bridge) reads the flags into Options, builds the launcher of the
// sandbox they describe (Options.NewLauncher) and prints the report.
package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-bridge/mcp-bridge/jsonrpc"
	"github.com/mcp-bridge/mcp-bridge/peer"
	"github.com/mcp-bridge/mcp-bridge/pin"
	"github.com/mcp-bridge/mcp-bridge/sandbox"
)

// Thresholds of the warnings.
const (
	// slowStart: an initialize answered later than this (or than half
	// the initialize timeout, if less) is slow: clients waiting for their
	// first session often give up after about ten seconds.
	slowStart = 10 * time.Second
	// noisyStderr: more stderr lines than this during the check fill
	// the bridge's log with every session.
	noisyStderr = 20
	// shownLines is how many of the lines found are quoted.
	shownLines = 3
)

// Report is what a check found, each kind in the order found: what is
// fine, warnings (which do not fail the check) and problems (which do).
type Report struct {
	OK, Warnings, Problems []string
}

// Print writes the report as bridge check shows it: one line per finding,
// then a summary line.
func (r *Report) Print(w io.Writer) {
	for _, s := range r.OK {
		fmt.Fprintln(w, "ok:", s)
	}
	for _, s := range r.Warnings {
		fmt.Fprintln(w, "warning:", s)
	}
	for _, s := range r.Problems {
		fmt.Fprintln(w, "problem:", s)
	}
	switch {
	case len(r.Problems) > 0:
		fmt.Fprintf(w, "bridge check: %s, %s\n", plural(len(r.Problems), "problem"), plural(len(r.Warnings), "warning"))
	case len(r.Warnings) > 0:
		fmt.Fprintf(w, "bridge check: no problem, %s\n", plural(len(r.Warnings), "warning"))
	default:
		fmt.Fprintln(w, "bridge check: no problem found")
	}
}

// plural is "1 tool", "2 tools".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// Options of a check: every zero value is documented, except
// NewLauncher, which is required.
type Options struct {
	// NewLauncher builds the launcher of the server to check, in the
	// sandbox the caller chose, logging to logger: the check passes a
	// logger that takes the sandbox's "server stderr" records out of the
	// log to count and quote them. The function it returns releases the
	// launcher. An error is reported as the check's problem.
	NewLauncher func(ctx context.Context, logger *slog.Logger) (sandbox.Launcher, func(), error)
	// InitializeTimeout is how long the server may take to answer
	// initialize. Zero or negative means peer.DefaultInitializeTimeout.
	InitializeTimeout time.Duration
	// MaxMessageBytes bounds a line of the server's stdout (zero: peer's
	// default).
	MaxMessageBytes int
	// Inspection is what every listed item is held to.
	Inspection pin.Inspection
	// StopGrace is the launcher's grace for a stopping server: the check
	// waits twice this and 30 s more for it to end.
	StopGrace time.Duration
	// BufferingHint, if not empty, replaces the general advice about a
	// block-buffered stdout when the server stays silent (for example,
	// for a Python server, how to run it unbuffered).
	BufferingHint string
	// Logger receives the sandbox's warnings and errors (nil: discarded);
	// the report replaces its usual start and stop lines.
	Logger *slog.Logger
}

// Run starts the server once, inspects it, stops it, and reports what it
// found. Run never fails: what goes wrong is the report's problem.
func Run(ctx context.Context, o *Options) *Report {
	initTimeout := o.InitializeTimeout
	if initTimeout <= 0 {
		initTimeout = peer.DefaultInitializeTimeout
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Report{}
	ctx, cancel := context.WithTimeout(ctx, initTimeout+pin.CaptureTimeout)
	defer cancel()
	// The server's stderr lines reach the log as "server stderr" records
	// of the sandbox (sandbox.go): the check counts and quotes them
	// instead of logging them.
	errLines := &lineSample{}
	logger = slog.New(&stderrCapture{Handler: logger.Handler(), lines: errLines})
	launcher, closeLauncher, err := o.NewLauncher(ctx, logger)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r
	}
	defer closeLauncher()
	start := time.Now()
	proc, err := launcher.Launch(ctx, "check")
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("the server cannot be started: %v", err))
		return r
	}
	out := &stdoutWatch{r: proc.Stdout(), start: start}
	router := &endRouter{ended: make(chan struct{})}
	// The interception point sees the answer to initialize: when it came.
	var initAt atomic.Int64 // since start; 0: not yet
	answered := func(next peer.Handler) peer.Handler {
		return func(m *peer.Message) error {
			if m.Dir == peer.FromChild && m.Env.Kind == jsonrpc.KindResponse && m.Method == "initialize" {
				initAt.CompareAndSwap(0, int64(time.Since(start)))
			}
			return next(m)
		}
	}
	conn := peer.New(watchedProcess{proc, out}, router, &peer.Options{MaxMessageBytes: o.MaxMessageBytes, Intercept: answered, Logger: slog.New(slog.DiscardHandler)})
	// The initialize timeout ends the check early only when initialize is
	// unanswered by then; the lists have the rest of ctx.
	captureCtx, cancelCapture := context.WithCancel(ctx)
	defer cancelCapture()
	// What stdout held at the timeout: a buffered server flushes as it is
	// stopped, which must not count.
	var timedOut, jsonByTimeout atomic.Bool
	watchdog := time.AfterFunc(initTimeout, func() {
		if initAt.Load() == 0 {
			jsonByTimeout.Store(out.firstJSON() != 0)
			timedOut.Store(true)
			cancelCapture()
		}
	})
	lock, problems, err := pin.Capture(captureCtx, conn, o.Inspection)
	watchdog.Stop()
	elapsed := time.Since(start)
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 2*o.StopGrace+30*time.Second)
	defer cancelStop()
	if cerr := conn.Close(stopCtx); cerr != nil {
		logger.Warn("stopping the MCP server", "err", cerr)
	}
	junk, junkSample := out.junk()
	errCount, errSample := errLines.get()
	quote := func(lines []string) string {
		q := make([]string, len(lines))
		for i, l := range lines {
			q[i] = fmt.Sprintf("%q", l)
		}
		return strings.Join(q, ", ")
	}

	if err != nil {
		var exit *peer.ExitError
		ended := router.reason()
		switch {
		case out.firstJSON() == 0 && junk > 0:
			r.Problems = append(r.Problems, fmt.Sprintf("not an MCP server: it wrote %s on stdout and none was JSON-RPC (%s); an MCP stdio server writes only JSON-RPC messages on stdout, one per line, and logs to stderr; check the command and its arguments (a server may need an argument such as stdio to speak MCP)",
				plural(junk, "line"), quote(junkSample)))
		case timedOut.Load() && jsonByTimeout.Load():
			r.Problems = append(r.Problems, fmt.Sprintf("not an MCP server speaking stdio: it wrote JSON on stdout but never answered initialize within %s (--initialize-timeout); a program that echoes its input (cat) or speaks another protocol does that; check the command and its arguments",
				initTimeout))
		case errors.As(ended, &exit) && !timedOut.Load():
			// The status carries the last stderr lines.
			r.Problems = append(r.Problems, fmt.Sprintf("the server exited before answering initialize (%v); a local server gets few of the bridge's environment variables: pass one it needs with --env NAME", exit.Status))
		case timedOut.Load():
			p := fmt.Sprintf("alive but silent: the server was running but wrote nothing on stdout within %s (--initialize-timeout)", initTimeout)
			if h := o.BufferingHint; h != "" {
				p += "; " + h
			} else {
				p += "; if its stdout is block-buffered on a pipe (Python's is), run it unbuffered or flush after each message"
			}
			p += "; if it needs an environment variable, pass it with --env NAME; if it starts slowly, raise --initialize-timeout"
			r.Problems = append(r.Problems, p)
		default:
			r.Problems = append(r.Problems, fmt.Sprintf("initialize or a list failed: %v", err))
		}
	} else {
		initAt := time.Duration(initAt.Load())
		r.OK = append(r.OK, fmt.Sprintf("initialize answered in %s by %s", initAt.Round(time.Millisecond), serverName(lock)))
		r.OK = append(r.OK, fmt.Sprintf("listed %s, %s, %s and %s in %s",
			plural(len(lock.Tools)+problemsOfKind(problems, "tool"), "tool"),
			plural(len(lock.Prompts)+problemsOfKind(problems, "prompt"), "prompt"),
			plural(len(lock.Resources)+problemsOfKind(problems, "resource"), "resource"),
			plural(len(lock.ResourceTemplates)+problemsOfKind(problems, "resource template"), "resource template"),
			elapsed.Round(time.Millisecond)))
		if slow := min(slowStart, initTimeout/2); initAt > slow {
			r.Warnings = append(r.Warnings, fmt.Sprintf("slow start: %s to answer initialize (over %s); a client may give up on its first session: --warm N starts servers ahead of sessions, and --initialize-timeout must stay above it",
				initAt.Round(time.Millisecond), slow))
		}
		if junk > 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("it wrote %s on stdout besides JSON-RPC messages (%s): the bridge skips them, but stdout is the protocol's channel; log to stderr instead",
				plural(junk, "line"), quote(junkSample)))
		}
	}
	for _, p := range problems {
		r.Problems = append(r.Problems, fmt.Sprintf("%s %q: %s: it is hidden and refused by the bridge", p.Kind, p.Name, p.Problem))
	}
	if errCount > noisyStderr {
		r.Warnings = append(r.Warnings, fmt.Sprintf("stderr noise: %s on stderr while checked (%s ...); every session logs them: quiet the server, or bound them with --stderr-lines-per-second",
			plural(errCount, "line"), quote(errSample)))
	}
	return r
}

// problemsOfKind is the number of problems of a kind.
func problemsOfKind(problems []pin.Problem, kind string) int {
	n := 0
	for _, p := range problems {
		if p.Kind == kind {
			n++
		}
	}
	return n
}

// serverName is the server's name and version as initialize gave them.
func serverName(l *pin.Lock) string {
	if l.Server == nil || l.Server.Name == "" {
		return "a server without serverInfo"
	}
	return strings.TrimSpace(l.Server.Name + " " + l.Server.Version)
}

// watchedProcess is the server's process with its stdout watched.
type watchedProcess struct {
	peer.Process
	out *stdoutWatch
}

func (p watchedProcess) Stdout() io.Reader { return p.out }

// stdoutWatch passes the server's stdout on to the connection and notes,
// line by line, when the first JSON-RPC line came and which lines were not
// JSON-RPC (a line that does not start with { or [ cannot be one). It keeps
// at most the first bytes of a line and shownLines lines.
type stdoutWatch struct {
	r     io.Reader
	start time.Time

	mu      sync.Mutex
	first   time.Duration // since start, of the first JSON-RPC line; 0: none yet
	inLine  bool          // within a line whose kind is known
	head    []byte        // the start of the current line, while unknown
	nJunk   int
	samples []string
}

const stdoutHeadBytes = 200

func (w *stdoutWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p[:n] {
		if b == '\n' {
			w.endLine()
			continue
		}
		if w.inLine {
			continue
		}
		w.head = append(w.head, b)
		t := bytes.TrimSpace(w.head)
		switch {
		case len(t) == 0:
			if len(w.head) >= stdoutHeadBytes {
				w.head = w.head[:0] // white space only, so far: keep none
			}
		case t[0] == '{' || t[0] == '[':
			if w.first == 0 {
				w.first = time.Since(w.start)
			}
			w.inLine, w.head = true, w.head[:0]
		case len(w.head) >= stdoutHeadBytes:
			w.junkLine()
			w.inLine = true
		}
	}
	return n, err
}

// endLine ends a line: one still unknown with text in it is not JSON-RPC.
func (w *stdoutWatch) endLine() {
	if !w.inLine && len(bytes.TrimSpace(w.head)) > 0 {
		w.junkLine()
	}
	w.inLine, w.head = false, w.head[:0]
}

func (w *stdoutWatch) junkLine() {
	w.nJunk++
	if len(w.samples) < shownLines {
		w.samples = append(w.samples, string(bytes.TrimSpace(w.head)))
	}
	w.head = w.head[:0]
}

func (w *stdoutWatch) firstJSON() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

func (w *stdoutWatch) junk() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nJunk, w.samples
}

// endRouter keeps why the connection ended; the server's own requests
// and notifications need no answer here (nothing is called).
type endRouter struct {
	once  sync.Once
	ended chan struct{}
	err   error
}

func (*endRouter) Route(*peer.Message) {}
func (r *endRouter) Ended(err error) {
	r.once.Do(func() { r.err = err; close(r.ended) })
}

// reason is why the connection ended, once it has (Close makes sure).
func (r *endRouter) reason() error {
	<-r.ended
	return r.err
}

// lineSample counts lines and keeps the first few.
type lineSample struct {
	mu      sync.Mutex
	n       int
	samples []string
}

func (s *lineSample) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if len(s.samples) < shownLines {
		s.samples = append(s.samples, line)
	}
}

func (s *lineSample) get() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.samples
}

// stderrCapture takes the sandbox's "server stderr" records out of the log
// into lines, and passes on what else is a warning or worse (the check's
// report replaces the usual start and stop lines).
type stderrCapture struct {
	slog.Handler
	lines *lineSample
}

func (h *stderrCapture) Enabled(ctx context.Context, l slog.Level) bool {
	return true
}

func (h *stderrCapture) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "server stderr" {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "line" {
				h.lines.add(a.Value.String())
				return false
			}
			return true
		})
		return nil
	}
	if rec.Level < slog.LevelWarn || !h.Handler.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, rec)
}

func (h *stderrCapture) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &stderrCapture{Handler: h.Handler.WithAttrs(attrs), lines: h.lines}
}

func (h *stderrCapture) WithGroup(name string) slog.Handler {
	return &stderrCapture{Handler: h.Handler.WithGroup(name), lines: h.lines}
}

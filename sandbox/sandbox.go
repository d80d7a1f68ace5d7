// Package sandbox launches the stdio MCP servers that sit behind the bridge
// (one per 2025 session, and the children of the 2026-07-28 pool), either
// as local processes (Local, under a supervisor that outlives none of
// their descendants: supervise.go) or as Docker containers (Docker, with
// an optional egress allow-list: docker_egress.go). Spares wraps either
// to keep children started ahead of sessions (--warm); the per-user
// credentials of a child travel in its launch's context (launchenv.go).
//
// Everything above this package sees only two small interfaces: a Launcher
// starts a child for a session, and a Process is a running child (its stdio,
// Wait, an idempotent Stop, an ID for logs). Docker types never leave this
// package, so session/ and bridge/ work the same whatever runs the child.
//
// A child's stderr is never handed to the caller: each implementation reads it
// line by line, length-bounded, into the logger with the session ID, and keeps
// the last few lines so that an exit can be explained (see ExitError).
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// A Launcher starts one child per session.
//
// Launch must be safe for concurrent use. The returned Process is running and
// its Stdin, Stdout are ready; an error wraps ErrLaunch and names the
// session once (callers add nothing). The caller owns it and must call Stop once it
// no longer needs it (also after the child exited on its own, to release
// resources such as a container).
type Launcher interface {
	Launch(ctx context.Context, sessionID string) (Process, error)
}

// A Process is a running child.
//
// Stdin and Stdout may be used by one goroutine each; Wait, Stop and ID are
// safe for concurrent use.
type Process interface {
	// ID names the child in logs and errors: "pid 1234", "container 3f2a9c1b7d0e".
	ID() string
	// Stdin receives the server's input. Close half-closes it, which asks a
	// well-behaved stdio server to exit.
	Stdin() io.WriteCloser
	// Stdout yields the server's output. It returns io.EOF once the child has
	// closed its stdout (usually because it exited).
	Stdout() io.Reader
	// Wait blocks until the child has exited and its output has been drained.
	// It returns nil for a zero exit status and an *ExitError otherwise.
	// It may be called any number of times, from any goroutine.
	Wait() error
	// Stop ends the child in bounded, escalating steps: close stdin, wait up
	// to the grace period, send SIGTERM (to the whole process group, or stop
	// the container), wait again, then SIGKILL. A container is removed.
	// Stop is idempotent and returns when the child is gone or ctx is done.
	Stop(ctx context.Context) error
}

// ErrLaunch wraps every error of a child that could not be started.
var ErrLaunch = errors.New("cannot start the MCP server")

// ExitError describes how a child ended when it did not exit with status 0.
type ExitError struct {
	// Code is the exit status, or -1 if the child was killed by a signal.
	Code int
	// Signal names the signal that killed the child ("killed", "terminated"), if any.
	Signal string
	// OOMKilled reports that the child was killed for exceeding its memory limit.
	OOMKilled bool
	// Stderr holds the last lines the child wrote to stderr, oldest first.
	Stderr []string
}

func (e *ExitError) Error() string {
	var b strings.Builder
	switch {
	case e.OOMKilled:
		b.WriteString("the MCP server ran out of memory and was killed")
	case e.Signal != "":
		fmt.Fprintf(&b, "the MCP server was killed by signal %s", e.Signal)
	default:
		fmt.Fprintf(&b, "the MCP server exited with status %d", e.Code)
	}
	if len(e.Stderr) > 0 {
		b.WriteString("; last stderr lines: ")
		b.WriteString(strings.Join(e.Stderr, " | "))
	}
	return b.String()
}

// Defaults shared by the implementations.
const (
	// DefaultStderrLineBytes bounds one logged stderr line; longer lines are cut.
	DefaultStderrLineBytes = 4096
	// DefaultStderrTailLines is how many stderr lines an ExitError keeps.
	DefaultStderrTailLines = 10
	// DefaultStderrLinesPerSecond is how many stderr lines per second one
	// session may log, on average (100,000 lines of 4 KB from one
	// child wrote 307 MB of log in two minutes).
	DefaultStderrLinesPerSecond = 100
	// DefaultStderrBurst is how many stderr lines one session may log at
	// once, above the rate, before lines are dropped: a stack trace fits.
	DefaultStderrBurst = 500
	// StderrDropReportInterval is how often, at most, a session whose
	// stderr lines are being dropped logs how many were.
	StderrDropReportInterval = 10 * time.Second
)

// StderrRate bounds the stderr lines one session logs: LinesPerSecond on
// average, Burst at once. Lines beyond it are still read (the child never
// blocks) and still kept for ExitError, but not logged; the number dropped
// is logged at most every StderrDropReportInterval and when stderr ends.
type StderrRate struct {
	// LinesPerSecond: zero means DefaultStderrLinesPerSecond; negative
	// means no limit.
	LinesPerSecond float64
	// Burst: zero or negative means DefaultStderrBurst.
	Burst int
}

func (r StderrRate) limiter() *rate.Limiter {
	if r.LinesPerSecond < 0 {
		return nil
	}
	if r.LinesPerSecond == 0 {
		r.LinesPerSecond = DefaultStderrLinesPerSecond
	}
	if r.Burst <= 0 {
		r.Burst = DefaultStderrBurst
	}
	return rate.NewLimiter(rate.Limit(r.LinesPerSecond), r.Burst)
}

// stderrLogger reads a child's stderr line by line into the log and keeps
// the last lines for ExitError. A line longer than the bound is cut (the rest
// of it is discarded), so a flooding child can neither block nor exhaust
// memory: the reader always keeps draining, holds at most one line of
// maxLine+1 bytes, and the tail at most max lines of maxLine bytes plus the
// truncation marker.
//
// Lines end at '\n'; one trailing '\r' is dropped (CRLF). Empty lines are
// neither logged nor kept: they would only push useful lines out of the tail.
// A cut never splits a UTF-8 sequence, so log handlers get whole runes.
type stderrLogger struct {
	logger  *slog.Logger
	maxLine int
	limit   *rate.Limiter // nil: no limit; used by run's goroutine only
	dropped int           // lines not logged since the last report; run's goroutine only
	report  time.Time     // when dropped lines were last reported

	mu   sync.Mutex
	tail []string // ring of the last lines, oldest first once full
	next int      // next slot of tail to overwrite once full
	max  int
}

// truncatedMarker ends a logged line that was cut at the bound.
const truncatedMarker = " …[truncated]"

func newStderrLogger(logger *slog.Logger, maxLine, tailLines int) *stderrLogger {
	if logger == nil {
		logger = slog.Default()
	}
	if maxLine <= 0 {
		maxLine = DefaultStderrLineBytes
	}
	if tailLines <= 0 {
		tailLines = DefaultStderrTailLines
	}
	return &stderrLogger{logger: logger, maxLine: maxLine, max: tailLines, limit: StderrRate{}.limiter(), report: time.Now()}
}

// withRate replaces the default rate limit, before run.
func (s *stderrLogger) withRate(r StderrRate) *stderrLogger {
	s.limit = r.limiter()
	return s
}

// log logs one line, or counts it as dropped when over the rate.
func (s *stderrLogger) log(text string) {
	if s.limit != nil && !s.limit.Allow() {
		s.dropped++
		if now := time.Now(); now.Sub(s.report) >= StderrDropReportInterval {
			s.reportDropped(now)
		}
		return
	}
	if s.dropped > 0 {
		s.reportDropped(time.Now())
	}
	s.logger.Info("server stderr", "line", text)
}

// reportDropped logs the count of dropped lines, if any, and resets it.
func (s *stderrLogger) reportDropped(now time.Time) {
	s.report = now
	if s.dropped == 0 {
		return
	}
	s.logger.Warn("server stderr: lines over the rate limit were not logged",
		"dropped", s.dropped, "hint", "raise --stderr-lines-per-second or --stderr-burst to log more")
	s.dropped = 0
}

// run drains r until EOF or error. It never stops reading early.
func (s *stderrLogger) run(r io.Reader) {
	// One byte more than the bound: a CRLF line of exactly maxLine bytes
	// must fit with its '\r' so that it is not reported as truncated.
	buf := make([]byte, 0, s.maxLine+1)
	chunk := make([]byte, 4096) // small: every idle child has one
	truncated := false          // bytes of the current line were discarded
	emit := func() {
		line := buf
		if !truncated {
			line = bytes.TrimSuffix(line, []byte("\r"))
		}
		if len(line) > s.maxLine {
			line = line[:s.maxLine]
			truncated = true
		}
		text := ""
		if truncated {
			text = string(cutAtRune(line)) + truncatedMarker
		} else {
			text = string(line)
		}
		buf = buf[:0]
		truncated = false
		if text == "" {
			return
		}
		s.add(text)
		s.log(text)
	}
	for {
		n, err := r.Read(chunk)
		data := chunk[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			part := data
			if i >= 0 {
				part = data[:i]
			}
			room := s.maxLine + 1 - len(buf)
			if len(part) > room {
				buf = append(buf, part[:room]...)
				truncated = true
			} else {
				buf = append(buf, part...)
			}
			if i < 0 {
				break
			}
			emit()
			data = data[i+1:]
		}
		if err != nil {
			if len(buf) > 0 || truncated {
				emit()
			}
			s.reportDropped(time.Now())
			return
		}
	}
}

// cutAtRune drops a UTF-8 sequence that the cut at the end of b split.
func cutAtRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}

func (s *stderrLogger) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tail) < s.max {
		s.tail = append(s.tail, line)
		return
	}
	s.tail[s.next] = line
	s.next = (s.next + 1) % s.max
}

// lines returns the kept lines, oldest first.
func (s *stderrLogger) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.tail))
	out = append(out, s.tail[s.next:]...)
	out = append(out, s.tail[:s.next]...)
	return out
}

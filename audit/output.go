package audit

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Bounds of the writer (a FIFO whose reader stalled, or
// --audit-log - into a stalled pipe, hung every session's reader, each
// waiting for the write under the lock; and on a full disk a record was
// cut and the next appended to it on the same line).
const (
	// DefaultWriteTimeout is how long a request waits for its line to be
	// written. Past it the log is stalled: requests no longer wait, their
	// lines queue (up to DefaultQueueBytes) and are written once the
	// writer moves again.
	DefaultWriteTimeout = time.Second
	// DefaultQueueBytes bounds the lines waiting for a stalled writer;
	// beyond it records are dropped, and counted (Log.Lost).
	DefaultQueueBytes = 1 << 20
)

// output is where a Log and its ForServer views write.
//
// When no write is under way, a request writes its own line, one write
// per line, and returns once it is written: no goroutine, no timer, and a
// crash loses at most the lines being written. A pipe, FIFO or socket the
// process opened non-blocking (modeNonblock) is tried without blocking;
// where its reader is slow, the rest of the line goes to the writer
// goroutine. Lines of requests that come while a write is under way queue
// (up to queueBytes) behind the writer goroutine, which writes them, in
// order, one write per line, and runs while lines wait; their requests
// wait until their line is written or until the write under way has taken
// writeTimeout: the log is then stalled, and requests stop waiting until
// a write completes again. So a blocked write(2) (a FIFO or pipe whose
// reader stalled) stalls no request past writeTimeout, except, where the
// write cannot be tried without blocking (a regular file: modeDirect), the
// one request whose own write blocks (a hung network file system): it
// waits for its write, the others do not. Standard output in blocking
// mode (a pipe the bridge did not open) is written by the goroutine only
// (modeHandoff), as a stalled reader there is common.
//
// A write that fails part-way leaves the rest of its line (tail), which
// is written before any other line: a line is whole or, while the failure
// lasts, followed by nothing; two records never share a line. Lines that
// could not be written, and lines dropped because the queue was full, are
// counted in lost and logged: at the first loss, and with the count when
// writes work again.
type output struct {
	w            io.Writer
	closer       io.Closer
	logger       *slog.Logger
	writeTimeout time.Duration
	queueBytes   int
	mode         writeMode
	// raw and rawWrite write without blocking (modeNonblock): rawWrite
	// is o.tryRaw, made once, and tries rawBuf, setting rawN and rawErr
	// (held by whoever is busy).
	raw      syscall.RawConn
	rawWrite func(fd uintptr) bool
	rawBuf   []byte
	rawN     int
	rawErr   error

	mu      sync.Mutex
	cond    sync.Cond // on mu: broadcast when lines were written, or the log stalled
	waiters int       // requests (and close) waiting on cond
	queue   []byte    // lines waiting for the goroutine, each ending in '\n'
	spare   []byte    // the goroutine's previous queue, to reuse
	queued  uint64    // lines taken so far (written directly or queued)
	done    uint64    // lines taken written or lost so far, in order
	// busy: a write is under way, started at started: a request's own
	// (then the queue was empty; started is zero until a request waits),
	// or, while running, the goroutine's. The one busy owns w, tail and
	// the raw fields.
	busy    bool
	running bool // the writer goroutine runs
	started time.Time
	stalled bool
	closed  bool
	// abandoned: Close gave up waiting for a blocked write; the
	// goroutine stops after its write.
	abandoned bool
	broken    bool  // the last write failed: logged once until one succeeds
	lostRun   int64 // lost since the log last worked
	tail      []byte
	watch     *time.Timer // checks for a stall while requests wait
	armed     bool        // watch is set

	lost atomic.Int64
}

// writeMode is how requests write their lines (see output).
type writeMode int

const (
	modeDirect   writeMode = iota // the request writes: a regular file, any io.Writer that is no file
	modeNonblock                  // the request tries a write that cannot block; the goroutine writes the rest
	modeHandoff                   // the goroutine writes every line
)

// errWouldBlock: a non-blocking write found no room.
var errWouldBlock = errors.New("the write would block")

// lostTotal counts the records lost by every log of the process.
var lostTotal atomic.Int64

// LostRecords is how many records every audit log of the process lost
// (mcp_bridge_audit_records_lost_total).
func LostRecords() int64 { return lostTotal.Load() }

func newOutput(w io.Writer, o *Options) *output {
	out := &output{w: w, logger: o.Logger, writeTimeout: o.WriteTimeout, queueBytes: o.QueueBytes}
	if out.writeTimeout <= 0 {
		out.writeTimeout = DefaultWriteTimeout
	}
	if out.queueBytes <= 0 {
		out.queueBytes = DefaultQueueBytes
	}
	if f, ok := w.(*os.File); ok {
		out.mode, out.raw = fileMode(f)
		if out.mode == modeNonblock {
			out.rawWrite = out.tryRaw
		}
	}
	out.cond.L = &out.mu
	return out
}

// put writes line (which it does not keep), or queues a copy and waits
// until it is written, unless the log is stalled (see output).
func (o *output) put(line []byte) {
	o.mu.Lock()
	if o.closed {
		o.loseLocked(1, "the audit log is closed")
		o.mu.Unlock()
		return
	}
	if !o.busy && len(o.tail) == 0 && o.mode != modeHandoff {
		// No write under way, so the queue is empty: this request writes.
		o.queued++
		mine := o.queued
		// Its start is read only if a request comes to wait for it (no
		// clock read per line): a write is then timed from that request's
		// arrival, which bounds that request's wait all the same.
		o.busy, o.started = true, time.Time{}
		o.mu.Unlock()
		written, failed, rest, err := o.direct(line)
		o.mu.Lock()
		if rest != nil {
			// A non-blocking write found no room: the rest of the line
			// goes first, then what queued meanwhile, on the goroutine.
			o.queue = append(rest, o.queue...)
			o.running = true
			go o.run()
			o.waitLocked(mine)
			o.mu.Unlock()
			return
		}
		o.finishLocked(mine, written, failed, err)
		if len(o.queue) > 0 {
			o.running = true // keeps busy
			go o.run()
		} else {
			o.busy = false
		}
		o.mu.Unlock()
		return
	}
	if len(o.queue)+len(line) > o.queueBytes && len(o.queue) > 0 {
		o.loseLocked(1, "the audit log's writer is blocked and its queue is full")
		o.mu.Unlock()
		return
	}
	o.queue = append(o.queue, line...)
	o.queued++
	mine := o.queued
	if !o.busy {
		o.busy, o.running = true, true
		go o.run()
	}
	o.waitLocked(mine)
	o.mu.Unlock()
}

// waitLocked waits until line number mine is written or lost, or the log
// is stalled.
func (o *output) waitLocked(mine uint64) {
	o.waiters++
	for o.done < mine && !o.stalled && !o.abandoned {
		if !o.armed {
			o.armLocked()
		}
		o.cond.Wait()
	}
	o.waiters--
}

// armLocked sets watch to check for a stall when the write under way will
// have taken writeTimeout.
func (o *output) armLocked() {
	if o.started.IsZero() {
		o.started = time.Now() // a request's own write (see put)
	}
	d := o.writeTimeout - time.Since(o.started)
	o.armed = true
	if o.watch == nil {
		o.watch = time.AfterFunc(d, o.check)
	} else {
		o.watch.Reset(d)
	}
}

// check runs when the write under way may have taken writeTimeout: if it
// has, the log is stalled, and requests stop waiting for it.
func (o *output) check() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed = false
	if !o.busy || o.stalled || o.waiters == 0 {
		return
	}
	if time.Since(o.started) < o.writeTimeout {
		o.armLocked() // a later write: check again when it will have taken writeTimeout
		return
	}
	o.stalled = true
	o.logger.Error("writing the audit log has blocked for longer than its timeout: requests no longer wait for it; their records queue, and are lost beyond the queue's bound",
		"timeout", o.writeTimeout, "queue_bytes", o.queueBytes)
	o.cond.Broadcast()
}

// finishLocked records the end of a write of the lines up to n.
func (o *output) finishLocked(n uint64, written, failed int, err error) {
	o.done = n
	o.loseLocked(failed, "writing the audit log failed")
	switch {
	case err != nil && !o.broken:
		o.logger.Error("cannot write the audit log: records are lost until it works again", "err", err)
		o.broken = true
	case err == nil && written > 0:
		if o.broken || o.stalled || o.lostRun > 0 {
			o.logger.Info("the audit log is written again", "lost", o.lostRun)
		}
		o.broken, o.lostRun = false, 0
	}
	// The write under way is over: a later one is timed afresh.
	o.stalled = false
	if o.waiters > 0 {
		o.cond.Broadcast()
	}
}

// loseLocked counts n records lost, logging the first of a run.
func (o *output) loseLocked(n int, why string) {
	if n <= 0 {
		return
	}
	o.lost.Add(int64(n))
	lostTotal.Add(int64(n))
	if o.lostRun == 0 {
		o.logger.Error("audit records are being lost: "+why+"; the count is in mcp_bridge_audit_records_lost_total, and logged when writes work again", "lost", n)
	}
	o.lostRun += int64(n)
}

// direct writes one line for the request that is busy (tail is empty).
// In modeNonblock a write that finds no room returns the rest of the line
// (a copy) for the goroutine to write, and nothing else.
func (o *output) direct(line []byte) (written, failed int, rest []byte, err error) {
	if o.mode != modeNonblock {
		written, failed, err = o.writeLines(line)
		return written, failed, nil, err
	}
	o.rawBuf, o.rawN, o.rawErr = line, 0, nil
	if cerr := o.raw.Write(o.rawWrite); cerr != nil && o.rawErr == nil {
		o.rawErr = cerr
	}
	n, err := o.rawN, o.rawErr
	o.rawBuf, o.rawErr = nil, nil
	switch {
	case err == nil:
		return 1, 0, nil, nil
	case err == errWouldBlock:
		return 0, 0, bytes.Clone(line[n:]), nil
	case n > 0:
		o.tail = bytes.Clone(line[n:])
		return 0, 0, nil, err
	}
	return 0, 1, nil, err
}

// run writes the queue until it is empty, then ends the busy time it was
// started for.
func (o *output) run() {
	o.mu.Lock()
	for len(o.queue) > 0 && !o.abandoned {
		batch, n := o.queue, o.queued
		o.queue, o.spare = o.spare[:0], nil
		o.started = time.Now()
		o.mu.Unlock()
		written, failed, err := o.writeLines(batch)
		o.mu.Lock()
		o.spare = batch[:0]
		o.finishLocked(n, written, failed, err)
	}
	if len(o.queue) > 0 { // closed while stalled: these will not be written
		o.loseLocked(bytes.Count(o.queue, []byte{'\n'}), "the audit log was closed while its writer was blocked")
		o.done, o.queue = o.queued, o.queue[:0]
	}
	if o.closed && len(o.tail) > 0 {
		o.loseLocked(1, "the audit log was closed with a record cut part-way")
		o.tail = nil
	}
	o.running, o.busy = false, false
	o.cond.Broadcast() // for close
	o.mu.Unlock()
}

// writeLines writes the tail of a cut line, then each line of batch in a
// write of its own. It returns how many lines it wrote, and how many it
// could not write: after a failure the rest of the batch is lost, and
// the rest of a line cut part-way is kept in tail.
func (o *output) writeLines(batch []byte) (written, failed int, err error) {
	if len(o.tail) > 0 {
		n, err := o.w.Write(o.tail)
		o.tail = o.tail[n:]
		if err != nil || len(o.tail) > 0 {
			if err == nil {
				err = io.ErrShortWrite
			}
			return 0, bytes.Count(batch, []byte{'\n'}), err
		}
		o.tail = nil
	}
	for len(batch) > 0 {
		i := bytes.IndexByte(batch, '\n')
		line := batch[:i+1]
		batch = batch[i+1:]
		n, err := o.w.Write(line)
		if err == nil && n < len(line) {
			err = io.ErrShortWrite
		}
		if err != nil {
			failed = bytes.Count(batch, []byte{'\n'})
			if n > 0 {
				// Cut: the rest goes first next time, so that the next
				// record starts on a line of its own.
				o.tail = bytes.Clone(line[n:])
			} else {
				failed++
			}
			return written, failed, err
		}
		written++
	}
	return written, 0, nil
}

// close stops taking lines, waits for the write under way and those
// queued while the writer makes progress (giving up once it has written
// nothing for writeTimeout), and closes the file.
func (o *output) close() error {
	o.mu.Lock()
	o.closed = true
	o.waiters++
	for o.busy {
		done, tail := o.done, len(o.tail)
		expired := false
		t := time.AfterFunc(o.writeTimeout, func() {
			o.mu.Lock()
			expired = true
			o.cond.Broadcast()
			o.mu.Unlock()
		})
		for o.busy && o.done == done && !expired {
			o.cond.Wait()
		}
		t.Stop()
		if o.busy && o.done == done && len(o.tail) == tail {
			// Blocked: the goroutine stops after its write; closing the
			// file may end that write (a pipe or FIFO).
			o.abandoned = true
			o.cond.Broadcast()
			break
		}
	}
	o.waiters--
	if o.watch != nil {
		o.watch.Stop()
	}
	o.mu.Unlock()
	if o.closer == nil {
		return nil
	}
	return o.closer.Close()
}

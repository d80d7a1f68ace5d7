package audit

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
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
// Lines are written by one goroutine, in order, one write per line, so
// that a blocked write(2) stalls no request: a request queues its line and
// waits until it is written (so a crash loses at most the lines being
// written, as before) or until the write under way has taken
// writeTimeout; then the log is stalled and requests stop waiting until a
// write completes again. The goroutine runs while lines wait, and ends
// when none does.
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

	mu      sync.Mutex
	cond    sync.Cond // on mu: broadcast when lines were written, or the log stalled
	queue   []byte    // lines waiting, each ending in '\n'
	spare   []byte    // the writer's previous queue, to reuse
	queued  uint64    // lines queued so far
	done    uint64    // lines of the queue written or lost so far
	running bool      // the writer goroutine runs
	writing bool      // it is in a write, started at writeStart
	started time.Time
	stalled bool
	closed  bool
	// abandoned: Close gave up waiting for a blocked writer, which stops
	// after its write.
	abandoned bool
	broken    bool  // the last write failed: logged once until one succeeds
	lostRun   int64 // lost since the log last worked
	tail      []byte
	watch     *time.Timer // fires writeTimeout after a write started

	lost atomic.Int64
}

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
	out.cond.L = &out.mu
	return out
}

// put queues line (copied) and waits until it is written, unless the log
// is stalled or the wait takes writeTimeout.
func (o *output) put(line []byte) {
	o.mu.Lock()
	if o.closed {
		o.loseLocked(1, "the audit log is closed")
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
	if !o.running {
		o.running = true
		go o.run()
	}
	for o.done < mine && !o.stalled {
		o.cond.Wait()
	}
	o.mu.Unlock()
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

// run writes the queue until it is empty.
func (o *output) run() {
	o.mu.Lock()
	for len(o.queue) > 0 && !o.abandoned {
		batch, n := o.queue, o.queued
		o.queue, o.spare = o.spare[:0], nil
		o.writing, o.started = true, time.Now()
		if o.watch == nil {
			o.watch = time.AfterFunc(o.writeTimeout, o.check)
		} else {
			o.watch.Reset(o.writeTimeout)
		}
		o.mu.Unlock()
		written, failed, err := o.writeLines(batch)
		o.mu.Lock()
		o.watch.Stop()
		o.writing = false
		o.done = n
		o.spare = batch[:0]
		o.loseLocked(failed, "writing the audit log failed")
		switch {
		case err != nil && !o.broken:
			o.logger.Error("cannot write the audit log: records are lost until it works again", "err", err)
			o.broken = true
		case err == nil && written > 0:
			if o.broken || o.stalled || o.lostRun > 0 {
				o.logger.Info("the audit log is written again", "lost", o.lostRun)
			}
			o.broken, o.stalled, o.lostRun = false, false, 0
		}
		o.cond.Broadcast()
	}
	if len(o.queue) > 0 { // closed while stalled: these will not be written
		o.loseLocked(bytes.Count(o.queue, []byte{'\n'}), "the audit log was closed while its writer was blocked")
		o.done, o.queue = o.queued, o.queue[:0]
	}
	if o.closed && len(o.tail) > 0 {
		o.loseLocked(1, "the audit log was closed with a record cut part-way")
		o.tail = nil
	}
	o.running = false
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

// check runs writeTimeout after a write started: if it still runs, the log
// is stalled, and requests stop waiting for it.
func (o *output) check() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.writing || o.stalled {
		return
	}
	if left := o.writeTimeout - time.Since(o.started); left > 0 {
		o.watch.Reset(left) // a stale firing, for an earlier write
		return
	}
	o.stalled = true
	o.logger.Error("writing the audit log has blocked for longer than its timeout: requests no longer wait for it; their records queue, and are lost beyond the queue's bound",
		"timeout", o.writeTimeout, "queue_bytes", o.queueBytes)
	o.cond.Broadcast()
}

// close stops taking lines, waits for those queued while the writer makes
// progress (giving up once it has written nothing for writeTimeout), and
// closes the file.
func (o *output) close() error {
	o.mu.Lock()
	o.closed = true
	for o.running {
		done, tail := o.done, len(o.tail)
		expired := false
		t := time.AfterFunc(o.writeTimeout, func() {
			o.mu.Lock()
			expired = true
			o.cond.Broadcast()
			o.mu.Unlock()
		})
		for o.running && o.done == done && !expired {
			o.cond.Wait()
		}
		t.Stop()
		if o.running && o.done == done && len(o.tail) == tail {
			// Blocked: the writer stops after its write; closing the
			// file may end that write (a pipe or FIFO).
			o.abandoned = true
			break
		}
	}
	o.mu.Unlock()
	if o.closer == nil {
		return nil
	}
	return o.closer.Close()
}

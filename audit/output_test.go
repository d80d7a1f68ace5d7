package audit_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-bridge/mcp-bridge/audit"
)

// A FIFO whose reader stalled hung every request
// writing a line (each waited for the write, under the log's lock). Now
// requests wait at most the write timeout; lines queue up to the bound and
// beyond it are counted as lost; once the reader reads again, what was
// queued arrives, every line whole.
func TestStalledFIFODoesNotBlockRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	// The reader opens it, and reads nothing until told.
	rd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	l, err := audit.Open(path, &audit.Options{Logger: quiet, WriteTimeout: 50 * time.Millisecond, QueueBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	// 2,000 records of some 300 bytes: far more than a pipe's 64 KiB
	// buffer and the queue's 64 KiB.
	const n = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := range n / 4 {
					l.Alert("session", nil, "tool", string(bytes.Repeat([]byte{'a' + byte(w)}, 200))+itoa(i), "p")
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang detector, not a timing goal
		t.Fatal("writing records blocked while the FIFO's reader stalled")
	}
	lost := l.Lost()
	if lost == 0 {
		t.Fatalf("no record counted lost, with %d records over a stalled FIFO and a 64 KiB queue", n)
	}
	// The reader reads again: what was queued arrives, whole.
	if err := syscall.SetNonblock(int(rd.Fd()), false); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	lines := 0
	var readErr error
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			var r audit.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				readErr = err
				return
			}
			lines++
		}
	}()
	go func() { closed <- l.Close() }()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-readDone
	if readErr != nil {
		t.Fatalf("a line that is not a whole record: %v", readErr)
	}
	lost = l.Lost() // those the close cut short too, if the reader was slow
	if int64(lines)+lost != n {
		t.Fatalf("%d lines read and %d lost, of %d records", lines, lost, n)
	}
	t.Logf("%d records written, %d counted lost", lines, lost)
}

// fullDisk accepts limit bytes in all, the last write cut part-way, then
// fails with ENOSPC until room is made.
type fullDisk struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	room := d.limit - d.buf.Len()
	if room >= len(p) {
		return d.buf.Write(p)
	}
	d.buf.Write(p[:max(room, 0)])
	return max(room, 0), &os.PathError{Op: "write", Path: "audit.log", Err: syscall.ENOSPC}
}

func (d *fullDisk) grow(n int) {
	d.mu.Lock()
	d.limit += n
	d.mu.Unlock()
}

// On a full disk a record was cut part-way and the next appended to it on
// the same line. Now the rest of a cut line is written first once there
// is room, records that could not be written are counted, and every line
// is one whole record.
func TestFullDiskNeverMergesRecords(t *testing.T) {
	d := &fullDisk{limit: 250}
	l := audit.New(d, &audit.Options{Logger: quiet})
	for i := range 5 { // each line is about 180 bytes: the second is cut
		l.Alert("session", nil, "tool", "t"+itoa(i), "p")
	}
	d.grow(1 << 20)
	for i := range 3 {
		l.Alert("session", nil, "tool", "u"+itoa(i), "p")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var tools []string
	sc := bufio.NewScanner(bytes.NewReader(d.buf.Bytes()))
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a line that is not one record: %q: %v", sc.Bytes(), err)
		}
		tools = append(tools, r.Tool)
	}
	want := []string{"t0", "t1", "u0", "u1", "u2"}
	if len(tools) != len(want) {
		t.Fatalf("records %v, want %v", tools, want)
	}
	for i := range want {
		if tools[i] != want[i] {
			t.Fatalf("records %v, want %v", tools, want)
		}
	}
	if lost := l.Lost(); lost != 3 {
		t.Fatalf("%d records counted lost, want 3 (t2, t3, t4)", lost)
	}
}

// gate is a writer whose writes each wait until the test lets them
// through (a hung network file system, while gated).
type gate struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	entered chan struct{} // a write has begun
	open    chan struct{} // closed: writes go through
}

func (g *gate) Write(p []byte) (int, error) {
	g.entered <- struct{}{}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// A request writes its own line when no write is under way (no goroutine
// of the log's), and its line is written when it returns. While that
// write blocks, later requests queue behind the log's goroutine and wait
// at most WriteTimeout; every line arrives, in order, once the write
// completes.
func TestBlockedDirectWriteStallsOnlyItsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{entered: make(chan struct{}, 100), open: make(chan struct{})}
		l := audit.New(g, &audit.Options{Logger: quiet, WriteTimeout: time.Second})
		first := make(chan struct{})
		go func() {
			defer close(first)
			l.Alert("session", nil, "tool", "t0", "p")
		}()
		<-g.entered // t0's request writes, and blocks
		start := time.Now()
		for i := 1; i < 5; i++ {
			l.Alert("session", nil, "tool", "t"+itoa(i), "p")
		}
		// The first of them waited for the write under way to take
		// WriteTimeout; the log was then stalled, and the others did not
		// wait.
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("requests behind a blocked write waited %v in all, want the write timeout, 1s", waited)
		}
		select {
		case <-first:
			t.Fatal("the request whose write is blocked returned before its line was written")
		default:
		}
		close(g.open)
		<-first
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		var tools []string
		for line := range strings.Lines(g.String()) {
			var r audit.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("a line that is not one record: %q: %v", line, err)
			}
			tools = append(tools, r.Tool)
		}
		if want := []string{"t0", "t1", "t2", "t3", "t4"}; !slices.Equal(tools, want) {
			t.Fatalf("records %v, want %v", tools, want)
		}
		if lost := l.Lost(); lost != 0 {
			t.Fatalf("%d records lost", lost)
		}
	})
}

// A request returns once its line is written (the crash promise), whether
// it wrote the line itself or its line queued behind another request's
// write.
func TestRequestReturnsOnceItsLineIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{entered: make(chan struct{}, 100), open: make(chan struct{})}
		l := audit.New(g, &audit.Options{Logger: quiet})
		var wg sync.WaitGroup
		returned := make(chan string, 4)
		for i := range 4 {
			wg.Go(func() {
				tool := "t" + itoa(i)
				l.Alert("session", nil, "tool", tool, "p")
				returned <- tool
			})
		}
		synctest.Wait() // one write under way, three lines queued
		close(g.open)
		wg.Wait()
		close(returned)
		got := g.String()
		for tool := range returned {
			if !strings.Contains(got, `"tool":"`+tool+`"`) {
				t.Errorf("the request of %s returned before its line was written", tool)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

package bridge

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// limitedPair is a connection accepted through LimitListener and its
// client end, over loopback TCP.
func limitedPair(t *testing.T) (*limitConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lln := LimitListener(ln, nil)
	t.Cleanup(func() { lln.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := lln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*limitConn), client
}

// waitActive waits until an operation of d is in progress on the
// connection (a goroutine is inside Read or Write).
func waitActive(d *lazyDeadline) {
	for d.active.Load() == 0 {
		runtime.Gosched()
	}
}

// A deadline set while nothing is read acts on the next read: one in the
// past ends it at once, one lifted before it does not act at all.
func TestLimitConnDeferredReadDeadline(t *testing.T) {
	c, client := limitedPair(t)
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read after a past deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Now().Add(-time.Second))
	c.SetReadDeadline(time.Time{})
	io.WriteString(client, "x")
	if n, err := c.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("a read after a lifted deadline: %d %v", n, err)
	}
	// A deadline applied at a read's start ends it when it passes.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %v, want a timeout", err)
	}
}

// A deadline set during a read acts on it at once, as net/http's abort of
// its background read needs, and so does lifting one.
func TestLimitConnReadDeadlineDuringRead(t *testing.T) {
	c, client := limitedPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	waitActive(&c.rd)
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read whose deadline passed while it waited: %v, want a timeout", err)
	}

	c.SetReadDeadline(time.Now().Add(time.Hour))
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	waitActive(&c.rd)
	c.SetDeadline(time.Time{})
	if c.rd.set != (time.Time{}) {
		t.Fatalf("a deadline lifted during a read still in effect: %v", c.rd.set)
	}
	io.WriteString(client, "x")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Write deadlines: deferred while nothing is written, at once during a
// write that waits for the client.
func TestLimitConnWriteDeadline(t *testing.T) {
	c, _ := limitedPair(t)
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write after a past deadline: %v, want a timeout", err)
	}
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	c.SetWriteDeadline(time.Time{})
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("a write after a lifted deadline: %v", err)
	}
	// The client reads nothing: a large write waits until its deadline is
	// set, then ends.
	done := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte(strings.Repeat("x", 64<<20)))
		done <- err
	}()
	waitActive(&c.wd)
	c.SetDeadline(time.Now().Add(-time.Second))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write whose deadline passed while it waited: %v, want a timeout", err)
	}
}

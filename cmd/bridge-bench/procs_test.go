package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestProcSwitches sees a thread of this process block (a voluntary
// context switch) in the sum over its threads: a thread of its own reads
// a blocking pipe, and is written to only once the kernel shows it asleep.
func TestProcSwitches(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // blocking: read holds the thread
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	before, _ := procSwitches(os.Getpid())
	tid := make(chan int)
	read := make(chan error)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		tid <- syscall.Gettid()
		_, err := syscall.Read(p[0], make([]byte, 1))
		read <- err
	}()
	stat := fmt.Sprintf("/proc/self/task/%d/stat", <-tid)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// The state (field 3) follows the command name's ')'.
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); f[0] == "S" {
			break
		}
		runtime.Gosched()
	}
	mid, _ := procSwitches(os.Getpid())
	if _, err := syscall.Write(p[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if mid <= before {
		t.Errorf("voluntary switches %d, then %d with a thread asleep in read: want more", before, mid)
	}
}

package main

import (
	"strings"
	"testing"
)

// TestCollectorShare reads a cachegrind file as valgrind 3.19 writes it: a
// function may appear under several files, and only the collector's are
// summed.
func TestCollectorShare(t *testing.T) {
	const file = `desc: I1 cache:         32768 B, 64 B, 8-way associative
cmd: /bin/bridge --listen 127.0.0.1:0
events: Ir
fl=/go/src/runtime/mgcmark.go
fn=runtime.scanobject
10 100
11 20
fn=runtime.(*gcWork).tryGet
5 3
fl=/go/src/runtime/malloc.go
fn=runtime.mallocgcSmallScanNoHeader
1 1000
fn=runtime.mallocgc
2 2000
fl=/go/src/runtime/mgcsweep.go
fn=runtime.(*sweepLocked).sweep
7 40
fl=/repo/jsonrpc/scan.go
fn=github.com/mcp-bridge/mcp-bridge/jsonrpc.(*scanner).skipString
3 5000
fl=/go/src/runtime/mgcmark_greenteagc.go
fn=runtime.scanobject
12 7
fn=runtime.tryDeferToSpanScan
4 9
summary: 8179
`
	got, err := collectorShare(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	// scanobject 127, tryGet 3, sweep 40, tryDeferToSpanScan 9; not the
	// allocator's functions (mallocgc*), not a scanner of another package.
	if want := int64(127 + 3 + 40 + 9); got != want {
		t.Errorf("collectorShare = %d, want %d", got, want)
	}
	// With --cache-sim=yes each line has more counts after Ir.
	sim := "events: Ir I1mr ILmr\nfn=runtime.scanobject\n10 100 7 1\nfn=runtime.mallocgc\n2 2000 3 0\nfn=runtime.gcDrain\n4 20\n"
	if got, err := collectorShare(strings.NewReader(sim)); err != nil || got != 120 {
		t.Errorf("collectorShare of a file with cache events = %d, %v; want 120 (Ir only)", got, err)
	}
	if _, err := collectorShare(strings.NewReader("fn=runtime.scanobject\n10 x\n")); err == nil {
		t.Error("collectorShare took a count that is not a number")
	}
}

// TestCollectorFunc names functions on each side of the line.
func TestCollectorFunc(t *testing.T) {
	for name, want := range map[string]bool{
		"runtime.gcDrain":                     true,
		"runtime.(*gcWork).balance":           true,
		"runtime.scanblock":                   true,
		"runtime.scanObjectsSmall":            true,
		"runtime.greyobject":                  true,
		"runtime.findObject":                  true,
		"runtime.typePointers.next":           true,
		"runtime.(*mspan).typePointersOf":     true,
		"runtime.(*mspan).moveInlineMarks":    true,
		"runtime.markBits.setMarked":          true,
		"runtime.sweepone":                    true,
		"runtime.(*scavengeIndex).free":       true,
		"runtime.(*pallocBits).summarize":     true,
		"runtime.(*pageAlloc).update":         true,
		"runtime.(*spanSet).push":             true,
		"runtime.(*mheap).freeSpanLocked":     true,
		"runtime.bgsweep":                     true,
		"runtime.mallocgc":                    false,
		"runtime.mallocgcSmallScanNoHeader":   false,
		"runtime.(*mspan).writeHeapBitsSmall": false,
		"runtime.selectgo":                    false,
		"runtime.findRunnable":                false,
		"runtime.memmove":                     false,
		"net/http.(*conn).serve":              false,
		"github.com/mcp-bridge/mcp-bridge/jsonrpc.(*scanner).skipString": false,
	} {
		if got := collectorFunc.MatchString(name); got != want {
			t.Errorf("collectorFunc matches %s: %v, want %v", name, got, want)
		}
	}
}

package sandbox

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// Stderr lines over the rate are drained and kept for ExitError but not
// logged; how many were dropped is logged.
func TestStderrRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newLogRecorder()
		s := newStderrLogger(slog.New(rec), 0, 3).withRate(StderrRate{LinesPerSecond: 10, Burst: 5})
		r, w := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.run(r)
		}()
		write := func(from, n int) {
			for i := from; i < from+n; i++ {
				fmt.Fprintf(w, "line %d\n", i)
			}
			synctest.Wait() // the reader has handled every line
		}
		write(0, 20) // the fake clock stands still: the burst only
		time.Sleep(time.Second)
		write(20, 20) // ten more tokens, capped at the burst: five
		time.Sleep(StderrDropReportInterval)
		write(40, 100) // five again
		w.Close()
		<-done

		var logged []string
		for _, from := range []int{0, 20, 40} {
			for i := from; i < from+5; i++ {
				logged = append(logged, fmt.Sprintf("line %d", i))
			}
		}
		if got := rec.stderrLines(); !slices.Equal(got, logged) {
			t.Errorf("logged %d lines %q..., want %d", len(got), got[:min(len(got), 8)], len(logged))
		}
		var drops []string
		for _, e := range rec.find("server stderr: lines over the rate limit were not logged") {
			drops = append(drops, e.attrs["dropped"])
		}
		// 15 reported when line 20 passes, 15 when line 40 does, the
		// other 95 at the end.
		if want := []string{"15", "15", "95"}; !slices.Equal(drops, want) {
			t.Errorf("drop reports %q, want %q", drops, want)
		}
		if got, want := s.lines(), []string{"line 137", "line 138", "line 139"}; !slices.Equal(got, want) {
			t.Errorf("tail %q, want %q", got, want)
		}
	})
}

// Drops that go on are reported every StderrDropReportInterval, and at the
// end; a negative rate turns the limit off.
func TestStderrRateReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newLogRecorder()
		s := newStderrLogger(slog.New(rec), 0, 3).withRate(StderrRate{LinesPerSecond: 0.001, Burst: 1})
		r, w := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.run(r)
		}()
		fmt.Fprintf(w, "a\nb\nc\n")
		synctest.Wait()
		time.Sleep(StderrDropReportInterval)
		fmt.Fprintf(w, "d\n") // dropped, and the report is due
		fmt.Fprintf(w, "e\nf\n")
		w.Close()
		<-done
		var drops []string
		for _, e := range rec.find("server stderr: lines over the rate limit were not logged") {
			drops = append(drops, e.attrs["dropped"])
		}
		if want := []string{"3", "2"}; !slices.Equal(drops, want) {
			t.Errorf("drop reports %q, want %q", drops, want)
		}

		rec = newLogRecorder()
		s = newStderrLogger(slog.New(rec), 0, 3).withRate(StderrRate{LinesPerSecond: -1})
		r, w = io.Pipe()
		done = make(chan struct{})
		go func() {
			defer close(done)
			s.run(r)
		}()
		for i := range 2000 {
			fmt.Fprintf(w, "%d\n", i)
		}
		w.Close()
		<-done
		if n := len(rec.stderrLines()); n != 2000 {
			t.Errorf("without a limit, %d of 2000 lines logged", n)
		}
	})
}

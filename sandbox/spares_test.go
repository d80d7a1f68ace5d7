package sandbox

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The pool runs over real children: the test binary in the modes of
// local_test.go ("echo" answers lines and exits at stdin EOF, "exit3" exits
// at once), behind launchers that record what the pool asks of them.

// testLocal returns a Local launcher running child mode.
func testLocal(t testing.TB, mode string, logger *slog.Logger) *Local {
	t.Helper()
	return testLocalGrace(t, mode, logger, 100*time.Millisecond)
}

// testLocalGrace is testLocal with the given StopGrace: a test that wants
// the child to end by itself when its stdin closes gives it long enough to
// do so on a loaded machine (a re-executed race-instrumented test binary
// may not even have started within 100 ms).
func testLocalGrace(t testing.TB, mode string, logger *slog.Logger, grace time.Duration) *Local {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0", childEnv+"="+mode)
	return NewLocal(&LocalOptions{Command: exe, Env: env, StopGrace: grace, Logger: logger})
}

// recLauncher launches through launch and reports every launch it made.
type recLauncher struct {
	launch   func(ctx context.Context, name string) (Process, error)
	launched chan *recProcess // every child it started, in order
	failed   chan string      // names of launches that failed
}

func newRecLauncher(launch func(ctx context.Context, name string) (Process, error)) *recLauncher {
	return &recLauncher{launch: launch, launched: make(chan *recProcess, 64), failed: make(chan string, 64)}
}

func (l *recLauncher) Launch(ctx context.Context, name string) (Process, error) {
	p, err := l.launch(ctx, name)
	if err != nil {
		l.failed <- name
		return nil, err
	}
	rp := &recProcess{Process: p, name: name, stopped: make(chan struct{})}
	l.launched <- rp
	return rp, nil
}

// next returns the next child the launcher started.
func (l *recLauncher) next(t *testing.T) *recProcess {
	t.Helper()
	select {
	case p := <-l.launched:
		return p
	case <-time.After(30 * time.Second): // a guard against a hang, not a synchronization
		t.Fatal("no launch within 30s")
		return nil
	}
}

// recProcess reports when Stop was called and has returned.
type recProcess struct {
	Process
	name    string
	once    sync.Once
	stopped chan struct{}
}

func (p *recProcess) Stop(ctx context.Context) error {
	err := p.Process.Stop(ctx)
	p.once.Do(func() { close(p.stopped) })
	return err
}

func (p *recProcess) isStopped() bool {
	select {
	case <-p.stopped:
		return true
	default:
		return false
	}
}

// unwrap returns the recProcess a Launch result is made of.
func unwrap(t *testing.T, p Process) *recProcess {
	t.Helper()
	if pp, ok := p.(*pooledProcess); ok {
		p = pp.Process
	}
	rp, ok := p.(*recProcess)
	if !ok {
		t.Fatalf("Launch returned a %T, not one of the launcher's children", p)
	}
	return rp
}

// echoes checks that a child answers a line.
func echoes(t *testing.T, p Process, out *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(p.Stdin(), line+"\n"); err != nil {
		t.Fatalf("writing to %s: %v", p.ID(), err)
	}
	got, err := out.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("%s answered %q, %v; want %q", p.ID(), got, err, line)
	}
}

const handOutMsg = "warm MCP server handed to a session"

func TestSparesHandsOutSpares(t *testing.T) {
	logs := newLogRecorder()
	logger := slog.New(logs)
	local := testLocal(t, "echo", logger)
	inner := newRecLauncher(local.Launch)
	pool := NewSpares(inner, 2, logger)

	// Both spares start before any session asks.
	ahead := map[*recProcess]bool{}
	for range 2 {
		p := inner.next(t)
		if !strings.HasPrefix(p.name, "warm-") {
			t.Fatalf("a spare was launched as session %q, want a warm-<n> placeholder", p.name)
		}
		ahead[p] = true
	}

	proc, err := pool.Launch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	got := unwrap(t, proc)
	if !ahead[got] {
		t.Fatalf("Launch returned %s, not one of the children started ahead", got.name)
	}
	if want := got.Process.ID() + ", started ahead as " + got.name; proc.ID() != want {
		t.Errorf("ID() = %q, want %q", proc.ID(), want)
	}
	echoes(t, proc, bufio.NewReader(proc.Stdout()), "hello")

	// A replacement starts in the background.
	if r := inner.next(t); r.name != "warm-3" {
		t.Errorf("the replacement was launched as %q, want warm-3", r.name)
	}
	// The hand-out is logged with the session ID and the placeholder.
	e := logs.wait(t, handOutMsg, 1)[0]
	if e.attrs["session"] != "s1" || e.attrs["warm"] != got.name || e.attrs["server"] != got.Process.ID() {
		t.Errorf("hand-out logged %v, want session=s1 warm=%s server=%s", e.attrs, got.name, got.Process.ID())
	}

	proc2, err := pool.Launch(t.Context(), "s2")
	if err != nil {
		t.Fatal(err)
	}
	got2 := unwrap(t, proc2)
	if got2 == got || !strings.HasPrefix(got2.name, "warm-") {
		t.Fatalf("the second session got %s (the first got %s), want another spare", got2.name, got.name)
	}
	echoes(t, proc2, bufio.NewReader(proc2.Stdout()), "again")
	if hits, misses := pool.Stats(); hits != 2 || misses != 0 {
		t.Errorf("Stats() = %d hits, %d misses; want 2, 0", hits, misses)
	}

	for _, p := range []Process{proc, proc2} {
		if err := p.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	if err := pool.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close waited for the launches in progress: every child the pool did
	// not hand out is stopped now.
	close(inner.launched)
	for p := range inner.launched {
		ahead[p] = true
	}
	for p := range ahead {
		if p != got && p != got2 && !p.isStopped() {
			t.Errorf("spare %s is still running after Close", p.name)
		}
	}
	if _, err := pool.Launch(t.Context(), "s3"); !errors.Is(err, ErrLaunch) {
		t.Errorf("Launch after Close = %v, want ErrLaunch", err)
	}
	if err := pool.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

// gated launches spares ("warm-" names) only once release is closed, or
// fails them when ctx ends first; it launches sessions at once.
type gated struct {
	local   *Local
	entered chan string   // a spare's launch began
	release chan struct{} // close to let spares launch
	// ignoreCtx launches a released spare even if ctx ended (as Local
	// does once it has started a process), after reporting on cancelled.
	ignoreCtx bool
	cancelled chan struct{}
}

func (g *gated) Launch(ctx context.Context, name string) (Process, error) {
	if strings.HasPrefix(name, "warm-") {
		g.entered <- name
		select {
		case <-g.release:
		case <-ctx.Done():
			if !g.ignoreCtx {
				return nil, ctx.Err()
			}
			close(g.cancelled)
			<-g.release
		}
		return g.local.Launch(context.Background(), name)
	}
	return g.local.Launch(ctx, name)
}

func TestSparesColdStartWhenEmpty(t *testing.T) {
	logs := newLogRecorder()
	logger := slog.New(logs)
	g := &gated{local: testLocalGrace(t, "echo", logger, time.Minute), entered: make(chan string, 8), release: make(chan struct{})}
	inner := newRecLauncher(g.Launch)
	pool := NewSpares(inner, 1, logger)
	<-g.entered // the spare is on its way, but not ready

	proc, err := pool.Launch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	got := unwrap(t, proc)
	if got.name != "s1" {
		t.Errorf("with no spare ready, the child was launched as %q, want the session's own ID", got.name)
	}
	if _, ok := proc.(*pooledProcess); ok {
		t.Errorf("a cold start has ID %q, as if it had been started ahead", proc.ID())
	}
	echoes(t, proc, bufio.NewReader(proc.Stdout()), "cold")
	if hits, misses := pool.Stats(); hits != 0 || misses != 1 {
		t.Errorf("Stats() = %d hits, %d misses; want 0, 1", hits, misses)
	}
	if err := proc.Stop(context.Background()); err != nil {
		t.Error(err)
	}

	// Close gives up the launch in progress; it is not a failure worth a warning.
	if err := pool.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if name := <-inner.failed; !strings.HasPrefix(name, "warm-") {
		t.Errorf("failed launch %q, want the spare's", name)
	}
	if w := logs.find("cannot start a warm MCP server; sessions start cold until the next attempt, at the next session"); len(w) != 0 {
		t.Errorf("a launch given up at Close was logged as a failure: %v", w)
	}
}

func TestSparesCloseStopsLaunchInProgress(t *testing.T) {
	logger := slog.New(newLogRecorder())
	g := &gated{local: testLocalGrace(t, "echo", logger, time.Minute), entered: make(chan string, 8), release: make(chan struct{}),
		ignoreCtx: true, cancelled: make(chan struct{})}
	inner := newRecLauncher(g.Launch)
	pool := NewSpares(inner, 1, logger)
	<-g.entered

	closed := make(chan error, 1)
	go func() { closed <- pool.Close(context.Background()) }()
	// The child comes up after Close began (the launcher ignored the
	// cancellation): the pool must stop it, and Close must wait for that.
	<-g.cancelled
	close(g.release)
	p := inner.next(t)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !p.isStopped() {
		_ = p.Stop(context.Background())
		t.Fatal("a spare that came up during Close is still running after Close returned")
	}
	if err := p.Wait(); err != nil {
		t.Errorf("the spare's child exited with %v, want status 0 (stdin closed)", err)
	}
}

func TestSparesDiscardsDeadSpare(t *testing.T) {
	logs := newLogRecorder()
	logger := slog.New(logs)
	dying, echo := testLocal(t, "exit3", logger), testLocal(t, "echo", logger)
	inner := newRecLauncher(func(ctx context.Context, name string) (Process, error) {
		if strings.HasPrefix(name, "warm-") {
			return dying.Launch(ctx, name)
		}
		return echo.Launch(ctx, name)
	})
	pool := NewSpares(inner, 1, logger)
	spare := inner.next(t)
	e := logs.wait(t, "a warm MCP server exited before any session used it; the pool starts another at the next session", 1)[0]
	if e.attrs["warm"] != spare.name || !strings.Contains(e.attrs["err"], "status 3") {
		t.Errorf("the dead spare was logged with %v, want warm=%s and its exit status", e.attrs, spare.name)
	}
	<-spare.stopped // released, not leaked

	// The dead spare is never handed out: this session starts cold.
	proc, err := pool.Launch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got := unwrap(t, proc); got.name != "s1" {
		t.Errorf("the session got the child launched as %q, want a cold start as s1", got.name)
	}
	echoes(t, proc, bufio.NewReader(proc.Stdout()), "alive")
	if err := proc.Stop(context.Background()); err != nil {
		t.Error(err)
	}
	if err := pool.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The refill after s1 started a spare that dies as well; wait until the
	// pool has released it (or Close has), so that no goroutine outlives
	// the test.
	close(inner.launched)
	for p := range inner.launched {
		if p.name != "s1" {
			<-p.stopped
		}
	}
}

func TestSparesConcurrentLaunches(t *testing.T) {
	logger := slog.New(newLogRecorder())
	inner := newRecLauncher(testLocal(t, "echo", logger).Launch)
	pool := NewSpares(inner, 3, logger)
	const sessions = 8
	procs := make([]Process, sessions)
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i], errs[i] = pool.Launch(context.Background(), "s"+string(rune('a'+i)))
		}()
	}
	wg.Wait()
	seen := map[*recProcess]bool{}
	for i, p := range procs {
		if errs[i] != nil {
			t.Fatalf("Launch %d: %v", i, errs[i])
		}
		rp := unwrap(t, p)
		if seen[rp] {
			t.Fatalf("child %s was handed to two sessions", rp.name)
		}
		seen[rp] = true
		echoes(t, p, bufio.NewReader(p.Stdout()), "s"+string(rune('a'+i)))
	}
	for _, p := range procs {
		if err := p.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if err := pool.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(inner.launched)
	for p := range inner.launched {
		if !seen[p] && !p.isStopped() {
			t.Errorf("spare %s is still running after Close", p.name)
		}
	}
}

func TestSparesWithoutSpares(t *testing.T) {
	logger := slog.New(newLogRecorder())
	inner := newRecLauncher(testLocal(t, "echo", logger).Launch)
	pool := NewSpares(inner, 0, logger)
	proc, err := pool.Launch(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got := unwrap(t, proc); got.name != "s1" {
		t.Errorf("launched as %q, want s1", got.name)
	}
	if err := proc.Stop(context.Background()); err != nil {
		t.Error(err)
	}
	if err := pool.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Close waited for any background launch: there was none.
	if n := len(inner.launched); n != 1 {
		t.Errorf("the inner launcher started %d children, want 1 (no spares)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pool.Launch(ctx, "s2"); !errors.Is(err, ErrLaunch) || !errors.Is(err, context.Canceled) {
		t.Errorf("Launch with a cancelled context = %v, want ErrLaunch wrapping context.Canceled", err)
	}
}

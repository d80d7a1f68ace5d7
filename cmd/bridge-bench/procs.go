package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const modulePath = "github.com/mcp-bridge/mcp-bridge"

// pprofHook is added to the bridge's main package (go build -overlay) by
// -profile: it serves net/http/pprof on its own loopback listener, never on
// the bridge's endpoint. It is text, not Go, so that it is not compiled
// into bridge-bench itself.
//
//go:embed pprofhook.go.txt
var pprofHook string

// build compiles the bridge and the minimal server into dir. With profile,
// the bridge gets the pprof hook.
func build(ctx context.Context, dir string, profile bool) (bridgeBin, minimalBin string, err error) {
	bridgeBin = filepath.Join(dir, "bridge")
	minimalBin = filepath.Join(dir, "minimal")
	args := []string{"build", "-o", bridgeBin}
	if profile {
		out, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", modulePath+"/cmd/bridge").Output()
		if err != nil {
			return "", "", fmt.Errorf("locating cmd/bridge (run bridge-bench inside the module): %w", err)
		}
		hook := filepath.Join(dir, "pprofhook.go")
		if err := os.WriteFile(hook, []byte(pprofHook), 0o644); err != nil {
			return "", "", err
		}
		overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
			filepath.Join(strings.TrimSpace(string(out)), "zz_bench_pprof.go"): hook,
		}})
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			return "", "", err
		}
		args = append(args, "-overlay", ov)
	}
	for _, b := range []struct {
		args []string
	}{
		{append(args, modulePath+"/cmd/bridge")},
		{[]string{"build", "-o", minimalBin, modulePath + "/cmd/bridge-bench/minimal"}},
	} {
		cmd := exec.CommandContext(ctx, "go", b.args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("go %s: %w (run bridge-bench from inside the module, or pass -bridge and -minimal)", strings.Join(b.args, " "), err)
		}
	}
	return bridgeBin, minimalBin, nil
}

// process is a child of the harness: the bridge, the HTTP floor or a peer.
// It runs in its own process group so that stop also ends what it started.
type process struct {
	name string
	cmd  *exec.Cmd
	pid  int

	mu       sync.Mutex
	tail     []string // last stderr lines, for errors
	warnings int      // log lines at WARN or ERROR
	firstBad string   // the first of them
	handouts int      // sessions given a warm child (the pool's log line)

	done chan struct{} // closed when the process was reaped
	err  error
}

// startProcess starts bin with args. onLine, if not nil, sees each stderr line.
func startProcess(name, bin string, args []string, env []string, onLine func(string)) (*process, io.ReadCloser, io.WriteCloser, error) {
	cmd := exec.Command(bin, args...)
	// SIGTERM if the harness dies: the bridge then stops its children. (The
	// floor, the stdio servers and supergateway also end with their stdin.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			if len(p.tail) == 20 {
				copy(p.tail, p.tail[1:])
				p.tail = p.tail[:19]
			}
			p.tail = append(p.tail, line)
			if strings.Contains(line, `"msg":"warm MCP server handed to a session"`) {
				p.handouts++
			}
			if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
				p.warnings++
				if p.firstBad == "" {
					p.firstBad = line
				}
			}
			p.mu.Unlock()
			if onLine != nil {
				onLine(line)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-stderrDone
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, stdout, stdin, nil
}

// stop sends SIGTERM and waits up to grace, then kills the group.
func (p *process) stop(grace time.Duration) error {
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed", p.name, grace)
	}
	// Whatever the process left in its group goes too.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	return nil
}

// diagnosis is the last few lines the process wrote to stderr.
func (p *process) diagnosis() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail[max(0, len(p.tail)-4):], "\n")
}

// Handouts counts the sessions the process said got a warm child.
func (p *process) Handouts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handouts
}

// notes collects remarks printed under the table: what the processes
// measured logged at WARN or ERROR.
var notes struct {
	sync.Mutex
	list   []string
	warned map[string]bool // whose warnings are noted: once per target, which -restart starts many times
}

func note(format string, args ...any) {
	notes.Lock()
	defer notes.Unlock()
	notes.list = append(notes.list, fmt.Sprintf(format, args...))
}

// stopAndReport stops the process and notes the warnings it logged.
func (p *process) stopAndReport(what string, grace time.Duration) {
	if err := p.stop(grace); err != nil {
		note("%s: %v", what, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warnings == 0 {
		return
	}
	notes.Lock()
	first := !notes.warned[what]
	if first {
		if notes.warned == nil {
			notes.warned = map[string]bool{}
		}
		notes.warned[what] = true
	}
	notes.Unlock()
	if first {
		note("%s: the %s logged %d lines at WARN or ERROR; the first: %s", what, p.name, p.warnings, p.firstBad)
	}
}

// memory reads VmRSS and VmHWM (peak RSS) of the process, in bytes, from
// /proc/<pid>/status: the process alone, its children excluded.
func (p *process) memory() (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &hwm
		default:
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("unexpected %s line in /proc/%d/status: %q", k, p.pid, line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		*dst = n << 10
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("no VmRSS/VmHWM in /proc/%d/status", p.pid)
	}
	return rss, hwm, nil
}

// rssFile reads RssFile of the process: its resident file-backed pages,
// mostly its own executable's.
func (p *process) rssFile() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// children counts the process's live servers: its descendants that run
// another binary than its own (a bridge's supervisor runs the bridge's, and
// the servers are the supervisor's children).
func (p *process) children() int {
	self, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.pid))
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range descendants(p.pid) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", d)); err == nil && exe != self {
			n++
		}
	}
	return n
}

// bridgeProc is a running bridge.
type bridgeProc struct {
	*process
	url   string // the MCP endpoint
	pprof string // host:port of the pprof hook, with -profile
}

// startBridge runs the bridge on a free loopback port in front of the
// minimal server (none: extra holds a --config), and waits until it
// listens.
func startBridge(ctx context.Context, bin, minimal string, profile bool, extra ...string) (*bridgeProc, error) {
	args := append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, extra...)
	if minimal != "" { // else extra names a --config
		args = append(args, "--", minimal)
	}
	var env []string
	if profile {
		env = []string{"BRIDGE_BENCH_PPROF=127.0.0.1:0"}
	}
	urls := make(chan string, 1)
	pprofs := make(chan string, 1)
	onLine := func(line string) {
		if !strings.Contains(line, "listening") {
			return
		}
		var m struct {
			Msg  string `json:"msg"`
			URL  string `json:"url"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			return
		}
		switch m.Msg {
		case "bridge listening":
			select {
			case urls <- m.URL:
			default:
			}
		case "pprof listening":
			select {
			case pprofs <- m.Addr:
			default:
			}
		}
	}
	p, stdout, stdin, err := startProcess("bridge", bin, args, env, onLine)
	if err != nil {
		return nil, err
	}
	stdin.Close()
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	b := &bridgeProc{process: p}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case b.url = <-urls:
	case <-p.done:
		return nil, fmt.Errorf("the bridge exited at start: %v\n%s", p.err, p.diagnosis())
	case <-t.C:
		p.stop(5 * time.Second)
		return nil, fmt.Errorf("the bridge did not report listening within 30s\n%s", p.diagnosis())
	case <-ctx.Done():
		p.stop(5 * time.Second)
		return nil, ctx.Err()
	}
	if profile {
		select {
		case b.pprof = <-pprofs:
		case <-t.C:
			p.stop(5 * time.Second)
			return nil, errors.New("the profiling bridge did not report its pprof address")
		}
	}
	return b, nil
}

// floorProc is the HTTP floor: the minimal server answering over HTTP itself.
type floorProc struct {
	*process
	url   string
	stdin io.WriteCloser
}

// startFloor runs the minimal server as an HTTP floor: mode is -http (the
// HTTP floor) or -hop (the hop floor).
func startFloor(minimal, mode string) (*floorProc, error) {
	p, stdout, stdin, err := startProcess("floor "+mode, minimal, []string{mode, "127.0.0.1:0"}, nil, nil)
	if err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		p.stop(5 * time.Second)
		return nil, fmt.Errorf("the floor (%s) did not print its address: %v\n%s", mode, err, p.diagnosis())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return &floorProc{process: p, url: strings.TrimSpace(line), stdin: stdin}, nil
}

func (f *floorProc) close() {
	f.stdin.Close() // the floor stops when its stdin ends
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		f.stop(time.Second)
	}
}

// startSupergateway runs supergateway's stdio to Streamable HTTP gateway in
// front of the minimal server, and waits until its port accepts.
func startSupergateway(ctx context.Context, node, sg, minimal string, stateful bool) (*process, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	args := []string{sg, "--stdio", minimal, "--outputTransport", "streamableHttp",
		"--port", strconv.Itoa(port), "--logLevel", "none"}
	if stateful {
		args = append(args, "--stateful")
	}
	// Its stdin stays open: supergateway exits when its stdin ends. It
	// is closed when the process is reaped.
	p, stdout, _, err := startProcess("supergateway", node, args, nil, nil)
	if err != nil {
		return nil, "", err
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop(5 * time.Second)
			return nil, "", fmt.Errorf("supergateway did not listen on %s within 30s: %v\n%s", addr, err, p.diagnosis())
		}
		select {
		case <-p.done:
			return nil, "", fmt.Errorf("supergateway exited at start: %v\n%s", p.err, p.diagnosis())
		case <-time.After(20 * time.Millisecond): // polling a port that gives no other signal
		}
	}
	return p, "http://" + addr + "/mcp", nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// cpuSnap is CPU time consumed so far: by the harness (the load
// generator), by the target process, and by the target's children; and
// the context switches of the target's threads (voluntary: a thread that
// blocked, so wake-ups; involuntary: a thread preempted), which tell a
// process that hands work between threads more often from one that does
// more work.
type cpuSnap struct {
	self, target, kids time.Duration
	vcsw, ivcsw        int64
}

func (a cpuSnap) sub(b cpuSnap) cpuSnap {
	return cpuSnap{a.self - b.self, a.target - b.target, a.kids - b.kids, a.vcsw - b.vcsw, a.ivcsw - b.ivcsw}
}

// procSwitches sums the context switches of the threads of pid that are
// alive now, from /proc/<pid>/task/*/status (a thread that exited between
// two readings is missed; the Go runtime seldom ends threads).
func procSwitches(pid int) (vol, invol int64) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*/status", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch k {
			case "voluntary_ctxt_switches":
				vol += n
			case "nonvoluntary_ctxt_switches":
				invol += n
			}
		}
	}
	return vol, invol
}

// clockTick is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU returns utime+stime of a process, and cutime+cstime (its reaped
// children), from /proc/<pid>/stat.
func procCPU(pid int) (own, reaped time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The command name (field 2) may hold spaces: fields count from ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, so f[11].
	if len(f) < 15 {
		return 0, 0
	}
	n := func(s string) time.Duration {
		v, _ := strconv.ParseInt(s, 10, 64)
		return time.Duration(v) * clockTick
	}
	return n(f[11]) + n(f[12]), n(f[13]) + n(f[14])
}

// descendants lists the live descendants of pid (children, grandchildren,
// ...), from the parent field of every /proc/<pid>/stat.
func descendants(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	kids := map[int][]int{}
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // f[0] is field 3 (state), f[1] field 4 (ppid)
		if len(f) < 2 {
			continue
		}
		me, err1 := strconv.Atoi(filepath.Base(d))
		parent, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			kids[parent] = append(kids[parent], me)
		}
	}
	var out []int
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		out = append(out, kids[p]...)
		todo = append(todo, kids[p]...)
	}
	return out
}

// meterFor returns a CPU meter of the harness, of process pid (0: none)
// and of the children: pid's children, or with pid 0 the given ones.
func meterFor(pid int, kids []int) func() cpuSnap {
	return func() cpuSnap {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		s := cpuSnap{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
		if pid != 0 {
			own, reaped := procCPU(pid)
			s.target = own
			s.kids = reaped
			s.vcsw, s.ivcsw = procSwitches(pid)
			kids = descendants(pid)
		}
		for _, c := range kids {
			own, reaped := procCPU(c)
			s.kids += own + reaped
		}
		return s
	}
}

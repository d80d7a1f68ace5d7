package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The supervisor, which keeps no descendant of a local server alive
// after the bridge or the server is gone. The kernel's parent-death signal reaches only a process's direct child: npx → node,
// uvx → python, a browser started by a server all outlived a kill -9 of the
// bridge. So local servers run under a supervisor, the bridge binary itself
// re-executed in a hidden mode (LocalOptions.Supervisor, argv[1] ==
// SuperviseArg). One supervisor serves every local server of a bridge
// process (of each Supervisor argv): the bridge asks it over a socket to
// start each server, and it
//
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER), so every process a
//     server starts stays its descendant even when its parent exits or it
//     calls setsid: it finds them all through /proc/<pid>/task/*/children;
//   - starts each server (fork and exec, as the bridge would) in a process
//     group of its own, with the stdio descriptors the bridge sent with the
//     request (SCM_RIGHTS) and a parent-death signal of SIGKILL;
//   - on the bridge's "term", sends SIGTERM to the server's group; on
//     "kill" (Stop's last step), kills the server and everything of its
//     session at once;
//   - when a server exits, kills its group while the leader is unreaped
//     (its number cannot be reused), then every process of its session
//     left (see below), and only then reports the exit status to the
//     bridge;
//   - when the bridge dies (end of file on the socket, whose other end only
//     the bridge holds), however it dies, kills every descendant and exits.
//
// Why one supervisor, not one per server (as it was at first):
// the bridge binary links Prometheus, OpenTelemetry with gRPC and protobuf,
// jwx and the Docker client, whose package initialization runs before any
// code of ours can: about 10 ms of CPU and 20 MB of RSS for each start, 50
// times in a burst of 50 sessions (300 ms instead of 60 to 90 at the p50
// with --local-unsupervised). A shared supervisor pays that once per
// bridge; each server then costs what it costs without one, a fork and an
// exec, plus one message each way. The alternatives: a small dedicated
// supervisor binary carried by the bridge needs a build step before `go
// build ./cmd/bridge` (or a generated binary in the repository), and
// still costs a Go runtime start per session (2 ms of CPU); supervision by
// the bridge itself (it as the subreaper, pidfds) cannot end what the
// servers started once the bridge is killed: orphans go to init, beyond
// reach.
//
// Which session a process belongs to: while it descends from its server,
// the process tree tells. A process whose parent exited is re-parented to
// the supervisor, and the tree no longer tells: it belongs to the session
// whose OwnerEnv value it carries (each server's mark ends in its own
// number, and is inherited by whatever it starts) or, when the server
// exits, to the server's process group, killed before the leader is
// reaped. A process that leaves the tree (its parent exits), leaves the
// server's group (setsid, setpgid) and is executed with an environment
// without the mark is beyond its session: it ends with the bridge (the
// supervisor kills every descendant then), not with its session.
//
// If the supervisor itself is killed with SIGKILL (kill -9 of it, the OOM
// killer), the servers die with it (parent-death signal), their sessions
// end, and the next session starts another supervisor; what the servers
// started is orphaned: every process carries OwnerEnv in its environment,
// and KillLocalLeftovers, run by a restarted bridge, ends the processes
// whose bridge no longer exists.
//
// SIGTERM, SIGINT and SIGHUP do not end the supervisor (they are for the
// bridge, which stops its servers gracefully): it ends with the bridge.

// SuperviseArg, as the first argument of the bridge binary, selects the
// supervisor mode: main calls Supervise(os.Args[2:]) before anything else.
const SuperviseArg = "__mcp-bridge-supervise"

// supervisorFD is the descriptor of the supervisor's end of its socket (the
// first of exec.Cmd.ExtraFiles).
const supervisorFD = 3

// supervisorMsgMax bounds one message on the supervisor's socket (a server's
// path, argv, environment and directory, JSON-encoded).
const supervisorMsgMax = 1 << 20

// supRequest is a message from the bridge to the supervisor.
type supRequest struct {
	Op   string   `json:"op"` // "start" (with 3 descriptors: stdin, stdout, stderr), "term", "kill"
	ID   uint64   `json:"id"`
	Path string   `json:"path,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	Mark string   `json:"mark,omitempty"` // the server's OwnerEnv value
}

// supEvent is a message from the supervisor to the bridge.
type supEvent struct {
	Ev     string `json:"ev"` // "started" (PID or Err), "exited" (Status)
	ID     uint64 `json:"id"`
	PID    int    `json:"pid,omitempty"`
	Err    string `json:"err,omitempty"`
	Status int    `json:"status,omitempty"` // a syscall.WaitStatus
}

// Supervise runs the supervisor and never returns. args is the descriptor
// of its socket ("3"), named rather than assumed: a supervisor started by
// hand may inherit an unrelated descriptor 3.
func Supervise(args []string) {
	if len(args) != 1 || args[0] != strconv.Itoa(supervisorFD) {
		fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: want %d (the descriptor of its socket), got %q\n", supervisorFD, args)
		os.Exit(126)
	}
	// The parent-death signal of a server follows the thread that forks
	// it: every fork happens on the main goroutine, locked to the main
	// thread for the whole process.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		// Without it, orphans go to init; the servers still die with us.
		fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: cannot become a child subreaper: %v; processes the servers start may outlive them\n", err)
	}
	// Caught and dropped, not ignored: an ignored signal stays ignored
	// across exec, and a server that ignores SIGTERM would not end at
	// Stop's; a caught one is reset to its default in the child.
	drop := make(chan os.Signal, 1)
	signal.Notify(drop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for range drop {
		}
	}()
	// The servers must not hold the socket: the bridge's death is its end.
	unix.CloseOnExec(supervisorFD)
	f := os.NewFile(supervisorFD, "supervisor")
	c, err := net.FileConn(f)
	f.Close()
	uc, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: descriptor %d is not its socket: %v\n", supervisorFD, err)
		os.Exit(126)
	}
	s := &supervisor{conn: uc, self: os.Getpid(), servers: map[int]*supServer{}, byID: map[uint64]*supServer{}}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		for range chld {
			s.reap()
		}
	}()
	s.serve() // returns when the bridge is gone
	s.killAll()
	os.Exit(0)
}

// supervisor is the state of the supervisor process.
type supervisor struct {
	conn *net.UnixConn
	self int
	wmu  sync.Mutex // one message written at a time

	// mu orders forks, signals to a server and reaping: a server in
	// servers is not reaped, so its pid and group ID are still its own.
	mu      sync.Mutex
	servers map[int]*supServer // by pid
	byID    map[uint64]*supServer
}

type supServer struct {
	id   uint64
	pid  int
	mark string
}

// serve reads the bridge's requests until end of file.
func (s *supervisor) serve() {
	buf := make([]byte, supervisorMsgMax)
	oob := make([]byte, unix.CmsgSpace(3*4))
	for {
		n, oobn, flags, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 && oobn == 0 {
			return // the bridge is gone (or closed its end: no more servers)
		}
		fds := receivedFDs(oob[:oobn])
		var req supRequest
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || json.Unmarshal(buf[:n], &req) != nil {
			closeFDs(fds)
			fmt.Fprintf(os.Stderr, "mcp-bridge supervisor: unreadable request of %d bytes\n", n)
			continue
		}
		switch req.Op {
		case "start":
			s.start(&req, fds)
		case "term", "kill":
			closeFDs(fds)
			s.signal(req.ID, req.Op == "kill")
		default:
			closeFDs(fds)
		}
	}
}

// start forks and executes a server, on the main thread.
func (s *supervisor) start(req *supRequest, fds []int) {
	defer closeFDs(fds) // the server has its copies
	if len(fds) != 3 {
		s.send(supEvent{Ev: "started", ID: req.ID, Err: fmt.Sprintf("got %d descriptors with the request, want 3", len(fds))})
		return
	}
	s.mu.Lock()
	pid, err := syscall.ForkExec(req.Path, req.Argv, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err == nil {
		srv := &supServer{id: req.ID, pid: pid, mark: req.Mark}
		s.servers[pid] = srv
		s.byID[req.ID] = srv
	}
	s.mu.Unlock()
	if err != nil {
		s.send(supEvent{Ev: "started", ID: req.ID, Err: err.Error()})
		return
	}
	s.send(supEvent{Ev: "started", ID: req.ID, PID: pid})
}

// signal sends SIGTERM to a server's group, or kills everything of its
// session; a server already reaped is left alone.
func (s *supervisor) signal(id uint64, kill bool) {
	s.mu.Lock()
	srv := s.byID[id]
	if srv != nil && !kill {
		if err := syscall.Kill(-srv.pid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
			syscall.Kill(srv.pid, syscall.SIGTERM) // it left its group
		}
	}
	if srv != nil && kill {
		// The server's tree first, then the server and its group: what
		// the tree held is then re-parented to us, found by its mark.
		for _, pid := range descendants(srv.pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		syscall.Kill(-srv.pid, syscall.SIGKILL)
		syscall.Kill(srv.pid, syscall.SIGKILL)
	}
	s.mu.Unlock()
	if srv != nil && kill {
		s.killMarked(srv.mark)
	}
}

// reap reaps every child that exited. A server's group is killed before
// the server is reaped; its session's other processes are then ended, and
// the bridge told, in a goroutine of its own.
func (s *supervisor) reap() {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		pid := siginfoPID(&info)
		if err != nil || pid <= 0 {
			return // no child, or none exited
		}
		s.mu.Lock()
		srv := s.servers[pid]
		if srv != nil {
			// The leader is a zombie: its group ID is still its own.
			syscall.Kill(-pid, syscall.SIGKILL)
			delete(s.servers, pid)
			delete(s.byID, srv.id)
		}
		var ws syscall.WaitStatus
		for {
			// WNOHANG: it is a zombie, unless a failed ForkExec reaped it
			// (and then its number may be another child's by now).
			if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != syscall.EINTR {
				break
			}
		}
		s.mu.Unlock()
		if srv != nil {
			go s.finish(srv, ws)
		}
	}
}

// finish ends what is left of an exited server's session, then tells the
// bridge. Each pass kills what it finds; a process forked meanwhile is
// found by a later one, and SIGKILL cannot be caught: a few passes do.
func (s *supervisor) finish(srv *supServer, ws syscall.WaitStatus) {
	for pass := 0; pass < 200 && s.killMarked(srv.mark) > 0; pass++ {
		time.Sleep(time.Millisecond)
	}
	s.send(supEvent{Ev: "exited", ID: srv.id, Status: int(ws)})
}

// killMarked kills every process of the session marked mark that is not
// in a server's tree (those were re-parented to us), and what they started;
// it returns how many it found alive.
func (s *supervisor) killMarked(mark string) int {
	if mark == "" {
		return 0
	}
	kids, _ := childrenFromTasks(s.self)
	n := 0
	for _, k := range kids {
		s.mu.Lock()
		_, isServer := s.servers[k]
		s.mu.Unlock()
		if isServer || zombie(k) {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(k) + "/environ")
		if err != nil || ownerOf(env) != mark {
			continue
		}
		for _, d := range append(descendants(k), k) {
			if !zombie(d) {
				syscall.Kill(d, syscall.SIGKILL)
				n++
			}
		}
	}
	return n
}

// killAll kills every descendant and reaps them, until none is left.
func (s *supervisor) killAll() {
	signal.Reset(syscall.SIGCHLD)
	for {
		for _, pid := range descendants(s.self) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD: nothing left
			return
		}
	}
}

func (s *supervisor) send(ev supEvent) {
	b, _ := json.Marshal(ev)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.conn.Write(b) // fails only when the bridge is gone: serve ends then
}

// siginfoPID returns si_pid of a siginfo filled by waitid: after three ints
// (signo, errno, code), at the union's alignment, a pointer's.
func siginfoPID(info *unix.Siginfo) int {
	const off = (3*4 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// receivedFDs returns the descriptors passed with a message.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// zombie reports whether pid has exited but is not reaped (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// descendants lists the descendants of pid, children first, from
// /proc/<pid>/task/*/children (or, where the kernel lacks that file, from
// the parent field of every /proc/<pid>/stat).
func descendants(root int) []int {
	var out []int
	seen := map[int]bool{root: true}
	queue := []int{root}
	var byParent map[int][]int // the fallback, built once
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		kids, ok := childrenFromTasks(p)
		if !ok {
			if byParent == nil {
				byParent = parentMap()
			}
			kids = byParent[p]
		}
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
				queue = append(queue, k)
			}
		}
	}
	return out
}

// childrenFromTasks reads /proc/<pid>/task/*/children; ok is false where
// the kernel has no such file (CONFIG_PROC_CHILDREN off). A process that
// is gone has no children: ok is true then.
func childrenFromTasks(pid int) ([]int, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, true
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat(dir + "/" + t.Name()); serr == nil {
					return nil, false // the task exists, the file does not
				}
			}
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out, true
}

// parentMap maps each process to its children, from /proc/*/stat.
func parentMap() map[int][]int {
	m := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			m[ppid] = append(m[ppid], pid)
		}
	}
	return m
}

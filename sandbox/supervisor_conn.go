package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The bridge's side of the supervisor (supervise.go): one per Supervisor
// argv, started by the first Launch that needs it, shared by every Local
// and kept while a Local that may launch (until Close) or a server it
// started (until Wait returns) holds it. Its last holder closes the
// socket; the supervisor then exits, having nothing left to kill.

var supervisors struct {
	mu sync.Mutex
	m  map[string]*supervisorConn // by argv, joined with NUL
}

// supervisorConn is a running supervisor and the bridge's end of its socket.
type supervisorConn struct {
	key  string
	cmd  *exec.Cmd
	conn *net.UnixConn
	wmu  sync.Mutex // one request written at a time

	refs int // under supervisors.mu

	mu      sync.Mutex
	nextID  uint64
	starts  map[uint64]chan supEvent // a start's reply, by request ID
	running map[uint64]chan supEvent // a started server's exit, by request ID
	gone    bool                     // the socket failed: no more replies
	done    chan struct{}            // closed when the reader has returned and the supervisor is reaped
}

// acquireSupervisor returns the supervisor of argv, started if need be,
// with one more reference to release.
func acquireSupervisor(argv []string, logger *slog.Logger) (*supervisorConn, error) {
	key := strings.Join(argv, "\x00")
	supervisors.mu.Lock()
	defer supervisors.mu.Unlock()
	if s := supervisors.m[key]; s != nil {
		s.refs++
		return s, nil
	}
	s, err := startSupervisor(key, argv, logger)
	if err != nil {
		return nil, err
	}
	if supervisors.m == nil {
		supervisors.m = map[string]*supervisorConn{}
	}
	supervisors.m[key] = s
	s.refs = 1
	return s, nil
}

// acquire adds a reference.
func (s *supervisorConn) acquire() {
	supervisors.mu.Lock()
	s.refs++
	supervisors.mu.Unlock()
}

// isGone reports whether the supervisor exited (or its socket failed).
func (s *supervisorConn) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// release drops a reference; the last one ends the supervisor and waits
// for it.
func (s *supervisorConn) release() {
	supervisors.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last && supervisors.m[s.key] == s {
		delete(supervisors.m, s.key)
	}
	supervisors.mu.Unlock()
	if last {
		s.conn.Close() // end of file: the supervisor exits
		<-s.done
	}
}

// forget keeps a failed supervisor from being handed out again: the next
// Launch starts another.
func (s *supervisorConn) forget() {
	supervisors.mu.Lock()
	if supervisors.m[s.key] == s {
		delete(supervisors.m, s.key)
	}
	supervisors.mu.Unlock()
}

func startSupervisor(key string, argv []string, logger *slog.Logger) (*supervisorConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the supervisor's socket: %w", err)
	}
	// Room for a request with a large environment (supervisorMsgMax); the
	// kernel caps it (net.core.wmem_max), and a larger request fails with
	// a clear error.
	unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, supervisorMsgMax)
	ours := os.NewFile(uintptr(fds[0]), "supervisor")
	theirs := os.NewFile(uintptr(fds[1]), "supervisor")
	defer theirs.Close() // the supervisor has its copy
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("creating the supervisor's socket: %w", err)
	}
	conn := c.(*net.UnixConn)
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("creating the supervisor's stderr: %w", err)
	}
	cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], fmt.Sprint(supervisorFD))...)
	// No secret of ours, and the owner mark: a supervisor left by a bridge
	// killed with it is found by KillLocalLeftovers.
	cmd.Env = serverEnv(os.Environ(), nil)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = stderrW
	// Its own group: signals for the bridge's group (^C) are not its own.
	// No parent-death signal: it must outlive us to end what the servers
	// started; it watches its socket instead.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	stderrW.Close()
	if err != nil {
		conn.Close()
		stderrR.Close()
		return nil, fmt.Errorf("starting the supervisor %q: %w", argv[0], err)
	}
	s := &supervisorConn{
		key: key, cmd: cmd, conn: conn,
		starts: map[uint64]chan supEvent{}, running: map[uint64]chan supEvent{},
		done: make(chan struct{}),
	}
	logger = logger.With("supervisor", cmd.Process.Pid)
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		defer stderrR.Close()
		sc := bufio.NewScanner(stderrR)
		for sc.Scan() {
			logger.Warn("supervisor of local servers", "line", sc.Text())
		}
	}()
	go s.read(logger, stderrDone)
	return s, nil
}

// read dispatches the supervisor's events until its socket fails; then
// every server still running is reported killed (they died with it: their
// parent-death signal), and the supervisor is reaped.
func (s *supervisorConn) read(logger *slog.Logger, stderrDone chan struct{}) {
	defer close(s.done)
	buf := make([]byte, 4096)
	var err error
	for {
		var n int
		n, _, _, _, err = s.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			break
		}
		var ev supEvent
		if json.Unmarshal(buf[:n], &ev) != nil {
			continue
		}
		s.mu.Lock()
		var ch chan supEvent
		switch ev.Ev {
		case "started":
			ch = s.starts[ev.ID]
			delete(s.starts, ev.ID)
			if ev.Err != "" {
				delete(s.running, ev.ID)
			}
		case "exited":
			ch = s.running[ev.ID]
			delete(s.running, ev.ID)
		}
		s.mu.Unlock()
		if ch != nil {
			ch <- ev // buffered
		}
	}
	s.forget()
	s.mu.Lock()
	s.gone = true
	starts, running := s.starts, s.running
	s.starts, s.running = nil, nil
	s.mu.Unlock()
	for id, ch := range starts {
		ch <- supEvent{Ev: "started", ID: id, Err: "the supervisor exited"}
	}
	for id, ch := range running {
		ch <- supEvent{Ev: "exited", ID: id, Status: int(syscall.SIGKILL)} // killed, by the parent-death signal
	}
	s.conn.Close()
	werr := s.cmd.Wait()
	<-stderrDone
	if len(running) > 0 || !errors.Is(err, net.ErrClosed) {
		logger.Warn("the supervisor of local servers exited; its servers were killed with it, and the next session starts another",
			"servers", len(running), "status", fmt.Sprint(werr))
	}
}

// startServer asks the supervisor to start a server with the given stdio
// descriptors (the child's ends; the caller closes them after). It returns
// the server's pid and the channel that receives its exit. If ctx ends
// first, a server started after all is killed.
func (s *supervisorConn) startServer(ctx context.Context, req supRequest, stdio [3]*os.File) (uint64, int, <-chan supEvent, error) {
	reply := make(chan supEvent, 1)
	exited := make(chan supEvent, 1)
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return 0, 0, nil, errors.New("the supervisor exited")
	}
	s.nextID++
	id := s.nextID
	s.starts[id] = reply
	s.running[id] = exited
	s.mu.Unlock()
	req.Op, req.ID = "start", id
	if req.Mark != "" {
		// The server's own mark: the bridge's, and its number.
		req.Mark += "/" + fmt.Sprint(id)
		for i, kv := range req.Env {
			if strings.HasPrefix(kv, OwnerEnv+"=") {
				req.Env[i] = OwnerEnv + "=" + req.Mark
			}
		}
	}
	b, err := json.Marshal(req)
	if err == nil && len(b) > supervisorMsgMax {
		err = fmt.Errorf("its path, arguments, environment and directory take %d bytes, more than the supervisor takes (%d)", len(b), supervisorMsgMax)
	}
	if err == nil {
		rights := unix.UnixRights(int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()))
		s.wmu.Lock()
		_, _, err = s.conn.WriteMsgUnix(b, rights, nil)
		s.wmu.Unlock()
	}
	if err != nil {
		s.mu.Lock()
		if s.starts != nil {
			delete(s.starts, id)
			delete(s.running, id)
		}
		s.mu.Unlock()
		return 0, 0, nil, fmt.Errorf("asking the supervisor to start the server: %w", err)
	}
	var ev supEvent
	select {
	case ev = <-reply:
	case <-ctx.Done():
		go func() {
			if ev := <-reply; ev.Err == "" {
				s.signal(id, true)
				<-exited // or the supervisor's end: read reports every server then
			}
		}()
		return 0, 0, nil, fmt.Errorf("waiting for the supervisor to start the server: %w", context.Cause(ctx))
	}
	if ev.Err != "" {
		return 0, 0, nil, errors.New(ev.Err)
	}
	return id, ev.PID, exited, nil
}

// signal asks the supervisor to send SIGTERM to a server's group, or to
// kill everything of its session. A server already gone is left alone.
func (s *supervisorConn) signal(id uint64, kill bool) error {
	op := "term"
	if kill {
		op = "kill"
	}
	b, _ := json.Marshal(supRequest{Op: op, ID: id})
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.conn.Write(b)
	return err
}

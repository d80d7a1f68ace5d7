// Command dockerchild is the program the Docker launcher's tests run inside
// a container (FROM scratch, so it must be static: CGO_ENABLED=0).
//
// It is a line-oriented stdio program: it reads one command per line on
// stdin and answers with exactly one line on stdout (except "hog" and
// "exit", which end it). At EOF on stdin it exits with status 0, as a
// well-behaved stdio MCP server does. The tests probe the sandbox from the
// inside with it:
//
//	echo TEXT     answer TEXT
//	stderr TEXT   write TEXT to stderr, answer "ok"
//	uid           answer "uid=U gid=G"
//	net           try to reach 1.1.1.1:53 over TCP, answer "net: ok" or "net: error: ..."
//	write-root    try to create /x, answer "write-root: ok" or "write-root: error: ..."
//	write-tmp     try to create a file in /tmp
//	exec-tmp      copy this program into /tmp and try to run the copy
//	status        answer the capability and no_new_privs lines of /proc/self/status
//	nofile        answer the soft and hard RLIMIT_NOFILE
//	cgroup        answer the memory, memory+swap, pids and CPU limits of its cgroup
//	forkbomb      start copies of itself until fork fails, answer how many started
//	hog           allocate and touch memory until the kernel kills it
//	args          answer this program's arguments, space-separated
//	fetch URL     GET URL through the proxy variables, answer "STATUS BODY" or "error: ..."
//	tunnel A [noauth]  CONNECT to A through HTTPS_PROXY (with its credentials unless noauth),
//	              GET / over it, answer "STATUS" of the CONNECT and then "sent=N read=M FIRSTLINE"
//	fetchn N URL  fetch URL N times in a row, answer "us=MICROSECONDS last=ANSWER"
//	dial ADDR     dial ADDR over TCP directly, ignoring the proxy variables
//	resolve NAME  look NAME up in DNS, answer "ok ADDRS" or "error: ..."
//	getenv KEY    answer the value of the environment variable KEY
//	read PATH     answer the first line of the file PATH, or "read: error: ..."
//	write PATH    try to create the file PATH, answer "write: ok" or "write: error: ..."
//	exit N        exit with status N
//	trap          ignore SIGTERM and stdin from now on (for stop escalation)
//
// Run with the single argument "sleep", it just sleeps: that is what the
// fork bomb starts. Run with "banner" as its first argument, it writes a
// line to stdout and one to stderr as soon as it starts, before reading.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "sleep" {
		for {
			time.Sleep(time.Hour)
		}
	}
	if len(os.Args) >= 2 && os.Args[1] == "banner" {
		fmt.Println("banner on stdout")
		fmt.Fprintln(os.Stderr, "banner on stderr")
	}
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "echo":
			reply("%s", arg)
		case "stderr":
			fmt.Fprintln(os.Stderr, arg)
			reply("ok")
		case "uid":
			reply("uid=%d gid=%d", os.Getuid(), os.Getgid())
		case "net":
			c, err := net.DialTimeout("tcp", "1.1.1.1:53", 5*time.Second)
			if err != nil {
				reply("net: error: %v", err)
				continue
			}
			c.Close()
			reply("net: ok")
		case "write-root":
			reply("write-root: %s", result(os.WriteFile("/x", []byte("x"), 0o644)))
		case "write-tmp":
			reply("write-tmp: %s", result(os.WriteFile("/tmp/x", []byte("x"), 0o644)))
		case "exec-tmp":
			reply("exec-tmp: %s", result(execTmp()))
		case "status":
			reply("%s", status())
		case "nofile":
			var l syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
				reply("nofile: error: %v", err)
				continue
			}
			reply("nofile=%d/%d", l.Cur, l.Max)
		case "cgroup":
			reply("%s", cgroupLimits())
		case "forkbomb":
			reply("%s", forkbomb())
		case "hog":
			hog()
		case "args":
			reply("%s", strings.Join(os.Args[1:], " "))
		case "fetch":
			reply("fetch: %s", fetch(arg))
		case "fetchn":
			n, u, _ := strings.Cut(arg, " ")
			count, _ := strconv.Atoi(n)
			t0 := time.Now()
			last := ""
			for range count {
				last = fetch(u)
			}
			reply("fetchn: us=%d last=%s", time.Since(t0).Microseconds(), strings.ReplaceAll(last, " ", "_"))
		case "tunnel":
			addr, mode, _ := strings.Cut(arg, " ")
			reply("tunnel: %s", tunnel(addr, mode == "noauth"))
		case "dial":
			c, err := net.DialTimeout("tcp", arg, 5*time.Second)
			if err != nil {
				reply("dial: error: %v", err)
				continue
			}
			c.Close()
			reply("dial: ok")
		case "resolve":
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			addrs, err := net.DefaultResolver.LookupHost(ctx, arg)
			cancel()
			if err != nil {
				reply("resolve: error: %v", err)
				continue
			}
			reply("resolve: ok %s", strings.Join(addrs, ","))
		case "getenv":
			reply("%s", os.Getenv(arg))
		case "read":
			b, err := os.ReadFile(arg)
			if err != nil {
				reply("read: error: %v", err)
				continue
			}
			first, _, _ := strings.Cut(string(b), "\n")
			reply("%s", first)
		case "write":
			reply("write: %s", result(os.WriteFile(arg, []byte("x"), 0o644)))
		case "exit":
			n, _ := strconv.Atoi(arg)
			os.Exit(n)
		case "trap":
			signal.Ignore(syscall.SIGTERM)
			reply("trapped")
			for {
				time.Sleep(time.Hour)
			}
		default:
			reply("unknown command %q", cmd)
		}
	}
}

func result(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// execTmp copies this program to /tmp and runs the copy: on a noexec /tmp,
// execve fails with EACCES.
func execTmp() error {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	if err := os.WriteFile("/tmp/copy", self, 0o755); err != nil {
		return err
	}
	return exec.Command("/tmp/copy", "sleep-never").Run()
}

// status returns the lines of /proc/self/status that show privileges.
func status() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "status: error: " + err.Error()
	}
	var fields []string
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k {
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
			if ok {
				fields = append(fields, k+"="+strings.TrimSpace(v))
			}
		}
	}
	return strings.Join(fields, " ")
}

// cgroupLimits reads the limits the engine applied, from cgroup v1 or v2,
// as "memory=B memsw=B pids=N cpu=QUOTA/PERIOD" (memsw: memory plus swap;
// "max" where unlimited, "?" where unreadable).
func cgroupLimits() string {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil { // v2
		mem := read("/sys/fs/cgroup/memory.max")
		swap := read("/sys/fs/cgroup/memory.swap.max")
		memsw := "?"
		if m, err1 := strconv.ParseInt(mem, 10, 64); err1 == nil {
			if s, err2 := strconv.ParseInt(swap, 10, 64); err2 == nil {
				memsw = strconv.FormatInt(m+s, 10)
			}
		}
		quota, period, _ := strings.Cut(read("/sys/fs/cgroup/cpu.max"), " ")
		return fmt.Sprintf("memory=%s memsw=%s pids=%s cpu=%s/%s", mem, memsw, read("/sys/fs/cgroup/pids.max"), quota, period)
	}
	return fmt.Sprintf("memory=%s memsw=%s pids=%s cpu=%s/%s",
		read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
		read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
		read("/sys/fs/cgroup/pids/pids.max"),
		read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
		read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
}

// forkbomb starts copies of this program (each just sleeps) until starting
// one fails, kills them all and reports how many had started and why the
// next one did not.
func forkbomb() string {
	// Once the pids limit is reached, the Go runtime cannot create an OS
	// thread either, and a runtime that needs one dies ("failed to create
	// new OS thread"). Make it create spare threads now: a goroutine locked
	// to a thread keeps that thread; once unlocked, the thread stays idle in
	// the runtime's pool, ready for the blocking system calls of the loop.
	const spare = 8
	var ready, unlocked sync.WaitGroup
	release := make(chan struct{})
	ready.Add(spare)
	unlocked.Add(spare)
	for range spare {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
			unlocked.Done()
		}()
	}
	ready.Wait()
	close(release)
	unlocked.Wait()

	var children []*exec.Cmd
	var last error
	const attempts = 10000
	for range attempts {
		c := exec.Command("/proc/self/exe", "sleep")
		// Fewer threads per copy; a copy that cannot create one dies and
		// stays a zombie, still holding its pid, until the kill below.
		c.Env = []string{"GOMAXPROCS=1"}
		if err := c.Start(); err != nil {
			last = err
			break
		}
		children = append(children, c)
	}
	for _, c := range children {
		c.Process.Kill()
	}
	for _, c := range children {
		c.Wait()
	}
	if last == nil {
		return fmt.Sprintf("forkbomb: started=%d eagain=false err=none", len(children))
	}
	return fmt.Sprintf("forkbomb: started=%d eagain=%t err=%v", len(children), errors.Is(last, syscall.EAGAIN), last)
}

// hog allocates memory 1 MiB at a time, touching every page so that it is
// really used, until the kernel kills the process.
func hog() {
	var keep [][]byte
	for i := 1; ; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
		if i%8 == 0 {
			fmt.Fprintf(os.Stderr, "hog: %d MiB\n", i)
		}
	}
}

// fetch GETs u through the proxy the environment names.
func fetch(u string) string {
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// tunnel opens a CONNECT tunnel to addr through HTTPS_PROXY and sends a
// GET over it, counting the bytes each way through the tunnel.
func tunnel(addr string, noauth bool) string {
	pu, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil || pu.Host == "" {
		return "error: no HTTPS_PROXY"
	}
	c, err := net.DialTimeout("tcp", pu.Host, 5*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if pass, ok := pu.User.Password(); ok && !noauth {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(pu.User.Username()+":"+pass)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return "error: " + err.Error()
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "error: " + err.Error()
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	get := "GET / HTTP/1.0\r\nHost: " + addr + "\r\n\r\n"
	n, err := io.WriteString(c, get)
	if err != nil {
		return "error: " + err.Error()
	}
	b, err := io.ReadAll(br)
	if err != nil {
		return "error: " + err.Error()
	}
	first, _, _ := strings.Cut(string(b), "\r\n")
	return fmt.Sprintf("200 sent=%d read=%d %s", n, len(b), first)
}

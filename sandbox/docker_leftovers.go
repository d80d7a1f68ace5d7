package sandbox

// Containers that outlive their bridge: the labels that name a container's
// owner, and RemoveLeftovers, which removes what dead bridges left behind.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/moby/client"
)

// Container labels. RemoveLeftovers documents how they are used.
const (
	labelInstance = "io.mcp-bridge.instance"  // the bridge instance (DockerOptions.Instance)
	labelSession  = "io.mcp-bridge.session"   // the session ID
	labelHost     = "io.mcp-bridge.host"      // hostname of the bridge's host
	labelBootID   = "io.mcp-bridge.boot-id"   // that host's boot ID (Linux), "" if unknown
	labelPID      = "io.mcp-bridge.pid"       // the bridge's process ID
	labelPIDStart = "io.mcp-bridge.pid-start" // that process's start time in clock ticks since boot (Linux), "" if unknown
)

// RemoveLeftovers removes the containers (servers and egress proxies) and
// the egress networks that earlier bridges left behind (a bridge killed
// before its Close ran) and returns how many it removed.
// Call it at start-up, before serving.
//
// Every container this package creates carries the labels
// io.mcp-bridge.instance (the bridge's instance name),
// io.mcp-bridge.session, and the identity of the bridge process that
// created it: io.mcp-bridge.host (hostname), io.mcp-bridge.boot-id,
// io.mcp-bridge.pid and io.mcp-bridge.pid-start (the process's start time,
// which tells a reused PID from the original). A container with an
// io.mcp-bridge.instance label that this process did not create is removed
// when either
//
//   - its instance is this launcher's Instance: a bridge restarted under the
//     same name takes over everything of that name (so two bridges running
//     at once must not share an instance name); or
//   - it was created on this host (same hostname) by a process that is gone:
//     the boot ID differs (the host rebooted), no process has that PID, or
//     the process with that PID started at another time.
//
// Containers of live bridges, and of bridges on other hosts sharing the
// engine, are left alone: from here nothing tells whether those are alive.
// A bridge running in a container sees its own PID namespace and hostname,
// so there, give it a stable --instance name.
func (d *Docker) RemoveLeftovers(ctx context.Context) (int, error) {
	list, err := d.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelInstance),
	})
	if err != nil {
		return 0, fmt.Errorf("docker sandbox: listing containers left by earlier bridges: %w", err)
	}
	removed := 0
	var errs []error
	for _, c := range list.Items {
		if d.self.is(c.Labels) {
			continue // ours, alive: Close removes them
		}
		var reason string
		switch {
		case c.Labels[labelInstance] == d.opts.Instance:
			reason = "an earlier run of this instance created it"
		case c.Labels[labelHost] == d.self.host:
			dead, why := ownerGone(c.Labels, d.self)
			if !dead {
				continue
			}
			reason = why
		default:
			continue
		}
		if err := d.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		d.log.Info("removed a leftover container", "container", shortID(c.ID),
			"owner_instance", c.Labels[labelInstance], "session", c.Labels[labelSession], "state", string(c.State), "reason", reason)
	}
	// The internal networks of egress proxies (docker_egress.go), by the
	// same rules, now that their containers are gone.
	nets, err := d.cli.NetworkList(ctx, client.NetworkListOptions{
		Filters: make(client.Filters).Add("label", labelInstance),
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing networks: %w", err))
	}
	for _, n := range nets.Items {
		if d.self.is(n.Labels) {
			continue
		}
		var reason string
		switch {
		case n.Labels[labelInstance] == d.opts.Instance:
			reason = "an earlier run of this instance created it"
		case n.Labels[labelHost] == d.self.host:
			dead, why := ownerGone(n.Labels, d.self)
			if !dead {
				continue
			}
			reason = why
		default:
			continue
		}
		if err := d.removeNetwork(ctx, n.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		d.log.Info("removed a leftover network", "network", n.Name, "owner_instance", n.Labels[labelInstance], "reason", reason)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("docker sandbox: removing containers and networks left by earlier bridges: %w", err)
	}
	return removed, nil
}

// owner identifies a bridge process across restarts of the bridge.
type owner struct {
	host     string
	bootID   string
	pid      int
	pidStart string
}

func currentOwner() owner {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return owner{host: host, bootID: bootID(), pid: pid, pidStart: processStart(pid)}
}

func (o owner) labels() map[string]string {
	return map[string]string{
		labelHost:     o.host,
		labelBootID:   o.bootID,
		labelPID:      strconv.Itoa(o.pid),
		labelPIDStart: o.pidStart,
	}
}

// is reports whether labels name this very process.
func (o owner) is(labels map[string]string) bool {
	return labels[labelHost] == o.host && labels[labelBootID] == o.bootID &&
		labels[labelPID] == strconv.Itoa(o.pid) && labels[labelPIDStart] == o.pidStart
}

// ownerGone reports whether the bridge process named by labels, on this
// host, is gone, and why. If unsure, it says no.
func ownerGone(labels map[string]string, self owner) (bool, string) {
	if b := labels[labelBootID]; b != "" && self.bootID != "" && b != self.bootID {
		return true, "its bridge ran before this host's last boot"
	}
	pid, err := strconv.Atoi(labels[labelPID])
	if err != nil || pid <= 0 {
		return false, ""
	}
	if !processExists(pid) {
		return true, fmt.Sprintf("its bridge (pid %d) is gone", pid)
	}
	if want := labels[labelPIDStart]; want != "" {
		if got := processStart(pid); got != "" && got != want {
			return true, fmt.Sprintf("its bridge (pid %d) is gone; the pid now belongs to another process", pid)
		}
	}
	return false, ""
}

// processExists reports whether a process with this PID exists (possibly
// as a zombie, or owned by another user).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// bootID returns this host's boot ID, "" where the kernel does not tell.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// processStart returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat), "" where unknown.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// or parentheses: fields are counted from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	const starttime = 22 - 3 // f[0] is field 3
	if len(f) <= starttime {
		return ""
	}
	return f[starttime]
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

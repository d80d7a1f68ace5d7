//go:build unix

package audit

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileMode says how requests write to f (see output): a regular file
// directly; a pipe, FIFO or socket the process opened non-blocking (Go's
// os.OpenFile makes them so, and has them polled), with writes tried
// without blocking; anything else, standard output in blocking mode
// among them, through the goroutine only.
func fileMode(f *os.File) (writeMode, syscall.RawConn) {
	fi, err := f.Stat()
	if err == nil && fi.Mode().IsRegular() {
		return modeDirect, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return modeHandoff, nil
	}
	nonblock := false
	if err := rc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		nonblock = err == nil && flags&unix.O_NONBLOCK != 0
	}); err != nil || !nonblock {
		return modeHandoff, nil
	}
	return modeNonblock, rc
}

// tryRaw is rawWrite: it writes rawBuf without blocking.
func (o *output) tryRaw(fd uintptr) bool {
	for o.rawN < len(o.rawBuf) {
		n, err := syscall.Write(int(fd), o.rawBuf[o.rawN:])
		if n > 0 {
			o.rawN += n
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			o.rawErr = errWouldBlock
		case err != nil:
			o.rawErr = &os.PathError{Op: "write", Path: "audit log", Err: err}
		case n <= 0:
			o.rawErr = io.ErrShortWrite
		default:
			continue
		}
		return true
	}
	return true
}

//go:build !unix

package audit

import (
	"errors"
	"os"
	"syscall"
)

// fileMode says how requests write to f (see output): a regular file
// directly, anything else through the goroutine only.
func fileMode(f *os.File) (writeMode, syscall.RawConn) {
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		return modeDirect, nil
	}
	return modeHandoff, nil
}

// tryRaw is never used here: fileMode never answers modeNonblock.
func (o *output) tryRaw(uintptr) bool {
	o.rawErr = errors.ErrUnsupported
	return true
}

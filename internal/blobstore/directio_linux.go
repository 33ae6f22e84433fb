package blobstore

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// directIOAlign is the alignment O_DIRECT needs of buffers, file offsets
// and lengths. 4 KiB covers the logical block size of the disks and file
// systems Gantry runs on; a file system that needs more refuses the
// write with EINVAL, and the writer falls back to the page cache.
const directIOAlign = 4096

// openDirect creates a new file at path opened for writing with O_DIRECT.
// ok is false (and the file is not created) when the file system does not
// support O_DIRECT.
func openDirect(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_DIRECT, 0o644)
	if errors.Is(err, syscall.EINVAL) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return f, true, nil
}

// clearDirect turns O_DIRECT off on f, so that writes of any length and
// alignment go through the page cache.
func clearDirect(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			ferr = err
			return
		}
		_, ferr = unix.FcntlInt(fd, unix.F_SETFL, flags&^unix.O_DIRECT)
	}); err != nil {
		return err
	}
	return ferr
}

package blobstore

import (
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// linkCount is the number of names info's file has; 0 if unknown.
func linkCount(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}

// canRecycle: evicted files are recycled here (see spare.go).
const canRecycle = true

// changeTime is info's file's ctime.
func changeTime(info fs.FileInfo) (time.Time, bool) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix()), true
	}
	return time.Time{}, false
}

// syncFS flushes the file system that holds path.
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

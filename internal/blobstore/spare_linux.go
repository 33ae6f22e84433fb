package blobstore

import (
	"io/fs"
	"syscall"
)

// linkCount is the number of names info's file has; 0 if unknown.
func linkCount(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}

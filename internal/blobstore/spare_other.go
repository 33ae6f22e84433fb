//go:build !linux

package blobstore

import (
	"io/fs"
	"time"
)

// canRecycle: evicted files are not recycled here (see spare.go).
const canRecycle = false

// linkCount reports 0 (unknown) here.
func linkCount(fs.FileInfo) uint64 { return 0 }

// changeTime reports no ctime here.
func changeTime(fs.FileInfo) (time.Time, bool) { return time.Time{}, false }

// syncFS is not needed here: nothing is recycled.
func syncFS(string) error { return nil }

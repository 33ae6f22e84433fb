//go:build !linux

package recordlog

import "os"

// datasync makes f durable (fsync where fdatasync is not available).
func datasync(f *os.File) error { return f.Sync() }

package recordlog

import (
	"fmt"
	"os"
	"path/filepath"
)

// SyncPolicy says how Log.Sync makes records durable.
type SyncPolicy int

const (
	// NoSync leaves writing back to the kernel: records survive a crash
	// of the process, not necessarily a power loss. Sync is a no-op, and
	// new files' directory entries are not flushed either.
	NoSync SyncPolicy = iota
	// SyncFile flushes with fsync(2): data and metadata.
	SyncFile
	// SyncData flushes with fdatasync(2): the data, and the metadata only
	// where it is needed to read the data back (a new size, say), which on
	// a preallocated log is none.
	SyncData
)

func (p SyncPolicy) flush(f *os.File) error {
	switch p {
	case SyncFile:
		return f.Sync()
	case SyncData:
		return datasync(f)
	}
	return nil
}

// SyncDir flushes dir itself (its entries: a file created, renamed or
// removed in it) to stable storage.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// syncDirOf flushes the directory holding path.
func syncDirOf(path string) error { return SyncDir(filepath.Dir(path)) }

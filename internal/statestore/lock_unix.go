//go:build unix

package statestore

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on path, so that two processes never
// append to the same logs.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("statestore: opening the lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("statestore: the state directory is in use by another process (%s is locked): %w", path, err)
	}
	return f, nil
}

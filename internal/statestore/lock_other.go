//go:build !unix

package statestore

import "os"

// lockDir opens path; other systems get no cross-process lock.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}

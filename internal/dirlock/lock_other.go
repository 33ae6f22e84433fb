//go:build !unix

package dirlock

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("the lock is held")

// lockFile takes no lock: other systems get no cross-process exclusion.
func lockFile(*os.File) error { return nil }

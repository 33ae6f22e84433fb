//go:build linux

package recordlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable, and its metadata only where needed to
// read the data back (fdatasync).
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

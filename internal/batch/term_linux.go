//go:build linux

package batch

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth reports whether f is a terminal, and its width.
func terminalWidth(f *os.File) (int, bool) {
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80, true
	}
	return int(ws.Col), true
}

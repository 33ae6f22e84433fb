//go:build !linux

package batch

import "os"

// terminalWidth reports whether f is a terminal (a character device, as
// near as the standard library can tell), assuming 80 columns.
func terminalWidth(f *os.File) (int, bool) {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return 0, false
	}
	return 80, true
}

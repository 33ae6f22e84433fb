package fileio

import (
	"bytes"
	"os"
	"strconv"
	"sync"
)

// umask is the process's file mode creation mask, read once from
// /proc/self/status (Linux 4.7 and later) without changing it, as
// syscall.Umask would have to. When it cannot be read it is taken as 0o777,
// so that every created file gets an explicit chmod.
var umask = sync.OnceValue(readUmask)

func readUmask() uint32 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("Umask:")); ok {
			m, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 8, 32)
			if err != nil {
				return 0o777
			}
			return uint32(m)
		}
	}
	return 0o777
}

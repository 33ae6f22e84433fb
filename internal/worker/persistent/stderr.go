package persistent

import (
	"os"
	"strings"
	"sync"
)

// stderrKeep is how much of a process's stderr is kept: its end, for the
// error message when it dies. A process lives long; all it logs would
// fill the disk.
const stderrKeep = 4 << 10

// stderrTail reads a process's stderr from a pipe and keeps the last
// stderrKeep bytes.
type stderrTail struct {
	done chan struct{}
	mu   sync.Mutex
	buf  []byte
}

func newStderrTail(r *os.File) *stderrTail {
	t := &stderrTail{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer r.Close()
		b := make([]byte, 8<<10)
		for {
			n, err := r.Read(b)
			t.mu.Lock()
			t.buf = append(t.buf, b[:n]...)
			if len(t.buf) > stderrKeep {
				t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrKeep:]...)
			}
			t.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return t
}

// String is the end of the stream so far, trimmed.
func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

package job

import (
	"bytes"
	"context"
	"io"
	"sync"
)

// liveLines writes the live output of a job's stream to a shared writer
// a line at a time, each line prefixed with the job's name, so that the
// output of jobs running at once does not mix within a line.
type liveLines struct {
	mu     *sync.Mutex // shared by every job's streams
	w      io.Writer
	prefix []byte
	line   []byte
}

func newLiveLines(mu *sync.Mutex, w io.Writer, name string) *liveLines {
	return &liveLines{mu: mu, w: w, prefix: []byte("[" + name + "] ")}
}

func (l *liveLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.line = append(l.line, p...)
			break
		}
		l.line = append(l.line, p[:i+1]...)
		p = p[i+1:]
		l.flush()
	}
	return n, nil
}

// flush writes the line held (adding a newline to a partial one).
func (l *liveLines) flush() {
	if len(l.line) == 0 {
		return
	}
	if l.line[len(l.line)-1] != '\n' {
		l.line = append(l.line, '\n')
	}
	l.mu.Lock()
	l.w.Write(append(append([]byte(nil), l.prefix...), l.line...))
	l.mu.Unlock()
	l.line = l.line[:0]
}

// followLive wraps started so that, with BatchConfig.Live, the job's
// output is followed once its operation is named; stop ends that and
// prints a partial last line.
func (b *Batch) followLive(ctx context.Context, name string, started func(string)) (wrapped func(string), stop func()) {
	if !b.cfg.Live {
		return started, func() {}
	}
	out, errOut := newLiveLines(&b.liveMu, b.cfg.Log, name), newLiveLines(&b.liveMu, b.cfg.Log, name)
	var stopFollow func()
	wrapped = func(op string) {
		started(op)
		if stopFollow == nil {
			stopFollow = b.cfg.Client.FollowLive(ctx, op, out, errOut)
		}
	}
	stop = func() {
		if stopFollow != nil {
			stopFollow()
			out.flush()
			errOut.flush()
		}
	}
	return wrapped, stop
}

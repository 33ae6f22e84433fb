package blobstore

import (
	"io"
	"os"
	"sync"
)

// fileWriter writes a large blob's temporary file from its own goroutine,
// so that hashing (in the caller's goroutine) and writing to the page
// cache, the two big costs of a large upload, run on two cores at once.
//
// Small writes (clients stream in chunks as small as 16 KiB) are gathered
// into writeBuffer-sized buffers, saving a system call per chunk; a full
// buffer goes to the goroutine while the caller fills the next. A large
// write is handed over as it is and waited for before Write returns, the
// file writing it while the caller hashes it: no copy, and the caller's
// slice is not kept.
type fileWriter struct {
	f    *os.File
	cur  []byte        // buffer being filled; nil if none
	jobs chan fileJob  // to the goroutine
	acks chan struct{} // a job with ack set is done
	done chan struct{} // the goroutine has stopped
	mu   sync.Mutex
	err  error // the first write error, under mu
	stop sync.Once
}

type fileJob struct {
	b      []byte
	pooled bool // b is from bufPool; return it once written
	ack    bool // send on acks once written
}

// writeBuffer is the size of the writes to a large blob's file.
const writeBuffer = 1 << 20

// fileBuffers holds full buffers in flight: the goroutine writes one while
// the caller fills another.
const fileBuffers = 2

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, writeBuffer); return &b }}

func newFileWriter(f *os.File) *fileWriter {
	fw := &fileWriter{
		f:    f,
		jobs: make(chan fileJob, fileBuffers),
		acks: make(chan struct{}),
		done: make(chan struct{}),
	}
	go fw.run()
	return fw
}

func (fw *fileWriter) run() {
	defer close(fw.done)
	for j := range fw.jobs {
		if fw.failed() == nil {
			if _, err := fw.f.Write(j.b); err != nil {
				fw.mu.Lock()
				fw.err = err
				fw.mu.Unlock()
			}
		}
		if j.pooled {
			b := j.b[:0]
			bufPool.Put(&b)
		}
		if j.ack {
			fw.acks <- struct{}{}
		}
	}
}

func (fw *fileWriter) failed() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.err
}

// write writes p to the file (eventually, if buffered), writing it to
// hash meanwhile. It returns an error if an earlier write failed.
func (fw *fileWriter) write(p []byte, hash io.Writer) error {
	if err := fw.failed(); err != nil {
		return err
	}
	if len(fw.cur) == 0 && len(p) >= writeBuffer {
		fw.jobs <- fileJob{b: p, ack: true}
		hash.Write(p)
		<-fw.acks
		return fw.failed()
	}
	hash.Write(p)
	for len(p) > 0 {
		if fw.cur == nil {
			fw.cur = (*bufPool.Get().(*[]byte))[:0]
		}
		k := min(len(p), cap(fw.cur)-len(fw.cur))
		fw.cur = append(fw.cur, p[:k]...)
		p = p[k:]
		if len(fw.cur) == cap(fw.cur) {
			fw.jobs <- fileJob{b: fw.cur, pooled: true}
			fw.cur = nil
		}
	}
	return nil
}

// finish writes what is buffered, stops the goroutine and returns the
// first write error. It may be called more than once.
func (fw *fileWriter) finish() error {
	fw.stop.Do(func() {
		if len(fw.cur) > 0 {
			fw.jobs <- fileJob{b: fw.cur, pooled: true}
		}
		fw.cur = nil
		close(fw.jobs)
	})
	<-fw.done
	return fw.failed()
}

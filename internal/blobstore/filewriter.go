package blobstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
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
	f *os.File
	// direct: f was opened with O_DIRECT. Every write then goes through
	// an aligned buffer (a copy, far cheaper than the page cache's), the
	// last partial block is written after O_DIRECT is turned off, and a
	// file system that refuses a direct write gets the rest through the
	// page cache. It does not change; the goroutine keeps whether
	// O_DIRECT is still on.
	direct bool
	cur    []byte        // buffer being filled; nil if none
	jobs   chan fileJob  // to the goroutine
	acks   chan struct{} // a job with ack set is done
	done   chan struct{} // the goroutine has stopped
	mu     sync.Mutex
	err    error // the first write error, under mu
	stop   sync.Once
}

type fileJob struct {
	b      []byte
	pooled bool // b is from bufPool (alignedPool if direct); return it once written
	ack    bool // send on acks once written
	last   bool // the blob's last bytes: may end in a partial block
}

// writeBuffer is the size of the writes to a large blob's file.
const writeBuffer = 1 << 20

// fileBuffers holds full buffers in flight: the goroutine writes one while
// the caller fills another.
const fileBuffers = 2

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, writeBuffer); return &b }}

// alignedPool holds writeBuffer-sized buffers whose start is aligned for
// O_DIRECT.
var alignedPool = sync.Pool{New: func() any {
	raw := make([]byte, writeBuffer+directIOAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) % directIOAlign); r != 0 {
		off = directIOAlign - r
	}
	b := raw[off : off : off+writeBuffer]
	return &b
}}

func newFileWriter(f *os.File, direct bool) *fileWriter {
	fw := &fileWriter{
		f:      f,
		direct: direct,
		jobs:   make(chan fileJob, fileBuffers),
		acks:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go fw.run()
	return fw
}

func (fw *fileWriter) run() {
	defer close(fw.done)
	direct := fw.direct
	on := direct
	for j := range fw.jobs {
		if fw.failed() == nil {
			if err := fw.writeFile(j, &on); err != nil {
				fw.mu.Lock()
				fw.err = err
				fw.mu.Unlock()
			}
		}
		if j.pooled {
			b := j.b[:0]
			if direct {
				alignedPool.Put(&b)
			} else {
				bufPool.Put(&b)
			}
		}
		if j.ack {
			fw.acks <- struct{}{}
		}
	}
}

// writeFile writes one job's bytes to the file.
// on says whether O_DIRECT is still on; writeFile turns it off.
func (fw *fileWriter) writeFile(j fileJob, on *bool) error {
	b := j.b
	if *on {
		n := len(b)
		if j.last {
			n &^= directIOAlign - 1
		}
		if n > 0 {
			_, err := fw.f.Write(b[:n])
			if err == nil {
				b = b[n:]
			} else if !errors.Is(err, syscall.EINVAL) {
				return err
			}
			// EINVAL: the file system wants other alignment or no
			// O_DIRECT at all; the page cache takes the rest.
		}
		if len(b) > 0 {
			if err := clearDirect(fw.f); err != nil {
				return fmt.Errorf("turning off O_DIRECT: %w", err)
			}
			*on = false
		}
	}
	if len(b) == 0 {
		return nil
	}
	_, err := fw.f.Write(b)
	return err
}

func (fw *fileWriter) failed() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.err
}

// write writes p to the file (eventually, if buffered), writing it to
// hash (if not nil) meanwhile. It returns an error if an earlier write failed.
func (fw *fileWriter) write(p []byte, hash io.Writer) error {
	if err := fw.failed(); err != nil {
		if hash != nil {
			hash.Write(p) // hashingWriter's promise
		}
		return err
	}
	if len(fw.cur) == 0 && len(p) >= writeBuffer && !fw.direct {
		fw.jobs <- fileJob{b: p, ack: true}
		if hash != nil {
			hash.Write(p)
		}
		<-fw.acks
		return fw.failed()
	}
	if hash != nil {
		hash.Write(p)
	}
	for len(p) > 0 {
		if fw.cur == nil {
			if fw.direct {
				fw.cur = (*alignedPool.Get().(*[]byte))[:0]
			} else {
				fw.cur = (*bufPool.Get().(*[]byte))[:0]
			}
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
			fw.jobs <- fileJob{b: fw.cur, pooled: true, last: true}
		}
		fw.cur = nil
		close(fw.jobs)
	})
	<-fw.done
	return fw.failed()
}

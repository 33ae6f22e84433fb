package recordlog

import (
	"os"
	"sync"
)

// Preallocation (Options.Preallocate). A commit that appends to a log
// changes the file's size,
// so its fsync must also commit the file system's journal, which on ext4
// (data=ordered) first writes out other files' dirty data: the CAS's new
// blobs, other programs' writes. The log is therefore kept a few MiB
// longer than its records, the extra being real zeros made durable ahead
// of time (not fallocate: its unwritten extents would need a journal
// commit when first written), and commits overwrite those zeros and call
// fdatasync, which then has only the record's pages to write. Measured on
// this project's 2-core VM (docs/PERFORMANCE-HISTORY.md, "Set 5", for the
// state store's log): about half the commit latency and 40% less kernel
// CPU per commit.
//
// Replay stops at the zeros (a Format must never frame zeros as a record)
// and Open keeps them. An extension
// writes zeros from at least preallocSlack past the last record, and no
// record is written into the range being zeroed, so the two writers never
// overlap; a fresh log's first records are appended (correct, only
// slower) while its zeros are prepared, and a commit waits for an
// extension only when a burst outruns the slack. fdatasync flushes
// whatever metadata a write needs (a size change, a block allocated in a
// gap), so durability never depends on the zeros being there.

// preallocChunk is how much the log is extended by at a time; an
// extension starts when less than half a chunk of zeros is left.
const preallocChunk = 4 << 20

// preallocSlack is how far past the last record an extension starts at
// the least, room for the commits made while it runs.
const preallocSlack = 1 << 20

// zeroChunk is written to extend a log.
var zeroChunk = make([]byte, 1<<20)

// prealloc tracks the zeros of one log file.
type prealloc struct {
	f *os.File

	mu sync.Mutex
	// size is how far the file holds durable bytes (records and zeros).
	size int64
	// extending is closed when the running extension ends (nil: none);
	// it zeroes [extFrom, extFrom+preallocChunk).
	extending chan struct{}
	extFrom   int64
}

func newPrealloc(f *os.File, size int64) *prealloc { return &prealloc{f: f, size: size} }

// room waits until bytes [0, end) can be written without changing the
// file's size: true when they can, false when the caller must append
// (the zeros end before end and no extension is running). It runs under
// the log's append lock.
func (p *prealloc) room(end int64) bool {
	for {
		p.mu.Lock()
		size, ext, from := p.size, p.extending, p.extFrom
		p.mu.Unlock()
		if end <= size {
			return true
		}
		if ext == nil || end <= from {
			return false
		}
		<-ext // a burst outran the slack: wait for the extension
	}
}

// grew records that a commit appended past the zeros: the file now holds
// end bytes, made durable by that commit's fsync.
func (p *prealloc) grew(end int64) {
	p.mu.Lock()
	p.size = max(p.size, end)
	p.mu.Unlock()
}

// maybeExtend starts an extension in the background when less than half a
// chunk of zeros is left after written bytes.
func (p *prealloc) maybeExtend(written int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.extending != nil || p.size-written >= preallocChunk/2 {
		return
	}
	from := max(p.size, written+preallocSlack)
	done := make(chan struct{})
	p.extending, p.extFrom = done, from
	go func() {
		ok := writeZeros(p.f, from, preallocChunk) == nil && datasync(p.f) == nil
		p.mu.Lock()
		if ok {
			p.size = max(p.size, from+preallocChunk)
		}
		p.extending = nil
		p.mu.Unlock()
		close(done)
	}()
}

// reset forgets the zeros after a write that failed: the file was cut
// back to size, and the zeros are written again when needed.
func (p *prealloc) reset(size int64) {
	p.wait()
	p.mu.Lock()
	p.size = size
	p.mu.Unlock()
}

// wait waits for a running extension (before the file is closed).
func (p *prealloc) wait() {
	p.mu.Lock()
	ext := p.extending
	p.mu.Unlock()
	if ext != nil {
		<-ext
	}
}

func writeZeros(f *os.File, off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(zeroChunk)))
		if _, err := f.WriteAt(zeroChunk[:c], off); err != nil {
			return err
		}
		off, n = off+c, n-c
	}
	return nil
}

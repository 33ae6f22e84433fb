package recordlog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Options say how a log is read and kept.
type Options struct {
	// Format frames the records.
	Format Format
	// Verify checks every record's checksums when the log is replayed;
	// without it only headers are checked (for logs whose records are
	// verified again whenever they are read).
	Verify bool
	// Sync is how Sync makes appended records durable.
	Sync SyncPolicy
	// Preallocate keeps zeros written ahead after the records, which
	// appends overwrite (preallocate.go); a replay ends at them.
	Preallocate bool
	// Damaged, if set, is called by Open when the log ends in bytes that
	// are not intact records, before they are cut off: an error refuses to
	// open the log (say, because intact records follow the damage) and is
	// returned as it is. Without it the damaged end is always cut off.
	Damaged func(path string, t Tail) error
	// Covers, if set, lets a replay go past a damaged record that the
	// intact record after it covers (see ReplayCovering): for a log whose
	// writer overlaps one record's flush with the next record's.
	Covers func(damagedOff int64, next []byte) bool
}

// ErrNotRepaired is wrapped by an Append error when the part of the record
// that did reach the file could not be cut off again: later records would
// follow a torn one, so the log must not take more until it is reopened.
var ErrNotRepaired = errors.New("the log could not be repaired after a failed write")

// Log is one append-only file of records, open for appending after its
// last intact record. Appends are serialised by the log; reads (ReadAt)
// and Sync may run concurrently with them, and with each other.
type Log struct {
	path   string
	f      *os.File
	policy SyncPolicy
	pre    *prealloc // nil unless Options.Preallocate

	mu   sync.Mutex // serialises appends
	size int64      // of the intact records, under mu
	// written is size, readable without mu.
	written atomic.Int64

	// synced is how much of the file the flushes that have ended cover.
	syncMu sync.Mutex
	synced int64
}

// Open opens the log at path, creating it if it does not exist, replays
// its records into fn (see Replay) and cuts off a torn or damaged end, so
// that appends follow the last intact record.
func Open(path string, opts Options, fn func(off int64, rec []byte) error) (*Log, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		created = true
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	fail := func(err error) (*Log, error) {
		f.Close()
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("opening %s: %w", path, err))
	}
	t, err := ReplayCovering(f, info.Size(), opts.Format, opts.Verify, opts.Covers, fn)
	if err != nil {
		return fail(fmt.Errorf("reading %s: %w", path, err))
	}
	fileSize := t.Size
	if !t.Whole(opts.Preallocate) {
		if opts.Damaged != nil {
			if err := opts.Damaged(path, t); err != nil {
				return fail(err)
			}
		}
		// A crash mid-write: cut the torn record off so that appends
		// follow the last intact one.
		if err := f.Truncate(t.End); err != nil {
			return fail(fmt.Errorf("cutting the damaged end off %s: %w", path, err))
		}
		if err := opts.Sync.flush(f); err != nil {
			return fail(fmt.Errorf("cutting the damaged end off %s: %w", path, err))
		}
		fileSize = t.End
	}
	if created && opts.Sync != NoSync {
		if err := syncDirOf(path); err != nil {
			return fail(err)
		}
	}
	return newLog(path, f, opts, t.End, fileSize), nil
}

// Create creates an empty log at path, replacing any file there, and
// flushes its directory entry unless the policy is NoSync.
func Create(path string, opts Options) (*Log, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	if opts.Sync != NoSync {
		if err := syncDirOf(path); err != nil {
			f.Close()
			os.Remove(path)
			return nil, err
		}
	}
	return newLog(path, f, opts, 0, 0), nil
}

func newLog(path string, f *os.File, opts Options, size, fileSize int64) *Log {
	l := &Log{path: path, f: f, policy: opts.Sync, size: size, synced: size}
	l.written.Store(size)
	if opts.Preallocate {
		l.pre = newPrealloc(f, max(fileSize, size))
		l.pre.maybeExtend(size)
	}
	return l
}

// Path is the log's file name.
func (l *Log) Path() string { return l.path }

// Size is the length of the records in the log (not counting
// preallocated zeros).
func (l *Log) Size() int64 { return l.written.Load() }

// Append writes recs, one or more whole records, after the last one with
// one write, and returns the offset they start at. A write that fails
// half way is cut off again, so that the next record follows the last
// intact one; if that fails too, the error wraps ErrNotRepaired. The
// records are durable once Sync covers them.
func (l *Log) Append(recs []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	off := l.size
	end := off + int64(len(recs))
	if l.pre != nil {
		l.pre.room(end)
	}
	if _, err := l.f.WriteAt(recs, off); err != nil {
		if l.pre != nil {
			l.pre.wait() // an extension's zeros must not land after the cut
		}
		if terr := l.f.Truncate(off); terr != nil {
			return 0, fmt.Errorf("appending to %s: %w (%w: %v)", l.path, err, ErrNotRepaired, terr)
		}
		if l.pre != nil {
			l.pre.reset(off)
		}
		return 0, fmt.Errorf("appending to %s: %w", l.path, err)
	}
	l.size = end
	l.written.Store(end)
	return off, nil
}

// Sync makes the records up to end durable, as the log's policy says, by
// flushing everything written so far; it returns at once when a flush that
// has ended already covered end. Flushes are not serialised: a caller may
// flush newer records while an older flush still runs (the device then
// works on both; a flush waits for pages an earlier one is writing), so a
// writer can keep more than one commit in flight. Records written while an
// older record's flush runs can then reach the disk before it: a crash may
// tear a record and keep the one after it (see ReplayCovering).
func (l *Log) Sync(end int64) error {
	l.syncMu.Lock()
	done := l.synced >= end
	l.syncMu.Unlock()
	if done {
		return nil
	}
	target := l.written.Load()
	if err := l.policy.flush(l.f); err != nil {
		return fmt.Errorf("flushing %s: %w", l.path, err)
	}
	l.syncMu.Lock()
	l.synced = max(l.synced, target)
	l.syncMu.Unlock()
	if l.pre != nil {
		// The file holds at least end durable bytes now; keep zeros
		// ahead of the next appends.
		l.pre.grew(end)
		l.pre.maybeExtend(end)
	}
	return nil
}

// ReadAt reads the log's bytes at off, as os.File.ReadAt.
func (l *Log) ReadAt(p []byte, off int64) (int, error) { return l.f.ReadAt(p, off) }

// Stat describes the log's file.
func (l *Log) Stat() (os.FileInfo, error) { return l.f.Stat() }

// Close waits for a running preallocation and closes the file.
func (l *Log) Close() error {
	if l.pre != nil {
		l.pre.wait()
	}
	return l.f.Close()
}

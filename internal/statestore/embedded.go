package statestore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/recordlog"
)

// Embedded is the Store of a single `gantry serve`: a directory holding an
// append-only log of CRC-checked records (internal/recordlog, framed as
// record.go says) and, from time to time, a snapshot of every live
// record. Memory holds, for every record, where its value lies in those
// files (valuefiles.go); Load, View and Get read the values back.
//
// Files in the directory:
//
//	LOCK               flock'ed while open: one process at a time
//	log.<gen>          the logs (16 hex digits of generation), appended to
//	snapshot           every record as of the start of log.<gen>
//	snapshot.tmp       a snapshot being written (removed at open)
//
// A group commit appends one record to the newest log and fdatasyncs it,
// with up to two such flushes in flight (overlap.go). When
// the log has grown past CompactRatio times the live data (and past
// CompactMinBytes), the committer starts log.<gen+1> and a background
// goroutine writes a snapshot of the records as of that moment (temp file,
// fsync, rename, fsync of the directory), then removes the older logs.
// Open reads the snapshot and replays the logs that follow it; a torn or
// corrupt record at the end of the newest log (a crash mid-write) is cut
// off, and so is a damaged record that the intact record after it repeats
// (a crash while two flushes were in flight); other damage followed by
// intact records is reported as an error.
type Embedded struct {
	dir  string
	opts EmbeddedOptions
	lock *os.File

	q *commitQueue

	dataMu sync.RWMutex
	data   map[string]map[string]valueRef
	live   int64 // encoded bytes of the live records, roughly

	files *valueFiles

	// Owned by the committer goroutine after open (overlap.go).
	log    *recordlog.Log // the newest, preallocated
	logGen uint64
	seq    uint64 // of the next record
	buf    []byte
	at     []int // where buf's values start

	replayGen uint64 // of the log being replayed, while opening
	pipe      *pipeline

	compacting  sync.WaitGroup
	compactBusy atomic.Bool
	compactErr  atomic.Pointer[error]

	commits     atomic.Uint64
	compactions atomic.Uint64
	logBytes    atomic.Int64 // log.Size(), for Stats
}

// EmbeddedOptions tunes an Embedded store; the zero value is the default.
type EmbeddedOptions struct {
	// CompactMinBytes is the log size below which no compaction runs
	// (default 4 MiB).
	CompactMinBytes int64
	// CompactRatio: compact when the log exceeds this many times the live
	// data (default 4).
	CompactRatio int64
}

type request struct {
	batch []Mutation
	size  int
	taken bool // by a commit; guarded by the store's mu
	err   error
	done  chan struct{}
}

var _ Store = (*Embedded)(nil)

const (
	snapshotMagic = "GNTSNAP1"
	snapshotHead  = 8 + 8 + 8 + 4 // magic, generation, next seq, CRC
	snapshotChunk = 1 << 20
)

// ErrClosed is returned by calls on a closed store.
var ErrClosed = errors.New("statestore: store is closed")

// OpenEmbedded opens (creating if needed) the Embedded store in dir, with
// the default options.
func OpenEmbedded(dir string) (*Embedded, error) {
	return OpenEmbeddedWith(dir, EmbeddedOptions{})
}

// OpenEmbeddedWith opens (creating if needed) the Embedded store in dir.
func OpenEmbeddedWith(dir string, opts EmbeddedOptions) (*Embedded, error) {
	s := &Embedded{dir: dir, opts: opts, q: newCommitQueue(), pipe: newPipeline(), files: newValueFiles()}
	if s.opts.CompactMinBytes <= 0 {
		s.opts.CompactMinBytes = 4 << 20
	}
	if s.opts.CompactRatio <= 0 {
		s.opts.CompactRatio = 4
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("statestore: creating the state directory: %w", err)
		}
		// Make the new directory's own entry durable too.
		if err := recordlog.SyncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
			return nil, fmt.Errorf("statestore: %w", err)
		}
	}
	lock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	s.lock = lock
	if err := s.open(); err != nil {
		if s.log != nil {
			s.log.Close()
		}
		s.files.closeAll()
		lock.Close()
		return nil, err
	}
	go s.run()
	return s, nil
}

func logName(gen uint64) string { return fmt.Sprintf("log.%016x", gen) }

// open reads the snapshot and the logs into memory and opens the newest
// log for appending.
func (s *Embedded) open() error {
	os.Remove(filepath.Join(s.dir, "snapshot.tmp"))
	s.data = map[string]map[string]valueRef{}
	snapGen, nextSeq, err := s.readSnapshot()
	if err != nil {
		return err
	}
	s.seq = nextSeq
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("reading the state directory: %w", err)
	}
	var gens []uint64
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "log.")
		if !ok {
			continue
		}
		gen, err := strconv.ParseUint(name, 16, 64)
		if err != nil || len(name) != 16 {
			continue
		}
		if gen < snapGen {
			// Already in the snapshot: a compaction stopped before removing it.
			os.Remove(filepath.Join(s.dir, e.Name()))
			continue
		}
		gens = append(gens, gen)
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	for _, gen := range gens[:max(len(gens)-1, 0)] {
		s.replayGen = gen
		if err := s.replayOlderLog(filepath.Join(s.dir, logName(gen))); err != nil {
			return err
		}
	}
	s.logGen = max(snapGen, 1)
	if len(gens) > 0 {
		s.logGen = gens[len(gens)-1]
	}
	s.replayGen = s.logGen
	// The newest log, created if there is none: a torn tail (a crash
	// mid-write) is cut off so that appends follow the last intact record.
	log, err := recordlog.Open(filepath.Join(s.dir, logName(s.logGen)), s.logOptions(), s.replayRecord)
	if err != nil {
		return fmt.Errorf("statestore: opening the state log: %w", err)
	}
	s.log = log
	s.logBytes.Store(log.Size())
	// Every file a value lies in, open for reading it back.
	for _, gen := range gens {
		if err := s.files.openLocked(logID(gen), filepath.Join(s.dir, logName(gen))); err != nil {
			return err
		}
	}
	if err := s.files.openLocked(logID(s.logGen), log.Path()); err != nil {
		return err
	}
	return nil
}

// logOptions are the recordlog options of the state logs: every record
// checked at replay, each commit made durable with fdatasync into zeros
// written ahead, and damage followed by intact records refused.
func (s *Embedded) logOptions() recordlog.Options {
	return recordlog.Options{Format: logFormat{}, Verify: true, Sync: recordlog.SyncData, Preallocate: true, Damaged: s.refuseMiddleDamage, Covers: s.coveredBy}
}

// replayRecord applies the log record at off, which must be next in
// sequence. A record that repeats its predecessors' mutations applies them
// again, which changes nothing (they set keys in order).
func (s *Embedded) replayRecord(off int64, rec []byte) error {
	seq, _, muts, _, err := decodeRecord(rec)
	if err != nil {
		return fmt.Errorf("%w: %v", recordlog.ErrDamaged, err)
	}
	if seq != s.seq {
		// An intact record out of sequence is not a torn write.
		return &seqError{off: off, got: seq, want: s.seq}
	}
	s.applyLocked(muts, refsIn(logID(s.replayGen), off, rec, muts))
	s.seq++
	return nil
}

// coveredBy reports whether next, the intact record after a damaged one,
// repeats the damaged record's mutations: it is the record after it in
// sequence and covers it. The damaged record is then taken as read (the
// replay applies next, which holds its mutations): a crash while both
// records' flushes were in flight can tear the older and keep the newer.
func (s *Embedded) coveredBy(damagedOff int64, next []byte) bool {
	seq, from, _, _, err := decodeRecord(next)
	if err != nil || seq != s.seq+1 || from > s.seq {
		return false
	}
	slog.Warn("state log: a damaged record was recovered from the record after it, which repeats its changes (a crash while both were being flushed)",
		"dir", s.dir, "offset", damagedOff, "sequence", s.seq)
	s.seq++
	return true
}

// seqError is an intact log record out of sequence.
type seqError struct {
	off       int64
	got, want uint64
}

func (e *seqError) Error() string {
	return fmt.Sprintf("state log damaged at offset %d (record has sequence number %d, expected %d) and intact records follow: this is disk corruption, not an interrupted write; refusing to start without them: restore the state directory from a backup or move it away", e.off, e.got, e.want)
}

// refuseMiddleDamage refuses to cut off a damaged record in the newest log
// when the record after it is intact and next in sequence: a torn write
// leaves nothing intact after itself.
func (s *Embedded) refuseMiddleDamage(path string, t recordlog.Tail) error {
	if t.Next == nil {
		return nil
	}
	if seq, _, _, _, err := decodeRecord(t.Next); err != nil || seq != s.seq+1 {
		return nil
	}
	return damagedLog(path, t)
}

func damagedLog(path string, t recordlog.Tail) error {
	return fmt.Errorf("state log %s is damaged at offset %d (%s) and intact records follow: this is disk corruption, not an interrupted write; refusing to start without them: restore the state directory from a backup or move it away", path, t.End, t.Reason)
}

// replayOlderLog applies the records of a log that a newer one follows:
// any damage in it is in the middle of the state.
func (s *Embedded) replayOlderLog(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("statestore: reading the state log: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("statestore: reading the state log: %w", err)
	}
	t, err := recordlog.ReplayCovering(f, info.Size(), logFormat{}, true, s.coveredBy, s.replayRecord)
	if err != nil {
		return fmt.Errorf("statestore: reading the state log %s: %w", path, err)
	}
	if !t.Whole(true) {
		return damagedLog(path, t)
	}
	return nil
}

// readSnapshot loads the snapshot, if any, and returns the generation of
// the first log after it and the sequence number that log starts at.
func (s *Embedded) readSnapshot() (gen, nextSeq uint64, err error) {
	path := filepath.Join(s.dir, "snapshot")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 1, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the state snapshot: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	var b []byte
	info, err := f.Stat()
	if err == nil {
		b = make([]byte, info.Size())
		_, err = io.ReadFull(f, b)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the state snapshot: %w", err)
	}
	damaged := func(why string) error {
		return fmt.Errorf("state snapshot %s is damaged (%s); it is written whole and renamed into place, so this is disk corruption, not an interrupted write: restore it from a backup or move the state directory away", path, why)
	}
	if len(b) < snapshotHead || string(b[:8]) != snapshotMagic {
		return 0, 0, damaged("bad header")
	}
	if crc32.Checksum(b[:snapshotHead-4], castagnoli) != binary.LittleEndian.Uint32(b[snapshotHead-4:]) {
		return 0, 0, damaged("header checksum mismatch")
	}
	gen = binary.LittleEndian.Uint64(b[8:])
	nextSeq = binary.LittleEndian.Uint64(b[16:])
	id := snapshotID(gen)
	s.files.files[id] = f
	keep = true
	off := int64(snapshotHead)
	b = b[snapshotHead:]
	for {
		seq, from, muts, n, err := decodeRecord(b)
		if err != nil {
			return 0, 0, damaged(err.Error())
		}
		if from != seq {
			return 0, 0, damaged("a log's covering record in the snapshot")
		}
		if seq == trailerSeq && len(muts) == 0 { // the trailer
			if len(b) != n {
				return 0, 0, damaged("data after the trailer")
			}
			return gen, nextSeq, nil
		}
		s.applyLocked(muts, refsIn(id, off, b, muts))
		b, off = b[n:], off+int64(n)
	}
}

// applyLocked applies mutations to memory, refs[i] being where the value
// of muts[i] lies; the caller holds dataMu (or is opening).
func (s *Embedded) applyLocked(muts []Mutation, refs []valueRef) {
	for i, m := range muts {
		k := s.data[m.Kind]
		if old, ok := k[m.Key]; ok {
			s.live -= int64(entrySize(m.Kind, m.Key, old.n))
		}
		if m.Delete {
			if k != nil {
				delete(k, m.Key)
			}
			continue
		}
		if k == nil {
			k = map[string]valueRef{}
			s.data[m.Kind] = k
		}
		k[m.Key] = refs[i]
		s.live += int64(entrySize(m.Kind, m.Key, refs[i].n))
	}
}

func entrySize(kind, key string, n uint32) int { return 4 + len(kind) + len(key) + int(n) }

// Apply implements Store. If ctx ends while the batch still waits for a
// commit, Apply returns ctx's error and the batch is not applied; once a
// commit has taken it, Apply returns that commit's result.
func (s *Embedded) Apply(ctx context.Context, batch []Mutation) error {
	wait, err := s.q.enqueue(ctx, batch, false)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Enqueue implements Pipeliner: the batch is queued, in call order, when
// it returns; wait reports its commit. The store keeps the values.
func (s *Embedded) Enqueue(ctx context.Context, batch []Mutation) (wait func(context.Context) error, err error) {
	return s.q.enqueue(ctx, batch, true)
}

// wantCompaction reports whether the log has grown large against the live
// data and no compaction is running: the committer then starts a new log
// and writes a snapshot in the background.
func (s *Embedded) wantCompaction() bool {
	s.dataMu.RLock()
	live := s.live
	s.dataMu.RUnlock()
	size := s.log.Size()
	return size >= s.opts.CompactMinBytes && size >= s.opts.CompactRatio*live && !s.compactBusy.Load()
}

// startCompaction starts log gen+1 and writes the snapshot of the records
// as of now in the background. It runs on the committer with no record in
// flight, so memory holds every record written.
func (s *Embedded) startCompaction() error {
	gen := s.logGen + 1
	log, err := recordlog.Create(filepath.Join(s.dir, logName(gen)), s.logOptions())
	if err != nil {
		return fmt.Errorf("statestore: starting a new log: %w", err)
	}
	s.files.mu.Lock()
	err = s.files.openLocked(logID(gen), log.Path())
	s.files.mu.Unlock()
	if err != nil {
		log.Close()
		os.Remove(log.Path())
		return err
	}
	s.log.Close()
	s.log, s.logGen = log, gen
	s.logBytes.Store(0)
	// Where every record lies as of now: the snapshot copies those
	// values from the files, which stay open until it is written.
	s.dataMu.RLock()
	n := 0
	for _, m := range s.data {
		n += len(m)
	}
	recs := make([]snapRec, 0, n)
	for kind, m := range s.data {
		for k, r := range m {
			recs = append(recs, snapRec{kind: kind, key: k, ref: r})
		}
	}
	s.dataMu.RUnlock()
	seq := s.seq
	s.compactBusy.Store(true)
	s.compacting.Add(1)
	go func() {
		defer s.compacting.Done()
		defer s.compactBusy.Store(false)
		if err := s.writeSnapshot(gen, seq, recs); err != nil {
			s.compactErr.Store(&err)
			return
		}
		// The values copied now lie in the new snapshot: point them
		// there, then let the replaced files go.
		s.moveRefs(recs)
		s.files.closeIf(func(id fileID) bool {
			if id&snapshotBit != 0 {
				return id != snapshotID(gen)
			}
			return uint64(id) < gen
		})
		s.compactErr.Store(nil)
		s.compactions.Add(1)
		for g := gen - 1; g > 0; g-- {
			if err := os.Remove(filepath.Join(s.dir, logName(g))); errors.Is(err, os.ErrNotExist) {
				break
			}
		}
	}()
	return nil
}

// snapRec is a record a snapshot copies: where its value lay (ref) and
// where it lies in the new snapshot (to).
type snapRec struct {
	kind, key string
	ref, to   valueRef
}

// moveRefs points every record the snapshot copied, and that has not
// changed since, at its value in the snapshot, a slice at a time so that
// commits do not wait for all of them.
func (s *Embedded) moveRefs(recs []snapRec) {
	for i := 0; i < len(recs); i += 4096 {
		s.dataMu.Lock()
		for _, r := range recs[i:min(i+4096, len(recs))] {
			m := s.data[r.kind]
			if cur, ok := m[r.key]; ok && cur == r.ref {
				m[r.key] = r.to
			}
		}
		s.dataMu.Unlock()
	}
}

// writeSnapshot writes recs as the snapshot preceding log gen, whose
// first record has sequence number seq, replacing the old one whole, and
// sets each one's to. The records go by kind, and within a kind in the
// order their values lie in the files, so that they are read back in
// long reads.
func (s *Embedded) writeSnapshot(gen, seq uint64, recs []snapRec) error {
	slices.SortFunc(recs, func(a, b snapRec) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ref.file, b.ref.file); c != 0 {
			return c
		}
		return cmp.Compare(a.ref.off, b.ref.off)
	})
	path := filepath.Join(s.dir, "snapshot")
	snap, err := recordlog.Rewrite(path, recordlog.Options{Sync: recordlog.SyncFile}, func(w io.Writer) error {
		var written int64
		buf := make([]byte, 0, 2*snapshotChunk)
		buf = append(buf, snapshotMagic...)
		buf = binary.LittleEndian.AppendUint64(buf, gen)
		buf = binary.LittleEndian.AppendUint64(buf, seq)
		buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
		var (
			chunk []Mutation
			refs  []valueRef
			at    []int
		)
		for i := 0; i < len(recs); {
			// One record of about snapshotChunk bytes of values.
			j, size := i, 0
			refs = refs[:0]
			for j < len(recs) && (j == i || size < snapshotChunk) {
				refs = append(refs, recs[j].ref)
				size += int(recs[j].ref.n)
				j++
			}
			s.files.mu.RLock()
			vals, err := s.files.readLocked(refs)
			s.files.mu.RUnlock()
			if err != nil {
				return err
			}
			chunk = chunk[:0]
			for k := i; k < j; k++ {
				chunk = append(chunk, Mutation{Kind: recs[k].kind, Key: recs[k].key, Value: vals[k-i]})
			}

			buf, at = appendRecordAt(buf, 0, 0, chunk, at[:0])
			for k := i; k < j; k++ {
				recs[k].to = valueRef{file: snapshotID(gen), off: written + int64(at[k-i]), n: recs[k].ref.n}
			}
			if len(buf) >= snapshotChunk {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				written += int64(len(buf))
				buf = buf[:0]
			}
			i = j
		}
		buf = appendRecord(buf, ^uint64(0), nil)
		_, err := w.Write(buf)
		return err
	})
	if err != nil {
		return fmt.Errorf("statestore: writing a snapshot: %w", err)
	}
	if err := snap.Close(); err != nil {
		return fmt.Errorf("statestore: writing a snapshot: %w", err)
	}
	s.files.mu.Lock()
	err = s.files.openLocked(snapshotID(gen), path)
	s.files.mu.Unlock()
	return err
}

// Load implements Store, reading the values back from the files.
func (s *Embedded) Load(ctx context.Context, kind string, fn func(key string, value []byte) error) error {
	return s.load(ctx, kind, fn)
}

// View implements Viewer. Every value read back is a slice of its own,
// so View is Load.
func (s *Embedded) View(ctx context.Context, kind string, fn func(key string, value []byte) error) error {
	return s.load(ctx, kind, fn)
}

var _ Viewer = (*Embedded)(nil)

func (s *Embedded) load(ctx context.Context, kind string, fn func(key string, value []byte) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	type rec struct {
		key string
		ref valueRef
	}
	// Copy the references under the lock and read the values after it,
	// in the order they lie in the files, so commits wait only for the
	// copy.
	s.files.mu.RLock()
	s.dataMu.RLock()
	m := s.data[kind]
	recs := make([]rec, 0, len(m))
	for k, r := range m {
		recs = append(recs, rec{k, r})
	}
	s.dataMu.RUnlock()
	slices.SortFunc(recs, func(a, b rec) int { return strings.Compare(a.key, b.key) })
	refs := make([]valueRef, len(recs))
	for i, r := range recs {
		refs[i] = r.ref
	}
	vals, err := s.files.readLocked(refs)
	s.files.mu.RUnlock()
	if err != nil {
		return err
	}
	for i, r := range recs {
		if i%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := fn(r.key, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// Get implements Getter: the value of one record, read back from the
// files; ok is false when there is no such record.
func (s *Embedded) Get(ctx context.Context, kind, key string) (value []byte, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	s.files.mu.RLock()
	defer s.files.mu.RUnlock()
	s.dataMu.RLock()
	r, ok := s.data[kind][key]
	s.dataMu.RUnlock()
	if !ok {
		return nil, false, nil
	}
	vals, err := s.files.readLocked([]valueRef{r})
	if err != nil {
		return nil, false, err
	}
	return vals[0], true, nil
}

var _ Getter = (*Embedded)(nil)

// Commits returns the number of group commits (log records) written since
// open.
func (s *Embedded) Commits() uint64 { return s.commits.Load() }

// EmbeddedStats describes an Embedded store's files.
type EmbeddedStats struct {
	Commits     uint64
	Compactions uint64
	LogBytes    int64 // of records in the newest log (not its preallocated zeros)
	LiveBytes   int64 // encoded size of the live records, roughly
	// CompactErr is the last compaction's failure, if it failed.
	CompactErr error
}

// Stats reports counters. It is safe to call at any time.
func (s *Embedded) Stats() EmbeddedStats {
	st := EmbeddedStats{Commits: s.commits.Load(), Compactions: s.compactions.Load()}
	if e := s.compactErr.Load(); e != nil {
		st.CompactErr = *e
	}
	s.dataMu.RLock()
	st.LiveBytes = s.live
	s.dataMu.RUnlock()
	st.LogBytes = s.logBytes.Load()
	return st
}

// Close waits for the batches already passed to Apply to commit, finishes
// a running compaction and closes the files. Apply after Close returns
// ErrClosed.
func (s *Embedded) Close() error {
	if !s.q.close() {
		return nil
	}
	s.compacting.Wait()
	err := s.log.Close()
	s.files.closeAll()
	s.lock.Close()
	return err
}

var _ io.Closer = (*Embedded)(nil)

// CommitStats implements Instrumented.
func (s *Embedded) CommitStats() CommitStats { return s.q.stats() }

// ObserveCommits implements Instrumented.
func (s *Embedded) ObserveCommits(fn func(time.Duration)) { s.q.observe.Store(&fn) }

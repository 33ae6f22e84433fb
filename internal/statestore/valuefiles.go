package statestore

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"
)

// The embedded store keeps in memory only where each record's value lies
// in its files, not the value: a value is read back from the file when a
// caller asks for it (Load, View, Get) and when a snapshot is written. A
// queued action's records then cost the store a map entry each, whatever
// their size.
//
// The files a value can lie in are the snapshot and the logs. Each is
// open for reading for as long as a value lies in it: a compaction that
// replaces the snapshot and removes the logs first points every value it
// copied at the new snapshot, then closes the old files, so a value whose
// bytes sat in a replaced file is never lost (an unlinked file stays
// readable while open).

// valueRef is where a value lies: n bytes at off in file.
type valueRef struct {
	off  int64
	n    uint32
	file fileID
}

// fileID names one of the store's files: a log by its generation, a
// snapshot by the generation of the log that follows it, with
// snapshotBit set.
type fileID uint32

const snapshotBit fileID = 1 << 31

func logID(gen uint64) fileID      { return fileID(gen) &^ snapshotBit }
func snapshotID(gen uint64) fileID { return fileID(gen) | snapshotBit }

// valueFiles holds the files values lie in, open for reading. Readers
// hold mu for reading while they read values (never while calling back
// their caller); closing a file takes it for writing.
type valueFiles struct {
	mu    sync.RWMutex
	files map[fileID]*os.File
}

func newValueFiles() *valueFiles { return &valueFiles{files: map[fileID]*os.File{}} }

// open opens path for reading as id (the caller holds mu for writing, or
// is opening the store).
func (v *valueFiles) openLocked(id fileID, path string) error {
	if _, ok := v.files[id]; ok {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("statestore: opening %s to read records back: %w; check the state directory's permissions and the open-files limit (ulimit -n)", path, err)
	}
	v.files[id] = f
	return nil
}

// closeIf closes and forgets the files drop reports true for.
func (v *valueFiles) closeIf(drop func(fileID) bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, f := range v.files {
		if drop(id) {
			f.Close()
			delete(v.files, id)
		}
	}
}

func (v *valueFiles) closeAll() { v.closeIf(func(fileID) bool { return true }) }

// Reads of values next to each other in a file are merged into one read
// when what lies between them is at most readGap bytes, up to readSpan
// bytes a read; the values are then copied into arenas of arenaSize
// bytes, so that a value kept by a caller holds no neighbour's bytes.
const (
	readGap   = 4 << 10
	readSpan  = 4 << 20
	arenaSize = 1 << 20
)

// read returns the values refs point at, in their order, each a slice of
// its own (its capacity ends with it). The caller holds mu for reading.
func (v *valueFiles) readLocked(refs []valueRef) ([][]byte, error) {
	out := make([][]byte, len(refs))
	order := make([]int, 0, len(refs))
	for i, r := range refs {
		if r.n == 0 {
			out[i] = []byte{}
			continue
		}
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := refs[a], refs[b]
		if c := cmp.Compare(ra.file, rb.file); c != 0 {
			return c
		}
		return cmp.Compare(ra.off, rb.off)
	})
	need := 0 // bytes of values still to copy out
	for _, i := range order {
		need += int(refs[i].n)
	}
	var buf, arena []byte
	for len(order) > 0 {
		first := refs[order[0]]
		end := first.off + int64(first.n)
		k := 1
		for ; k < len(order); k++ {
			r := refs[order[k]]
			rEnd := r.off + int64(r.n)
			if r.file != first.file || r.off > end+readGap || rEnd-first.off > readSpan {
				break
			}
			end = max(end, rEnd)
		}
		f := v.files[first.file]
		if f == nil {
			return nil, fmt.Errorf("statestore: a record lies in a state file no longer open (file %#x): this is a bug in Gantry; restart to recover (the records are on disk) and report it", uint32(first.file))
		}
		span := int(end - first.off)
		if cap(buf) < span {
			buf = make([]byte, span)
		}
		buf = buf[:span]
		if _, err := f.ReadAt(buf, first.off); err != nil {
			return nil, fmt.Errorf("statestore: reading records back from %s at offset %d: %w; the state directory was changed or damaged while open: restart to recover", f.Name(), first.off, err)
		}
		for _, i := range order[:k] {
			r := refs[i]
			n := int(r.n)
			if len(arena)+n > cap(arena) {
				arena = make([]byte, 0, max(min(arenaSize, need), n))
			}
			need -= n
			at := len(arena)
			arena = append(arena, buf[r.off-first.off:r.off-first.off+int64(n)]...)
			out[i] = arena[at : at+n : at+n]
		}
		order = order[k:]
	}
	return out, nil
}

// refsIn returns where the values of muts, decoded from rec (which lies
// at off in file), lie in file: decodeRecord's values alias rec.
func refsIn(file fileID, off int64, rec []byte, muts []Mutation) []valueRef {
	refs := make([]valueRef, len(muts))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(rec)))
	for i, m := range muts {
		if m.Delete || len(m.Value) == 0 {
			continue
		}
		at := uintptr(unsafe.Pointer(unsafe.SliceData(m.Value))) - base
		refs[i] = valueRef{file: file, off: off + int64(at), n: uint32(len(m.Value))}
	}
	return refs
}

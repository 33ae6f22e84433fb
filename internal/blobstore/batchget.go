package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gantry-build/gantry/internal/digest"
)

// BatchGetter is a Store that reads many blobs at once more cheaply than
// one at a time.
type BatchGetter interface {
	// GetBatch sets data[i] to the bytes of blob ds[i], or errs[i] to why
	// it cannot (ErrNotFound if the store does not hold it), for every i.
	// The data may be shared with the store and other readers: callers
	// must not change it.
	GetBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error)
}

// GetBatch reads many blobs, through the store's BatchGetter if it has
// one, else with Get, getReaders blobs at a time (from a bucket each is a
// round trip, which one after another would add up). The data returned
// must not be changed.
func GetBatch(ctx context.Context, s Store, ds []digest.Digest) ([][]byte, []error) {
	data, errs := make([][]byte, len(ds)), make([]error, len(ds))
	if bg, ok := s.(BatchGetter); ok {
		bg.GetBatch(ctx, ds, data, errs)
		return data, errs
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(getReaders, len(ds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(ds); i = int(next.Add(1) - 1) {
				data[i], errs[i] = Get(ctx, s, ds[i])
			}
		}()
	}
	wg.Wait()
	return data, errs
}

// getReaders bounds the blobs GetBatch reads at once from a store
// without a BatchGetter.
const getReaders = 16

// Limits of the reads Disk.GetBatch merges: records at most maxReadGap
// apart in a segment are read with one pread (the gap's bytes read and
// dropped), of at most maxMergedRead bytes.
const (
	maxReadGap    = 16 << 10
	maxMergedRead = 8 << 20
)

// packedWant is a packed blob Disk.GetBatch reads: the caller's index
// and where its record is.
type packedWant struct {
	i   int
	e   *entry
	g   *segment
	off int64
}

// GetBatch implements BatchGetter. Every blob is looked up under one
// lock, all at once (blobIndex.getAll); packed blobs are read in segment order, neighbouring records with
// one read into one buffer that the blobs' data point into (no copy per
// blob), each record checked as Open checks it. Blobs with their own file
// are read one by one.
func (s *Disk) GetBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	var packed []packedWant
	var single []int
	found := make([]*entry, len(ds))
	s.mu.Lock()
	s.idx.getAll(ds, found)
	for i, d := range ds {
		e := found[i]
		switch {
		case d.IsEmpty():
			data[i] = []byte{}
		case e == nil:
			errs[i] = ErrNotFound
		case e.seg == nil:
			single = append(single, i)
		default:
			s.idx.use(e)
			e.seg.refs.Add(1)
			packed = append(packed, packedWant{i: i, e: e, g: e.seg, off: e.off})
		}
	}
	s.datedLocked()
	s.mu.Unlock()
	slices.SortFunc(packed, func(a, b packedWant) int {
		if a.g.id != b.g.id {
			return compareUint(a.g.id, b.g.id)
		}
		return compareUint(uint64(a.off), uint64(b.off))
	})
	for len(packed) > 0 {
		n := 1
		end := packed[0].off + packed[0].e.recordLen()
		for n < len(packed) && packed[n].g == packed[0].g && packed[n].off <= end+maxReadGap &&
			packed[n].off+packed[n].e.recordLen()-packed[0].off <= maxMergedRead {
			end = max(end, packed[n].off+packed[n].e.recordLen())
			n++
		}
		s.readRecords(packed[:n], end, ds, data, errs)
		packed = packed[n:]
	}
	for _, i := range single {
		data[i], errs[i] = Get(ctx, s, ds[i])
	}
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readRecords reads the records of run (blobs ds[w.i]), all in one segment and in
// offset order, ending at end, with one read, and drops the run's
// segment references.
func (s *Disk) readRecords(run []packedWant, end int64, ds []digest.Digest, data [][]byte, errs []error) {
	g, start := run[0].g, run[0].off
	buf := make([]byte, end-start)
	got, err := g.log.ReadAt(buf, start)
	for range run {
		g.unref()
	}
	for _, w := range run {
		d := ds[w.i]
		lo, hi := w.off-start, w.off-start+recordLen(d)
		if hi > int64(got) {
			if err != nil && !errors.Is(err, io.EOF) {
				errs[w.i] = fmt.Errorf("reading blob %s: %w", d, err)
				continue
			}
			// Cut short: the record is damaged, as in readPacked.
			s.dropDamaged(w.e, g)
			errs[w.i] = ErrNotFound
			continue
		}
		rec := buf[lo:hi:hi]
		if !checkRecord(rec, d) {
			s.dropDamaged(w.e, g)
			errs[w.i] = ErrNotFound
			continue
		}
		data[w.i] = rec[recordHeaderLen(d):]
	}
}

// GetBatch implements BatchGetter: every blob is looked up under one lock,
// and one held in a single chunk smaller than memChunkSize (which no
// upload reuses) is returned as it is held, without a copy.
func (m *Memory) GetBatch(_ context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, d := range ds {
		e, ok := m.index[d]
		switch {
		case d.IsEmpty():
			data[i] = []byte{}
		case !ok:
			errs[i] = ErrNotFound
		default:
			m.lru.MoveToFront(e)
			chunks := e.Value.(*memEntry).chunks
			// A full-size chunk may be refilled with another blob once
			// this one is evicted (Memory.spareLocked): it is copied.
			if len(chunks) == 1 && cap(chunks[0]) < memChunkSize {
				data[i] = chunks[0][:len(chunks[0]):len(chunks[0])]
				continue
			}
			b := make([]byte, 0, chunks.size())
			for _, c := range chunks {
				b = append(b, c...)
			}
			data[i] = b
		}
	}
}

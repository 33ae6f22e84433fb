package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"

	"github.com/gantry-build/gantry/internal/digest"
)

// BatchPutter is a Store that stores many blobs at once more cheaply than
// one at a time.
type BatchPutter interface {
	// PutBatch stores data[i] as blob ds[i] for every i, verifying each,
	// and sets errs[i] to the outcome of each (a *MismatchError if the data
	// does not match). A digest may appear more than once; each copy is
	// verified, and the store keeps one.
	PutBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error)
}

// PutBatch stores many blobs, through the store's BatchPutter if it has
// one, else one Put each. It returns one error (or nil) per blob.
func PutBatch(ctx context.Context, s Store, ds []digest.Digest, data [][]byte) []error {
	errs := make([]error, len(ds))
	if bp, ok := s.(BatchPutter); ok {
		bp.PutBatch(ctx, ds, data, errs)
		return errs
	}
	for i, d := range ds {
		errs[i] = Put(ctx, s, d, data[i])
	}
	return errs
}

// verifyAll checks the blobs up to maxSize bytes against their digests,
// spreading the hashing over the cores for large batches, and sets errs[i]
// for those that do not match. Larger ones are left to Put.
func verifyAll(ds []digest.Digest, data [][]byte, errs []error, maxSize int64) {
	const perWorker = 64
	workers := min(runtime.GOMAXPROCS(0), (len(ds)+perWorker-1)/perWorker)
	if workers <= 1 {
		for i := range ds {
			if ds[i].Size <= maxSize {
				errs[i] = verifyBlob(ds[i], data[i])
			}
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ds); i += workers {
				if ds[i].Size <= maxSize {
					errs[i] = verifyBlob(ds[i], data[i])
				}
			}
		}()
	}
	wg.Wait()
}

// verifyBlob checks data against d.
func verifyBlob(d digest.Digest, data []byte) error {
	if int64(len(data)) != d.Size {
		return &MismatchError{Want: d, Got: digest.Digest{Function: d.Function, Size: int64(len(data))}}
	}
	if hashedBytes != nil {
		hashedBytes.Add(int64(len(data)))
	}
	var sum [64]byte
	var s []byte
	if d.Function == digest.SHA256 {
		// No hasher to allocate for the common case.
		a := sha256.Sum256(data)
		s = a[:]
	} else {
		h := digest.NewHasher(d.Function)
		h.Write(data)
		s = h.Sum(sum[:0])
	}
	var hx [128]byte
	n := hex.Encode(hx[:], s)
	if string(hx[:n]) != d.Hash {
		return &MismatchError{Want: d, Got: digest.Digest{Function: d.Function, Hash: string(hx[:n]), Size: d.Size}}
	}
	return nil
}

// maxBatchAppend bounds the bytes of records appended to a segment in one
// write.
const maxBatchAppend = 4 << 20

// PutBatch implements BatchPutter: every blob is verified (hashed on all
// cores), then stored as PutVerified does.
func (s *Disk) PutBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	VerifyThenPut(ctx, s, ds, data, errs)
}

// PutVerified implements TrustedBatchPutter. Blobs that go to the pack
// store are claimed under one lock, appended to the current segment in as
// few writes as possible and indexed under one lock again. The others, and
// any a concurrent writer holds, are written one by one.
func (s *Disk) PutVerified(ctx context.Context, blobs []VerifiedBlob, errs []error) {
	// Claim the packable blobs; the rest go one by one.
	var packed, single []int
	var room evictions // evicted to make room for the blobs below
	s.mu.Lock()
	for i, b := range blobs {
		d := b.Digest()
		switch {
		case d.IsEmpty():
		case d.Size > s.packMax:
			single = append(single, i)
		default:
			if e, ok := s.idx.get(d); ok {
				s.idx.use(e)
				continue
			}
			if _, busy := s.idx.busyUntil(d); !busy {
				ev, err := s.roomForLocked(d)
				room.files = append(room.files, ev.files...)
				room.segs = append(room.segs, ev.segs...)
				if err != nil {
					errs[i] = err
					continue
				}
			}
			if _, busy := s.idx.busyUntil(d); busy {
				// Another writer, or a copy earlier in this batch: the
				// single write waits for it and then finds the blob stored.
				single = append(single, i)
				continue
			}
			s.idx.markBusy(d)
			packed = append(packed, i)
		}
	}
	s.datedLocked()
	s.mu.Unlock()
	s.remove(room)
	for len(packed) > 0 {
		// One group of records per write.
		n, size := 0, int64(0)
		for n < len(packed) && (n == 0 || size+recordLen(blobs[packed[n]].Digest()) <= min(maxBatchAppend, s.packs.size)) {
			size += recordLen(blobs[packed[n]].Digest())
			n++
		}
		retry := s.appendBatch(blobs, errs, packed[:n], size)
		single = append(single, retry...)
		packed = packed[n:]
	}
	for _, i := range single {
		errs[i] = PutVerified(ctx, s, blobs[i])
	}
}

// appendBatch writes the records of the claimed blobs idx (size bytes in
// all) in one append and indexes them. It returns those whose segment was
// evicted before they could be indexed: they are released, to be stored
// again one by one.
func (s *Disk) appendBatch(blobs []VerifiedBlob, errs []error, idx []int, size int64) []int {
	buf := make([]byte, size)
	offs := make([]int64, len(idx))
	var off int64
	for k, i := range idx {
		d := blobs[i].Digest()
		hl := recordHeaderLen(d)
		rec := buf[off : off+recordLen(d)]
		copy(rec[hl:], blobs[i].Data())
		putHeader(rec[:hl], d, rec[hl:])
		offs[k] = off
		off += int64(len(rec))
	}
	g, base, err := s.packs.append(buf)
	if err == nil && s.fsync {
		err = g.log.Sync(base + size)
	}
	if err != nil {
		if g != nil {
			g.unref()
		}
		s.mu.Lock()
		var ev evictions
		for _, i := range idx {
			errs[i] = fmt.Errorf("writing blob %s: %w", blobs[i].Digest(), err)
			more := s.releaseLocked(blobs[i].Digest(), nil)
			ev.files = append(ev.files, more.files...)
			ev.segs = append(ev.segs, more.segs...)
		}
		s.mu.Unlock()
		s.remove(ev)
		return nil
	}
	var retry []int
	var ev evictions
	s.mu.Lock()
	for k, i := range idx {
		var more evictions
		d := blobs[i].Digest()
		if g.dead {
			// Evicted already (only when the store is tiny for its load).
			more = s.releaseLocked(d, nil)
			retry = append(retry, i)
		} else {
			more = s.releaseLocked(d, newEntry(d, g, base+offs[k]))
		}
		ev.files = append(ev.files, more.files...)
		ev.segs = append(ev.segs, more.segs...)
	}
	s.mu.Unlock()
	g.unref()
	s.remove(ev)
	return retry
}

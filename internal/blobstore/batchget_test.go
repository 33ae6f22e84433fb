package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestStoreGetBatch reads, in one GetBatch, blobs stored together (in
// one PutBatch: neighbouring records of a segment), blobs stored one by
// one, a blob big enough for a file of its own, the empty blob, a blob
// asked for twice and one the store does not hold, from every store.
func TestStoreGetBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, maxBytes int64) Store) {
		ctx := context.Background()
		s := open(t, 0)
		var ds []digest.Digest
		var want [][]byte
		var batch [][]byte
		for i := range 40 {
			batch = append(batch, blob(fmt.Sprint("batch", i), 100+i*37))
		}
		var bds []digest.Digest
		for _, b := range batch {
			bds = append(bds, digest.Compute(digest.SHA256, b))
		}
		for i, err := range PutBatch(ctx, s, bds, batch) {
			if err != nil {
				t.Fatalf("PutBatch blob %d: %v", i, err)
			}
		}
		// Every other one of the batch, so that reads skip gaps.
		for i := 0; i < len(batch); i += 2 {
			ds, want = append(ds, bds[i]), append(want, batch[i])
		}
		for _, b := range [][]byte{blob("one", 3000), blob("big", 200<<10), blob("two", 5)} {
			ds, want = append(ds, mustPut(t, s, b, digest.SHA256)), append(want, b)
		}
		ds, want = append(ds, digest.Empty(digest.SHA256), bds[2]), append(want, []byte{}, batch[2])
		missing := digest.Compute(digest.SHA256, []byte("never stored"))
		ds, want = append(ds, missing), append(want, nil)

		data, errs := GetBatch(ctx, s, ds)
		for i := range ds {
			if ds[i] == missing {
				if !errors.Is(errs[i], ErrNotFound) {
					t.Errorf("blob %d (absent): error %v, want ErrNotFound", i, errs[i])
				}
				continue
			}
			if errs[i] != nil || !bytes.Equal(data[i], want[i]) || data[i] == nil {
				t.Errorf("blob %d (%d bytes): got %d bytes, error %v", i, len(want[i]), len(data[i]), errs[i])
			}
		}
	})
}

// TestDiskGetBatchDamagedRecord: a packed record damaged on disk is
// reported missing and leaves the index, as Open does, and its
// neighbours, read with it, are served.
func TestDiskGetBatchDamagedRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openDiskOpts(t, dir, DiskOptions{})
	var ds []digest.Digest
	var batch [][]byte
	for i := range 5 {
		b := blob(fmt.Sprint("rec", i), 500)
		ds, batch = append(ds, digest.Compute(digest.SHA256, b)), append(batch, b)
	}
	for _, err := range PutBatch(ctx, s, ds, batch) {
		if err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "packs", "*"))
	damaged := false
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if k := bytes.Index(b, batch[2]); k >= 0 {
			b[k+100] ^= 0xff
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			damaged = true
		}
	}
	if !damaged {
		t.Fatalf("blob 2's record is in none of the segments %v", segs)
	}
	data, errs := GetBatch(ctx, s, ds)
	for i := range ds {
		if i == 2 {
			if !errors.Is(errs[i], ErrNotFound) {
				t.Errorf("damaged blob: error %v, want ErrNotFound", errs[i])
			}
		} else if errs[i] != nil || !bytes.Equal(data[i], batch[i]) {
			t.Errorf("blob %d: %d bytes, error %v", i, len(data[i]), errs[i])
		}
	}
	if missing, _ := s.FindMissing(ctx, ds); len(missing) != 1 || missing[0] != ds[2] {
		t.Errorf("FindMissing after the read = %v, want only the damaged blob %s", missing, ds[2])
	}
}

// TestDiskGetBatchAllocatesPerReadNotPerBlob: a batch of small blobs
// stored together is read with a handful of allocations, not one or
// more per blob (issue 23: BatchReadBlobs spent its time allocating and
// reading blob by blob).
func TestDiskGetBatchAllocatesPerReadNotPerBlob(t *testing.T) {
	ctx := context.Background()
	s := openDiskOpts(t, t.TempDir(), DiskOptions{})
	var ds []digest.Digest
	var batch [][]byte
	for i := range 200 {
		b := blob(fmt.Sprint("alloc", i), 1024)
		ds, batch = append(ds, digest.Compute(digest.SHA256, b)), append(batch, b)
	}
	for _, err := range PutBatch(ctx, s, ds, batch) {
		if err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(5, func() {
		_, errs := GetBatch(ctx, s, ds)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs > 20 {
		t.Errorf("GetBatch of %d packed blobs made %.0f allocations; want at most 20", len(ds), allocs)
	}
}

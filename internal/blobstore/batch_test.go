package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

func TestPutBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, maxBytes int64) Store) {
		s := open(t, 0)
		ctx := context.Background()
		present := mustPut(t, s, blob("present", 100), digest.SHA256)
		var ds []digest.Digest
		var data [][]byte
		add := func(d digest.Digest, b []byte) { ds, data = append(ds, d), append(data, b) }
		for i := range 300 {
			fn := digest.Supported[i%len(digest.Supported)]
			b := blob(fmt.Sprint("batch", i), 1+i*7)
			add(digest.Compute(fn, b), b)
		}
		big := blob("big", 200<<10) // past the pack threshold
		add(digest.Compute(digest.SHA256, big), big)
		add(present, blob("present", 100))
		add(ds[3], data[3])                                              // twice in one batch
		add(digest.Compute(digest.SHA256, []byte("abc")), []byte("abd")) // wrong hash
		add(digest.Compute(digest.SHA256, []byte("abc")), []byte("abcd"))
		add(digest.Empty(digest.SHA256), nil)
		errs := PutBatch(ctx, s, ds, data)
		n := len(ds)
		for i, err := range errs {
			var me *MismatchError
			switch i {
			case n - 3, n - 2:
				if !errors.As(err, &me) {
					t.Errorf("blob %d: %v, want a mismatch", i, err)
				}
			default:
				if err != nil {
					t.Errorf("blob %d: %v", i, err)
				}
			}
		}
		for i := range n - 3 {
			got, err := readAt(t, s, ds[i], 0)
			if err != nil || !bytes.Equal(got, data[i]) {
				t.Fatalf("blob %d (%s): %v", i, ds[i], err)
			}
		}
		if missing, _ := s.FindMissing(ctx, ds[n-3:n-1]); len(missing) != 2 {
			t.Errorf("mismatched blobs: %d missing, want 2 (abc's digest, never stored, asked twice)", len(missing))
		}
	})
}

// TestPutBatchConcurrent races batches of overlapping blobs against each
// other and against single Puts, in a store small enough to evict.
func TestPutBatchConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, maxBytes int64) Store) {
		s := open(t, 256<<10)
		ctx := context.Background()
		var ds []digest.Digest
		var data [][]byte
		for i := range 200 {
			b := blob(fmt.Sprint("c", i), 500+i)
			ds, data = append(ds, digest.Compute(digest.SHA256, b)), append(data, b)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := range 5 {
					lo := (w*37 + round*11) % 100
					for i, err := range PutBatch(ctx, s, ds[lo:lo+100], data[lo:lo+100]) {
						if err != nil {
							t.Errorf("blob %d: %v", lo+i, err)
						}
					}
					if err := Put(ctx, s, ds[w], data[w]); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		for i, d := range ds {
			got, err := readAt(t, s, d, 0)
			if errors.Is(err, ErrNotFound) {
				continue // evicted
			}
			if err != nil || !bytes.Equal(got, data[i]) {
				t.Fatalf("blob %d: %v", i, err)
			}
		}
	})
}

package blobstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// BenchmarkIndexGet1000 looks up 1,000 stored digests, in random order,
// in an index of 200,000 (what a BatchReadBlobs call of 1,000 asks of the
// disk store's index): one by one (get) and all at once (getAll, what
// Disk.GetBatch does).
func BenchmarkIndexGet1000(b *testing.B) {
	x := newBlobIndex()
	ds := make([]digest.Digest, 200000)
	for i := range ds {
		ds[i] = digest.Compute(digest.SHA256, []byte(fmt.Sprint("index", i)))
		x.add(newEntry(ds[i], nil, 0))
	}
	r := rand.New(rand.NewPCG(1, 2))
	batches := make([][]digest.Digest, 64)
	for i := range batches {
		batches[i] = make([]digest.Digest, 1000)
		for j := range batches[i] {
			// A request's digests are decoded together: their hashes
			// are near each other in memory, not where the index's were.
			d := ds[r.IntN(len(ds))]
			d.Hash = strings.Clone(d.Hash)
			batches[i][j] = d
		}
	}
	found := make([]*entry, 1000)
	b.Run("one-by-one", func(b *testing.B) {
		for i := range b.N {
			for j, d := range batches[i%len(batches)] {
				found[j], _ = x.get(d)
			}
		}
	})
	b.Run("all-at-once", func(b *testing.B) {
		for i := range b.N {
			x.getAll(batches[i%len(batches)], found)
		}
	})
}

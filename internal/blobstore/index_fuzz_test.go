package blobstore

import (
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// FuzzIndexKey indexes digests with any hash text, function and size (a
// client names digests; the disk store's index packs the hashes it can):
// each is found as itself, gives back its digest, and nothing else.
func FuzzIndexKey(f *testing.F) {
	f.Add(int32(digest.SHA256), digest.Compute(digest.SHA256, []byte("a")).Hash, int64(1))
	f.Add(int32(digest.SHA512), digest.Compute(digest.SHA512, []byte("a")).Hash, int64(1))
	f.Add(int32(digest.SHA256), "ABCDEF", int64(0))
	f.Add(int32(300), "abc", int64(-1))
	f.Fuzz(func(t *testing.T, fn int32, hash string, size int64) {
		d := digest.Digest{Function: digest.Function(fn), Hash: hash, Size: size}
		x := newBlobIndex()
		e := newEntry(d, nil, 0)
		if e.digest() != d {
			t.Fatalf("entry of %v gives back %v", d, e.digest())
		}
		x.add(e)
		if got, ok := x.get(d); !ok || got != e || !x.holds(e) {
			t.Fatalf("%v not found once indexed", d)
		}
		other := d
		other.Size++
		if _, ok := x.get(other); ok {
			t.Fatalf("%v found as %v", other, d)
		}
		x.remove(e)
		if x.len() != 0 || x.total != 0 {
			t.Fatalf("index not empty after removing %v", d)
		}
	})
}

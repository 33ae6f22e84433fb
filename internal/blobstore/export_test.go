package blobstore

import (
	"sync/atomic"
	"testing"
)

// AddConformanceBackend adds a store kept in another package to the
// conformance tests of this one (TestStore*, TestPutBatch*). That
// package's store imports this one, so its test cannot live here: an
// external test package (blobstore_test) calls this from init. Such a
// store need not evict: maxBytes may bound only a local part of it (a
// disk tier), and it skips the tests of eviction.
func AddConformanceBackend(name string, open func(t *testing.T, maxBytes int64) Store) {
	extraBackends = append(extraBackends, backend{name: name, open: open})
}

// CountHashed counts the bytes hashed to verify blobs being stored, from
// now until the test ends. Tests using it must not run in parallel.
func CountHashed(t testing.TB) *atomic.Int64 {
	n := new(atomic.Int64)
	hashedBytes = n
	t.Cleanup(func() { hashedBytes = nil })
	return n
}

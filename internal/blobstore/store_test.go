package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// backend builds a fresh store bounded to maxBytes (0: unbounded).
type backend struct {
	name string
	open func(t *testing.T, maxBytes int64) Store
}

// extraBackends are stores of other packages, added by their external
// tests (see AddConformanceBackend). They ignore maxBytes (an object
// store's expiry is the bucket's own) and skip only the eviction tests.
var extraBackends []backend

func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T, maxBytes int64) Store { return NewMemory(maxBytes) }},
		{"disk", func(t *testing.T, maxBytes int64) Store {
			s, err := NewDisk(t.TempDir(), DiskOptions{MaxBytes: maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"disk-files", func(t *testing.T, maxBytes int64) Store {
			s, err := NewDisk(t.TempDir(), DiskOptions{MaxBytes: maxBytes, PackThreshold: -1})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"disk-direct", func(t *testing.T, maxBytes int64) Store {
			// Every blob that gets a file of its own is written with O_DIRECT.
			s, err := NewDisk(t.TempDir(), DiskOptions{MaxBytes: maxBytes, DirectIOThreshold: 1})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"disk-fsync", func(t *testing.T, maxBytes int64) Store {
			s, err := NewDisk(t.TempDir(), DiskOptions{MaxBytes: maxBytes, Fsync: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		// The cache tier over a remote: maxBytes bounds the remote, and
		// the cache gets the same bound of its own, so that the tests of
		// Stats (which reports the cache) and of eviction hold.
		{"tiered-disk", func(t *testing.T, maxBytes int64) Store {
			cache, err := NewDisk(t.TempDir(), DiskOptions{MaxBytes: maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			return NewTiered(NewMemory(maxBytes), cache, NoTierObserver{})
		}},
		{"tiered-memory", func(t *testing.T, maxBytes int64) Store {
			return NewTiered(NewMemory(maxBytes), NewMemory(maxBytes), NoTierObserver{})
		}},
	}
}

// forEachBackend runs f as a subtest against every Store implementation.
func forEachBackend(t *testing.T, f func(t *testing.T, open func(t *testing.T, maxBytes int64) Store)) {
	for _, b := range append(backends(), extraBackends...) {
		t.Run(b.name, func(t *testing.T) { f(t, b.open) })
	}
}

// forEachBoundedBackend runs f against every Store that evicts beyond a
// size bound.
func forEachBoundedBackend(t *testing.T, f func(t *testing.T, open func(t *testing.T, maxBytes int64) Store)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, b.open) })
	}
}

// blob returns n pseudo-random bytes derived from seed, so that distinct
// seeds give distinct blobs.
func blob(seed string, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(seed))
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(n)))
	out := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			out[j] = byte(v)
			v >>= 8
		}
	}
	return out
}

func mustPut(t *testing.T, s Store, data []byte, fn digest.Function) digest.Digest {
	t.Helper()
	d := digest.Compute(fn, data)
	if err := Put(context.Background(), s, d, data); err != nil {
		t.Fatalf("Put %s: %v", d, err)
	}
	return d
}

func readAt(t *testing.T, s Store, d digest.Digest, offset int64) ([]byte, error) {
	t.Helper()
	r, err := s.Open(context.Background(), d, offset)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestStorePutGet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		s := open(t, 0)
		for _, fn := range digest.Supported {
			for _, size := range []int{1, 100, 64 << 10, 1<<20 + 17} {
				t.Run(fmt.Sprintf("%s/%d", digest.Name(fn), size), func(t *testing.T) {
					data := blob(fmt.Sprint(fn, size), size)
					d := mustPut(t, s, data, fn)
					got, err := Get(ctx, s, d)
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("Get = %d bytes, %v; want the %d bytes put", len(got), err, len(data))
					}
					for _, off := range []int64{0, 1, int64(size) / 2, int64(size) - 1, int64(size)} {
						got, err := readAt(t, s, d, off)
						if err != nil || !bytes.Equal(got, data[off:]) {
							t.Errorf("Open at %d: %d bytes, %v; want %d", off, len(got), err, int64(size)-off)
						}
					}
					if has, err := Has(ctx, s, d); !has || err != nil {
						t.Errorf("Has = %v, %v", has, err)
					}
				})
			}
		}
	})
}

func TestStoreNotFound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		s := open(t, 0)
		d := digest.Compute(digest.SHA256, []byte("never stored"))
		if _, err := s.Open(context.Background(), d, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open of an absent blob: %v, want ErrNotFound", err)
		}
		if _, err := Get(context.Background(), s, d); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get of an absent blob: %v, want ErrNotFound", err)
		}
		// Same hash under another function is another blob.
		stored := mustPut(t, s, []byte("x"), digest.SHA256)
		other := digest.Digest{Function: digest.BLAKE3, Hash: stored.Hash, Size: stored.Size}
		if _, err := s.Open(context.Background(), other, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open under another function: %v, want ErrNotFound", err)
		}
	})
}

func TestStoreNegativeOffset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		s := open(t, 0)
		d := mustPut(t, s, []byte("some data"), digest.SHA256)
		r, err := s.Open(context.Background(), d, -1)
		if err == nil {
			r.Close()
			t.Fatal("Open at offset -1 succeeded")
		}
		if !strings.Contains(err.Error(), "negative") {
			t.Errorf("error %q does not say the offset is negative", err)
		}
	})
}

func TestStoreFindMissing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		s := open(t, 0)
		var present, absent []digest.Digest
		for i := range 20 {
			present = append(present, mustPut(t, s, blob(fmt.Sprint("p", i), 10+i), digest.Supported[i%len(digest.Supported)]))
			absent = append(absent, digest.Compute(digest.Supported[i%len(digest.Supported)], blob(fmt.Sprint("a", i), 10+i)))
		}
		var query []digest.Digest
		for i := range present {
			query = append(query, present[i], absent[i])
		}
		// The empty blob is always present, under every function.
		for _, fn := range digest.Supported {
			query = append(query, digest.Empty(fn))
		}
		missing, err := s.FindMissing(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(missing) != fmt.Sprint(absent) {
			t.Errorf("FindMissing = %v\nwant %v", missing, absent)
		}
		if missing, err := s.FindMissing(ctx, nil); err != nil || len(missing) != 0 {
			t.Errorf("FindMissing(nil) = %v, %v", missing, err)
		}
	})
}

func TestStoreEmptyBlob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		s := open(t, 0)
		for _, fn := range digest.Supported {
			e := digest.Empty(fn)
			if has, err := Has(ctx, s, e); !has || err != nil {
				t.Errorf("%s: empty blob not present: %v, %v", digest.Name(fn), has, err)
			}
			r, err := s.Open(ctx, e, 0)
			if err != nil {
				t.Fatalf("%s: Open(empty): %v", digest.Name(fn), err)
			}
			data, err := io.ReadAll(r)
			r.Close()
			if err != nil || len(data) != 0 {
				t.Errorf("%s: empty blob read %d bytes, %v", digest.Name(fn), len(data), err)
			}
			// Writing it is allowed and harmless.
			w, err := s.Create(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(); err != nil {
				t.Errorf("%s: Commit of the empty blob: %v", digest.Name(fn), err)
			}
			w.Close()
		}
	})
}

func TestStoreMismatch(t *testing.T) {
	data := []byte("the real contents")
	good := digest.Compute(digest.SHA256, data)
	tests := []struct {
		name  string
		d     digest.Digest
		write []byte
		// wantWriteErr: the mismatch is caught by Write (too many bytes)
		// rather than by Commit.
		wantWriteErr bool
	}{
		{"wrong hash", digest.Compute(digest.SHA256, []byte("other contents!!!")), data, false},
		{"wrong hash same size", digest.Digest{Function: digest.SHA256, Hash: strings.Repeat("0", 64), Size: good.Size}, data, false},
		{"too few bytes", good, data[:5], false},
		{"too many bytes", good, append(append([]byte{}, data...), 'x'), true},
		{"size says more", digest.Digest{Function: digest.SHA256, Hash: good.Hash, Size: good.Size + 1}, data, false},
		{"wrong function", digest.Digest{Function: digest.BLAKE3, Hash: good.Hash, Size: good.Size}, data, false},
		{"empty blob digest with data", digest.Empty(digest.SHA256), []byte("x"), true},
	}
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := context.Background()
				s := open(t, 0)
				w, err := s.Create(ctx, tt.d)
				if err != nil {
					t.Fatal(err)
				}
				_, werr := w.Write(tt.write)
				var me *MismatchError
				if tt.wantWriteErr {
					if !errors.As(werr, &me) {
						t.Fatalf("Write of too many bytes: %v, want *MismatchError", werr)
					}
				} else if werr != nil {
					t.Fatalf("Write: %v", werr)
				}
				cerr := w.Commit()
				if !errors.As(cerr, &me) {
					t.Fatalf("Commit = %v, want *MismatchError", cerr)
				}
				if !strings.Contains(cerr.Error(), "nothing was stored") {
					t.Errorf("mismatch message %q does not tell the user nothing was stored", cerr)
				}
				w.Close()
				if tt.d.IsEmpty() {
					return
				}
				if has, _ := Has(ctx, s, tt.d); has {
					t.Errorf("blob %s is present after a mismatched write", tt.d)
				}
				if _, err := s.Open(ctx, tt.d, 0); !errors.Is(err, ErrNotFound) {
					t.Errorf("Open after mismatch: %v, want ErrNotFound", err)
				}
				if st, ok := s.(interface{ Stats() (int, int64) }); ok {
					if n, b := st.Stats(); n != 0 || b != 0 {
						t.Errorf("Stats = %d blobs, %d bytes after a mismatch; want 0, 0", n, b)
					}
				}
				if d, ok := s.(*Disk); ok {
					assertNoTemp(t, d)
				}
			})
		}
	})
}

func TestStoreWriterLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		s := open(t, 0)
		data := blob("lifecycle", 1000)
		d := digest.Compute(digest.SHA256, data)

		// Close without Commit stores nothing.
		w, err := s.Create(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if w.Written() != int64(len(data)) {
			t.Errorf("Written = %d, want %d", w.Written(), len(data))
		}
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if has, _ := Has(ctx, s, d); has {
			t.Error("blob present after Close without Commit")
		}

		// Written counts across several writes; a second Commit fails.
		w, _ = s.Create(ctx, d)
		for i := 0; i < len(data); i += 300 {
			if _, err := w.Write(data[i:min(i+300, len(data))]); err != nil {
				t.Fatal(err)
			}
			if w.Written() != int64(min(i+300, len(data))) {
				t.Fatalf("Written = %d after %d bytes", w.Written(), min(i+300, len(data)))
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err == nil {
			t.Error("second Commit succeeded")
		}
		if _, err := w.Write([]byte("x")); err == nil {
			t.Error("Write after Commit succeeded")
		}
		if err := w.Close(); err != nil {
			t.Errorf("Close after Commit: %v", err)
		}
		if got, err := Get(ctx, s, d); err != nil || !bytes.Equal(got, data) {
			t.Errorf("Get after Commit+Close = %d bytes, %v", len(got), err)
		}
		if d, ok := s.(*Disk); ok {
			assertNoTemp(t, d)
		}
	})
}

func TestStoreConcurrentSameBlob(t *testing.T) {
	// Both sides of the Disk store's small-blob threshold.
	for _, size := range []int{256 << 10, smallBlob + 64<<10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testConcurrentSameBlob(t, size) })
	}
}

func testConcurrentSameBlob(t *testing.T, size int) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		s := open(t, 0)
		data := blob("concurrent", size)
		d := digest.Compute(digest.SHA256, data)
		const writers = 8
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, err := s.Create(ctx, d)
				if err != nil {
					errs[i] = err
					return
				}
				defer w.Close()
				for off := 0; off < len(data); off += 32 << 10 {
					if _, err := w.Write(data[off : off+32<<10]); err != nil {
						errs[i] = err
						return
					}
				}
				errs[i] = w.Commit()
			}()
			// Readers race with the writers; they see the blob whole or not at all.
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := Get(ctx, s, d)
				if err == nil && !bytes.Equal(got, data) {
					errs[i] = errors.New("a reader saw a partial or wrong blob")
				} else if err != nil && !errors.Is(err, ErrNotFound) {
					errs[i] = err
				}
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		}
		if got, err := Get(ctx, s, d); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get = %d bytes, %v", len(got), err)
		}
		if st, ok := s.(interface{ Stats() (int, int64) }); ok {
			if n, b := st.Stats(); n != 1 || b != int64(len(data)) {
				t.Errorf("Stats = %d blobs, %d bytes; want 1, %d", n, b, len(data))
			}
		}
		if d, ok := s.(*Disk); ok {
			assertNoTemp(t, d)
		}
	})
}

func TestStoreConcurrentDistinctBlobs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		// A bound that forces eviction while writers and readers run.
		s := open(t, 64<<10)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					data := blob(fmt.Sprint(g, "/", i), 1000+i)
					d := digest.Compute(digest.SHA256, data)
					if err := Put(ctx, s, d, data); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.FindMissing(ctx, []digest.Digest{d}); err != nil {
						t.Error(err)
					}
					if got, err := Get(ctx, s, d); err == nil && !bytes.Equal(got, data) {
						t.Errorf("blob %s read back wrong", d)
					} else if err != nil && !errors.Is(err, ErrNotFound) {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if st, ok := s.(interface{ Stats() (int, int64) }); ok {
			if _, b := st.Stats(); b > 64<<10 {
				t.Errorf("store holds %d bytes, bound is %d", b, 64<<10)
			}
		}
	})
}

func TestStoreLRUEviction(t *testing.T) {
	forEachBoundedBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		const size = 1000
		// Room for three blobs, not four.
		s := open(t, 3*size+size/2)
		a := mustPut(t, s, blob("a", size), digest.SHA256)
		b := mustPut(t, s, blob("b", size), digest.SHA256)
		c := mustPut(t, s, blob("c", size), digest.SHA256)
		e := mustPut(t, s, blob("e", size), digest.SHA256)
		// Adding e evicted a, the least recently used.
		if missing, _ := s.FindMissing(ctx, []digest.Digest{a}); len(missing) != 1 {
			t.Fatalf("a survived beyond the bound")
		}
		// Use b (FindMissing) and c (Open): they become recent, so adding two
		// more evicts e, then b... in least-recently-used order.
		if missing, _ := s.FindMissing(ctx, []digest.Digest{b}); len(missing) != 0 {
			t.Fatalf("b missing before eviction")
		}
		if _, err := readAt(t, s, c, 0); err != nil {
			t.Fatal(err)
		}
		f := mustPut(t, s, blob("f", size), digest.SHA256)
		missing, _ := s.FindMissing(ctx, []digest.Digest{b, c, e, f})
		if len(missing) != 1 || missing[0] != e {
			t.Fatalf("after adding f, missing = %v; want only e (the least recently used)", missing)
		}
		if _, err := s.Open(ctx, e, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open of evicted blob: %v, want ErrNotFound", err)
		}
		if st, ok := s.(interface{ Stats() (int, int64) }); ok {
			if n, bytes := st.Stats(); n != 3 || bytes != 3*size {
				t.Errorf("Stats = %d, %d; want 3, %d", n, bytes, 3*size)
			}
		}
		// Re-putting an evicted blob brings it back.
		mustPut(t, s, blob("e", size), digest.SHA256)
		if got, err := Get(ctx, s, e); err != nil || !bytes.Equal(got, blob("e", size)) {
			t.Errorf("re-put blob: %d bytes, %v", len(got), err)
		}
	})
}

// TestStoreReaderSurvivesEviction checks that an open reader keeps reading
// a blob that eviction removes meanwhile.
func TestStoreReaderSurvivesEviction(t *testing.T) {
	forEachBoundedBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		s := open(t, 1500)
		data := blob("reader", 1000)
		d := mustPut(t, s, data, digest.SHA256)
		r, err := s.Open(ctx, d, 10)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		mustPut(t, s, blob("evictor", 1000), digest.SHA256)
		if has, _ := Has(ctx, s, d); has {
			t.Fatal("blob not evicted; the test needs it gone")
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, data[10:]) {
			t.Errorf("reader after eviction: %d bytes, %v", len(got), err)
		}
	})
}

// TestStoreChurn stores, evicts and re-stores the same few blobs from
// several goroutines, so that writes of a blob race with its eviction.
// Readers must always see whole, correct blobs, and the accounting must
// match what is on disk.
func TestStoreChurn(t *testing.T) {
	forEachBoundedBackend(t, func(t *testing.T, open func(*testing.T, int64) Store) {
		ctx := context.Background()
		const size, bound = 20 << 10, 50 << 10
		s := open(t, bound)
		var blobs [][]byte
		var ds []digest.Digest
		for i := range 5 {
			blobs = append(blobs, blob(fmt.Sprint("churn", i), size))
			ds = append(ds, digest.Compute(digest.SHA256, blobs[i]))
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					k := (g + i) % len(blobs)
					if err := Put(ctx, s, ds[k], blobs[k]); err != nil {
						t.Error(err)
						return
					}
					j := (g + 2*i) % len(blobs)
					got, err := Get(ctx, s, ds[j])
					if err == nil && !bytes.Equal(got, blobs[j]) {
						t.Errorf("blob %d read back wrong", j)
						return
					}
					if err != nil && !errors.Is(err, ErrNotFound) {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		st := s.(interface{ Stats() (int, int64) })
		n, total := st.Stats()
		if total > bound || total != int64(n)*size {
			t.Errorf("Stats = %d blobs, %d bytes; bound %d, blob size %d", n, total, bound, size)
		}
		missing, _ := s.FindMissing(ctx, ds)
		if len(ds)-len(missing) != n {
			t.Errorf("FindMissing finds %d blobs, Stats says %d", len(ds)-len(missing), n)
		}
		if d, ok := s.(*Disk); ok {
			d.settle() // evicted files are unlinked in the background
			assertNoTemp(t, d)
			files := 0
			for _, dd := range ds {
				if d.heldOnDisk(dd) {
					files++
				}
			}
			if files != n {
				t.Errorf("%d blobs on disk (files or records), %d indexed", files, n)
			}
		}
	})
}

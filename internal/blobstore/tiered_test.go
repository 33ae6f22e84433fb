package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// tierRecorder is a TierObserver that remembers what it was told.
type tierRecorder struct {
	mu                  sync.Mutex
	hits, misses        int
	hitBytes, missBytes int64
	filled              int64
	errs                map[string]int
}

func (o *tierRecorder) CacheRead(hit bool, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if hit {
		o.hits++
		o.hitBytes += n
	} else {
		o.misses++
		o.missBytes += n
	}
}

func (o *tierRecorder) CacheFilled(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.filled += n
}

func (o *tierRecorder) CacheError(op string, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errs == nil {
		o.errs = map[string]int{}
	}
	o.errs[op]++
}

func (o *tierRecorder) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("hits %d (%d B), misses %d (%d B), filled %d B, errors %v",
		o.hits, o.hitBytes, o.misses, o.missBytes, o.filled, o.errs)
}

// countingStore counts the calls that reach a store.
type countingStore struct {
	Store
	opens, finds atomic.Int64
}

func (s *countingStore) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	s.opens.Add(1)
	return s.Store.Open(ctx, d, offset)
}

func (s *countingStore) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	s.finds.Add(1)
	return s.Store.FindMissing(ctx, ds)
}

// rangeRecorder is a remote with ranged reads that records the ranges
// asked for.
type rangeRecorder struct {
	Store
	mu     sync.Mutex
	ranges [][2]int64
}

func (s *rangeRecorder) OpenRange(ctx context.Context, d digest.Digest, offset, limit int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.ranges = append(s.ranges, [2]int64{offset, limit})
	s.mu.Unlock()
	r, err := s.Store.Open(ctx, d, offset)
	if err != nil || limit == 0 {
		return r, err
	}
	return limitReadCloser(r, limit), nil
}

// faultyStore is a Store whose writers or reads fail as configured.
type faultyStore struct {
	Store
	createErr error // Create fails
	writeErr  error // writers fail once writeAfter bytes were written
	commitErr error // writers' Commit fails (after discarding the data)
	openErr   error // Open fails
	writeAt   int64
}

func (s *faultyStore) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	if s.openErr != nil {
		return nil, s.openErr
	}
	return s.Store.Open(ctx, d, offset)
}

func (s *faultyStore) Create(ctx context.Context, d digest.Digest) (Writer, error) {
	if s.createErr != nil {
		return nil, s.createErr
	}
	w, err := s.Store.Create(ctx, d)
	if err != nil {
		return nil, err
	}
	return &faultyWriter{Writer: w, s: s}, nil
}

type faultyWriter struct {
	Writer
	s *faultyStore
}

func (w *faultyWriter) Write(p []byte) (int, error) {
	if w.s.writeErr != nil && w.Written()+int64(len(p)) > w.s.writeAt {
		return 0, w.s.writeErr
	}
	return w.Writer.Write(p)
}

func (w *faultyWriter) Commit() error {
	if w.s.commitErr != nil {
		w.Writer.Close()
		return w.s.commitErr
	}
	return w.Writer.Commit()
}

func newDiskCache(t *testing.T) *Disk {
	t.Helper()
	s, err := NewDisk(t.TempDir(), DiskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func has(t *testing.T, s Store, d digest.Digest) bool {
	t.Helper()
	ok, err := Has(context.Background(), s, d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// readChunks reads all of r in small reads, as a client streaming a blob
// does, so that a fill of the cache spans many writes.
func readChunks(t *testing.T, r io.ReadCloser) []byte {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return out.Bytes()
}

func TestTieredMissFillsCache(t *testing.T) {
	// Packed, small-file and temporary-file blobs in the disk cache.
	for _, size := range []int{1000, 200 << 10, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ctx := context.Background()
			remote := &countingStore{Store: NewMemory(0)}
			cache := newDiskCache(t)
			obs := &tierRecorder{}
			s := NewTiered(remote, cache, obs)
			data := blob("fill", size)
			d := mustPut(t, remote.Store, data, digest.SHA256)

			r, err := s.Open(ctx, d, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := readChunks(t, r); !bytes.Equal(got, data) {
				t.Fatalf("miss read %d bytes, not the blob", len(got))
			}
			if !has(t, cache, d) {
				t.Fatalf("the cache does not hold the blob after a whole read; observer: %v", obs)
			}
			if obs.misses != 1 || obs.missBytes != int64(size) || obs.filled != int64(size) || obs.hits != 0 || len(obs.errs) != 0 {
				t.Errorf("after the miss: %v; want 1 miss of %d bytes, %[2]d filled", obs, size)
			}

			opens := remote.opens.Load()
			got, err := Get(ctx, s, d)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("hit read %d bytes, %v", len(got), err)
			}
			if n := remote.opens.Load(); n != opens {
				t.Errorf("a cache hit opened the remote (%d opens, %d before)", n, opens)
			}
			if obs.hits != 1 || obs.hitBytes != int64(size) || obs.misses != 1 {
				t.Errorf("after the hit: %v; want 1 hit of %d bytes", obs, size)
			}
			assertNoTemp(t, cache)
		})
	}
}

// TestTieredHitRefreshesRemote checks that a hit extends the blob's
// lifetime in the remote (with FindMissing), by the time the reader is
// closed, so that a blob read only from caches does not expire there.
func TestTieredHitRefreshesRemote(t *testing.T) {
	ctx := context.Background()
	remote := &countingStore{Store: NewMemory(0)}
	s := NewTiered(remote, NewMemory(0), NoTierObserver{})
	d := mustPut(t, s, blob("refresh", 100), digest.SHA256)
	finds := remote.finds.Load()
	if _, err := Get(ctx, s, d); err != nil {
		t.Fatal(err)
	}
	if n := remote.finds.Load() - finds; n != 1 {
		t.Errorf("a hit asked the remote's FindMissing %d times, want once", n)
	}
	if n := remote.opens.Load(); n != 0 {
		t.Errorf("the remote was opened %d times, want 0 (every read was a hit)", n)
	}
}

func TestTieredPartialMissDoesNotFill(t *testing.T) {
	ctx := context.Background()
	const size = 3 << 20 // a temporary file in the disk cache, if one is created
	remote := &rangeRecorder{Store: NewMemory(0)}
	cache := newDiskCache(t)
	obs := &tierRecorder{}
	s := NewTiered(remote, cache, obs)
	data := blob("partial", size)
	d := mustPut(t, remote.Store, data, digest.SHA256)

	for _, rg := range [][2]int64{{10, 20}, {0, size - 1}, {size - 5, 0}, {1, size}} {
		r, err := s.OpenRange(ctx, d, rg[0], rg[1])
		if err != nil {
			t.Fatal(err)
		}
		end := int64(size)
		if rg[1] > 0 {
			end = min(end, rg[0]+rg[1])
		}
		if got := readChunks(t, r); !bytes.Equal(got, data[rg[0]:end]) {
			t.Errorf("range %v: %d bytes, want %d", rg, len(got), end-rg[0])
		}
	}
	if want := fmt.Sprint([][2]int64{{10, 20}, {0, size - 1}, {size - 5, 0}, {1, size}}); fmt.Sprint(remote.ranges) != want {
		t.Errorf("the remote was asked for ranges %v; want exactly the ranges read", remote.ranges)
	}
	if has(t, cache, d) || obs.filled != 0 {
		t.Fatalf("a partial read filled the cache; observer: %v", obs)
	}

	// A whole read the caller gives up on does not fill it either.
	r, err := s.Open(ctx, d, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, size/2)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if has(t, cache, d) || obs.filled != 0 {
		t.Fatalf("a read closed halfway filled the cache; observer: %v", obs)
	}
	assertNoTemp(t, cache)

	// A limit of at least the size at offset 0 is a whole read: it fills.
	r, err = s.OpenRange(ctx, d, 0, size+1)
	if err != nil {
		t.Fatal(err)
	}
	if got := readChunks(t, r); !bytes.Equal(got, data) {
		t.Fatalf("whole read with a limit past the end: %d bytes", len(got))
	}
	if !has(t, cache, d) || obs.filled != size {
		t.Errorf("a whole read with limit > size did not fill the cache; observer: %v", obs)
	}
	if obs.misses != 6 || obs.missBytes != 20+(size-1)+5+(size-1)+size/2+size {
		t.Errorf("observer: %v; want 6 misses and the bytes read", obs)
	}
}

func TestTieredRemoteCommitFailure(t *testing.T) {
	ctx := context.Background()
	errBucket := errors.New("bucket unreachable")
	remote := &faultyStore{Store: NewMemory(0), commitErr: errBucket}
	cache := newDiskCache(t)
	s := NewTiered(remote, cache, NoTierObserver{})
	for _, size := range []int{100, 3 << 20} {
		data := blob("remote fails", size)
		d := digest.Compute(digest.SHA256, data)
		if err := Put(ctx, s, d, data); !errors.Is(err, errBucket) {
			t.Errorf("Put with the remote's Commit failing: %v, want the remote's error", err)
		}
		if has(t, cache, d) || has(t, remote.Store, d) {
			t.Errorf("%d bytes: a blob the remote did not commit is stored", size)
		}
	}
	if n, b := cache.Stats(); n != 0 || b != 0 {
		t.Errorf("cache Stats = %d, %d; want empty", n, b)
	}
	assertNoTemp(t, cache)
}

func TestTieredMismatchStoresNothing(t *testing.T) {
	ctx := context.Background()
	remote, cache := NewMemory(0), newDiskCache(t)
	s := NewTiered(remote, cache, NoTierObserver{})
	for _, size := range []int{100, 3 << 20} {
		data := blob("mismatch", size)
		d := digest.Compute(digest.SHA256, blob("other", size))
		var me *MismatchError
		if err := Put(ctx, s, d, data); !errors.As(err, &me) {
			t.Fatalf("Put of the wrong bytes: %v, want *MismatchError", err)
		}
		if has(t, remote, d) || has(t, cache, d) {
			t.Errorf("%d bytes: a mismatching blob is stored", size)
		}
	}
	assertNoTemp(t, cache)
}

// TestTieredCacheFailures checks that a cache that fails (a full disk, a
// broken file) costs only the cache: uploads and reads still succeed.
func TestTieredCacheFailures(t *testing.T) {
	errDisk := errors.New("no space left on device")
	for _, tc := range []struct {
		name    string
		cache   *faultyStore
		wantErr string // the observer's op
	}{
		{"create", &faultyStore{createErr: errDisk}, "create"},
		{"write", &faultyStore{writeErr: errDisk, writeAt: 64 << 10}, "write"},
		{"commit", &faultyStore{commitErr: errDisk}, "commit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tc.cache.Store = NewMemory(0)
			remote := NewMemory(0)
			obs := &tierRecorder{}
			s := NewTiered(remote, tc.cache, obs)
			data := blob("cache fails", 1<<20)
			d := mustPut(t, s, data, digest.SHA256)
			if !has(t, remote, d) {
				t.Fatal("the upload did not reach the remote")
			}
			if obs.errs[tc.wantErr] != 1 {
				t.Errorf("upload: observer %v; want one %s error", obs, tc.wantErr)
			}
			// Twice: the failed fill leaves nothing, so both read the remote.
			for range 2 {
				r, err := s.Open(ctx, d, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := readChunks(t, r); !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes, not the blob", len(got))
				}
			}
			if obs.errs[tc.wantErr] != 3 || obs.misses != 2 || obs.hits != 0 || obs.filled != 0 {
				t.Errorf("reads: observer %v; want two misses, a %s error each", obs, tc.wantErr)
			}
		})
	}

	t.Run("open", func(t *testing.T) {
		ctx := context.Background()
		remote := NewMemory(0)
		cache := &faultyStore{Store: NewMemory(0)}
		obs := &tierRecorder{}
		s := NewTiered(remote, cache, obs)
		data := blob("open fails", 1000)
		d := mustPut(t, s, data, digest.SHA256)
		cache.openErr = errors.New("input/output error")
		got, err := Get(ctx, s, d)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get with the cache's Open failing: %d bytes, %v", len(got), err)
		}
		if obs.errs["open"] != 1 || obs.misses != 1 {
			t.Errorf("observer %v; want one open error and a miss", obs)
		}
	})
}

// TestTieredRemoteLostBlob: the remote lost a blob (its lifecycle rule
// expired it, or someone deleted it) that this frontend's cache still
// holds. Reads are served from the cache, and that is right: the bytes
// are content-addressed and were verified on their way in, so they are
// never wrong. FindMissing, though, reports the blob missing, because the
// other frontends cannot read it: the client uploads it again.
func TestTieredRemoteLostBlob(t *testing.T) {
	ctx := context.Background()
	remote, cache := NewMemory(0), newDiskCache(t)
	s := NewTiered(remote, cache, NoTierObserver{})
	data := blob("lost", 5000)
	d := mustPut(t, cache, data, digest.SHA256) // in the cache only
	if missing, err := s.FindMissing(ctx, []digest.Digest{d}); err != nil || len(missing) != 1 {
		t.Errorf("FindMissing = %v, %v; want the blob missing", missing, err)
	}
	if got, err := Get(ctx, s, d); err != nil || !bytes.Equal(got, data) {
		t.Errorf("Get = %d bytes, %v; want the cached bytes", len(got), err)
	}
	// The client's upload brings it back to the remote.
	mustPut(t, s, data, digest.SHA256)
	if !has(t, s, d) || !has(t, remote, d) {
		t.Error("the blob is still missing after the upload")
	}
}

// TestTieredStatsAreTheCache checks that Stats reports the cache, the
// part of the store on this frontend's disk.
func TestTieredStatsAreTheCache(t *testing.T) {
	remote, cache := NewMemory(0), newDiskCache(t)
	s := NewTiered(remote, cache, NoTierObserver{})
	mustPut(t, remote, blob("remote only", 100), digest.SHA256)
	mustPut(t, s, blob("both", 300), digest.SHA256)
	if n, b := s.Stats(); n != 1 || b != 300 {
		t.Errorf("Stats = %d, %d; want the cache's 1, 300", n, b)
	}
}

// BenchmarkTieredRead reads a 64 MiB blob in 1 MiB reads from the disk
// store directly, through the cache tier when the disk cache holds it
// (hit: what the tier adds to a disk read), and through the tier when it
// does not (miss: read from a memory remote while filling the disk cache).
func BenchmarkTieredRead(b *testing.B) {
	const size = 64 << 20
	data := blob("bench read", size)
	d := digest.Compute(digest.SHA256, data)
	ctx := context.Background()
	buf := make([]byte, 1<<20)
	read := func(b *testing.B, s Store) {
		r, err := s.Open(ctx, d, 0)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			k, err := r.Read(buf)
			n += k
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		r.Close()
		if n != size {
			b.Fatalf("read %d bytes", n)
		}
	}
	newDisk := func(b *testing.B) *Disk {
		s, err := NewDisk(b.TempDir(), DiskOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	b.Run("disk", func(b *testing.B) {
		s := newDisk(b)
		if err := Put(ctx, s, d, data); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			read(b, s)
		}
	})
	b.Run("tier-hit", func(b *testing.B) {
		s := NewTiered(NewMemory(0), newDisk(b), NoTierObserver{})
		if err := Put(ctx, s, d, data); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			read(b, s)
		}
	})
	b.Run("tier-miss-fill", func(b *testing.B) {
		remote := NewMemory(0)
		if err := Put(ctx, remote, d, data); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			s := NewTiered(remote, newDisk(b), NoTierObserver{})
			b.StartTimer()
			read(b, s)
		}
	})
}

// BenchmarkTieredWrite streams a new 64 MiB blob (1 MiB writes) into the
// disk store directly, into a remote that only hashes what it receives
// (the CPU an object store's writer costs its caller, the network aside),
// and through the cache tier over that remote with a disk cache: the
// tier's cost should be near the slower of the two, not their sum.
func BenchmarkTieredWrite(b *testing.B) {
	const size = 64 << 20
	data := blob("bench write", size)
	ctx := context.Background()
	newDisk := func(b *testing.B) Store {
		s, err := NewDisk(b.TempDir(), DiskOptions{MaxBytes: 512 << 20})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name  string
		store func(b *testing.B) Store
	}{
		{"disk", newDisk},
		{"remote", func(*testing.B) Store { return hashSink{} }},
		{"tier", func(b *testing.B) Store { return NewTiered(hashSink{}, newDisk(b), NoTierObserver{}) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := c.store(b)
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				copy(data, fmt.Sprint(i, "/", b.N))
				d := digest.Compute(digest.SHA256, data)
				b.StartTimer()
				w, err := s.Create(ctx, d)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < size; off += 1 << 20 {
					if _, err := w.Write(data[off : off+1<<20]); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Commit(); err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
	}
}

// hashSink is a remote for benchmarks that verifies what is written and
// keeps nothing.
type hashSink struct{}

func (hashSink) FindMissing(_ context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	return ds, nil
}

func (hashSink) Open(context.Context, digest.Digest, int64) (io.ReadCloser, error) {
	return nil, ErrNotFound
}

func (hashSink) Create(_ context.Context, d digest.Digest) (Writer, error) {
	return &sinkWriter{v: newVerifier(d)}, nil
}

type sinkWriter struct{ v verifier }

func (w *sinkWriter) Write(p []byte) (int, error) {
	if err := w.v.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (w *sinkWriter) Written() int64 { return w.v.n }
func (w *sinkWriter) Commit() error  { return w.v.check() }
func (w *sinkWriter) Close() error   { return nil }

// batchCounter is a remote with a batch path that counts its batches and
// refuses the blobs listed in refuse.
type batchCounter struct {
	Store
	batches atomic.Int64
	refuse  map[digest.Digest]bool
}

func (s *batchCounter) PutBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	s.batches.Add(1)
	for i, d := range ds {
		if s.refuse[d] {
			errs[i] = errors.New("bucket refused the blob")
			continue
		}
		errs[i] = Put(ctx, s.Store, d, data[i])
	}
}

// TestTieredPutBatch checks that a batch upload uses the remote's batch
// path, and that only the blobs the remote stored reach the cache.
func TestTieredPutBatch(t *testing.T) {
	ctx := context.Background()
	var ds []digest.Digest
	var data [][]byte
	for i := range 10 {
		data = append(data, blob(fmt.Sprint("batch", i), 100+i))
		ds = append(ds, digest.Compute(digest.SHA256, data[i]))
	}
	refused := ds[3]
	remote := &batchCounter{Store: NewMemory(0), refuse: map[digest.Digest]bool{refused: true}}
	cache := newDiskCache(t)
	s := NewTiered(remote, cache, NoTierObserver{})
	errs := PutBatch(ctx, s, ds, data)
	if remote.batches.Load() != 1 {
		t.Errorf("the remote's PutBatch ran %d times, want once", remote.batches.Load())
	}
	for i, d := range ds {
		if i == 3 {
			if errs[i] == nil || has(t, cache, d) {
				t.Errorf("refused blob: error %v, in the cache: %v; want the remote's error and not cached", errs[i], has(t, cache, d))
			}
			continue
		}
		if errs[i] != nil || !has(t, cache, d) || !has(t, remote, d) {
			t.Errorf("blob %d: %v; cached %v, in the remote %v", i, errs[i], has(t, cache, d), has(t, remote, d))
		}
	}
}

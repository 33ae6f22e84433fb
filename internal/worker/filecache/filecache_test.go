package filecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// countingStore wraps a Store, counting Open calls and optionally holding
// them until gate is closed or serving substitute data.
type countingStore struct {
	blobstore.Store
	opens   atomic.Int64
	gate    chan struct{}            // if non-nil, Open waits for it to close
	corrupt map[digest.Digest][]byte // if set, served instead of the real blob
}

func (s *countingStore) Open(ctx context.Context, d digest.Digest, off int64) (io.ReadCloser, error) {
	s.opens.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if data, ok := s.corrupt[d]; ok {
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	return s.Store.Open(ctx, d, off)
}

func put(t *testing.T, s blobstore.Store, content string) digest.Digest {
	t.Helper()
	d := digest.Compute(digest.SHA256, []byte(content))
	if err := blobstore.Put(context.Background(), s, d, []byte(content)); err != nil {
		t.Fatal(err)
	}
	return d
}

func newCache(t *testing.T, dir string, max int64, s blobstore.Store) *Cache {
	t.Helper()
	c, err := New(dir, max, s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond until it holds, failing the test after a generous
// bound (a guard against hangs, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAcquireContentAndMode(t *testing.T) {
	mem := blobstore.NewMemory(0)
	c := newCache(t, t.TempDir(), 0, mem)
	d := put(t, mem, "hello")
	tests := []struct {
		name string
		d    digest.Digest
		exec bool
		want string
		mode fs.FileMode
	}{
		{"regular", d, false, "hello", 0o444},
		{"executable", d, true, "hello", 0o555},
		{"empty regular", digest.Empty(digest.SHA256), false, "", 0o444},
		{"empty executable", digest.Empty(digest.SHA256), true, "", 0o555},
		{"empty blake3", digest.Empty(digest.BLAKE3), false, "", 0o444},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, release, err := c.Acquire(context.Background(), tt.d, tt.exec)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("content = %q, want %q", got, tt.want)
			}
			info, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != tt.mode {
				t.Errorf("mode = %v, want %v", info.Mode().Perm(), tt.mode)
			}
		})
	}
	// Executable and non-executable variants are distinct files.
	p1, r1, _ := c.Acquire(context.Background(), d, false)
	p2, r2, _ := c.Acquire(context.Background(), d, true)
	defer r1()
	defer r2()
	if p1 == p2 {
		t.Errorf("executable and regular variants share the path %s", p1)
	}
}

func TestEmptyBlobNeedsNoDownload(t *testing.T) {
	cs := &countingStore{Store: blobstore.NewMemory(0)}
	c := newCache(t, t.TempDir(), 0, cs)
	_, release, err := c.Acquire(context.Background(), digest.Empty(digest.SHA256), false)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if n := cs.opens.Load(); n != 0 {
		t.Errorf("CAS opened %d times for the empty blob, want 0", n)
	}
}

func TestSingleFlight(t *testing.T) {
	const n = 8
	cs := &countingStore{Store: blobstore.NewMemory(0), gate: make(chan struct{})}
	d := put(t, cs.Store, "shared content")
	c := newCache(t, t.TempDir(), 0, cs)

	type res struct {
		path    string
		release func()
		err     error
	}
	results := make(chan res, n)
	for range n {
		go func() {
			p, r, err := c.Acquire(context.Background(), d, false)
			results <- res{p, r, err}
		}()
	}
	// All n callers must be waiting on one download before it may finish.
	waitFor(t, "all callers to wait", func() bool { s := c.Stats(); return s.Waiting == n && s.Downloading == 1 })
	close(cs.gate)
	var paths []string
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		paths = append(paths, r.path)
		defer r.release()
	}
	if got := cs.opens.Load(); got != 1 {
		t.Errorf("CAS opened %d times, want 1", got)
	}
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Errorf("callers got different paths %s and %s", p, paths[0])
		}
	}
	s := c.Stats()
	if s.Misses != 1 || s.Hits != n-1 || s.Downloads != 1 || s.Referenced != 1 {
		t.Errorf("stats = %+v, want 1 miss, %d hits, 1 download, 1 referenced entry", s, n-1)
	}
}

func TestWaiterCancelKeepsSharedDownload(t *testing.T) {
	cs := &countingStore{Store: blobstore.NewMemory(0), gate: make(chan struct{})}
	d := put(t, cs.Store, "abc")
	c := newCache(t, t.TempDir(), 0, cs)

	ctx1, cancel1 := context.WithCancel(context.Background())
	err1 := make(chan error, 1)
	go func() { _, _, err := c.Acquire(ctx1, d, false); err1 <- err }()
	waitFor(t, "first caller", func() bool { return c.Stats().Waiting == 1 })
	ok2 := make(chan error, 1)
	go func() {
		_, r, err := c.Acquire(context.Background(), d, false)
		if err == nil {
			r()
		}
		ok2 <- err
	}()
	waitFor(t, "second caller", func() bool { return c.Stats().Waiting == 2 })
	// The caller that started the download gives up; the other still
	// gets the file.
	cancel1()
	if err := <-err1; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller got %v, want context.Canceled", err)
	}
	close(cs.gate)
	if err := <-ok2; err != nil {
		t.Errorf("remaining caller got %v", err)
	}
	if got := cs.opens.Load(); got != 1 {
		t.Errorf("CAS opened %d times, want 1", got)
	}
}

func TestAllWaitersCancelAbandonsDownload(t *testing.T) {
	cs := &countingStore{Store: blobstore.NewMemory(0), gate: make(chan struct{})}
	d := put(t, cs.Store, "abc")
	c := newCache(t, t.TempDir(), 0, cs)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, _, err := c.Acquire(ctx, d, false); errc <- err }()
	waitFor(t, "caller", func() bool { return c.Stats().Waiting == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// A new caller starts a fresh download rather than joining the
	// abandoned one.
	close(cs.gate)
	p, release, err := c.Acquire(context.Background(), d, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if got, _ := os.ReadFile(p); string(got) != "abc" {
		t.Errorf("content = %q", got)
	}
}

func TestMissingBlob(t *testing.T) {
	c := newCache(t, t.TempDir(), 0, blobstore.NewMemory(0))
	d := digest.Compute(digest.SHA256, []byte("never uploaded"))
	_, _, err := c.Acquire(context.Background(), d, false)
	if !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("got %v, want an error matching blobstore.ErrNotFound", err)
	}
	if s := c.Stats(); s.Entries != 0 || s.DownloadErrors != 1 {
		t.Errorf("stats = %+v, want no entries and one download error", s)
	}
}

func TestInvalidDigest(t *testing.T) {
	c := newCache(t, t.TempDir(), 0, blobstore.NewMemory(0))
	for _, d := range []digest.Digest{
		{Function: digest.SHA256, Hash: "abc", Size: 1},
		{Function: digest.SHA256, Hash: strings.Repeat("a", 64), Size: -1},
		{Function: 999, Hash: strings.Repeat("a", 64), Size: 1},
	} {
		if _, _, err := c.Acquire(context.Background(), d, false); err == nil || !strings.Contains(err.Error(), "invalid digest") {
			t.Errorf("Acquire(%v) = %v, want an invalid digest error", d, err)
		}
	}
}

func TestCorruptDownloadIsNotCached(t *testing.T) {
	mem := blobstore.NewMemory(0)
	d := put(t, mem, "good data")
	tests := []struct {
		name    string
		served  []byte
		wantErr string
	}{
		{"wrong bytes same size", []byte("evil data"), "hashing to"},
		{"too short", []byte("good"), "returned 4 bytes"},
		{"too long", []byte("good data plus"), "returned 10 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cs := &countingStore{Store: mem, corrupt: map[digest.Digest][]byte{d: tt.served}}
			c := newCache(t, dir, 0, cs)
			_, _, err := c.Acquire(context.Background(), d, false)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
				t.Errorf("corrupt download was cached: %+v", s)
			}
			if n := countFiles(t, dir); n != 0 {
				t.Errorf("%d files left in the cache directory", n)
			}
			// Once the CAS serves good data, the next Acquire downloads again.
			delete(cs.corrupt, d)
			p, release, err := c.Acquire(context.Background(), d, false)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			if got, _ := os.ReadFile(p); string(got) != "good data" {
				t.Errorf("content = %q", got)
			}
			if n := cs.opens.Load(); n != 2 {
				t.Errorf("CAS opened %d times, want 2", n)
			}
		})
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestLRUEviction(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMemory(0)
	a, b, cc, d := put(t, mem, "aaaaaaaaaa"), put(t, mem, "bbbbbbbbbb"), put(t, mem, "cccccccccc"), put(t, mem, "dddddddddd")
	c := newCache(t, t.TempDir(), 30, mem)
	paths := map[digest.Digest]string{}
	use := func(x digest.Digest) {
		p, release, err := c.Acquire(ctx, x, false)
		if err != nil {
			t.Fatal(err)
		}
		paths[x] = p
		release()
	}
	use(a)
	use(b)
	use(cc)
	use(a) // a is now more recent than b
	use(d) // over budget: b, the least recently used, goes
	for x, want := range map[digest.Digest]bool{a: true, b: false, cc: true, d: true} {
		if got := exists(paths[x]); got != want {
			t.Errorf("%s present = %v, want %v", x, got, want)
		}
	}
	if s := c.Stats(); s.Evictions != 1 || s.Bytes != 30 || s.Entries != 3 {
		t.Errorf("stats = %+v, want 1 eviction, 30 bytes, 3 entries", s)
	}
}

func TestReferencedEntriesAreNotEvicted(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMemory(0)
	a, b, cc := put(t, mem, "aaaaaaaaaa"), put(t, mem, "bbbbbbbbbb"), put(t, mem, "cccccccccc")
	c := newCache(t, t.TempDir(), 10, mem)
	pa, releaseA, err := c.Acquire(ctx, a, false)
	if err != nil {
		t.Fatal(err)
	}
	pb, releaseB, err := c.Acquire(ctx, b, false)
	if err != nil {
		t.Fatal(err)
	}
	// Both are referenced: the cache exceeds its budget rather than evict.
	if !exists(pa) || !exists(pb) {
		t.Fatal("a referenced entry was evicted")
	}
	if s := c.Stats(); s.Bytes != 20 || s.Referenced != 2 {
		t.Errorf("stats = %+v, want 20 bytes in 2 referenced entries", s)
	}
	releaseA()
	releaseA() // release is idempotent
	if exists(pa) {
		t.Error("a released entry over budget was kept")
	}
	if !exists(pb) {
		t.Error("b, still referenced, was evicted")
	}
	pc, releaseC, err := c.Acquire(ctx, cc, false)
	if err != nil {
		t.Fatal(err)
	}
	releaseC()
	if !exists(pb) {
		t.Error("b, still referenced, was evicted to make room for c")
	}
	if exists(pc) {
		t.Error("c should have been evicted on release: b holds the whole budget")
	}
	// Two references to b: dropping one must not make b evictable.
	_, releaseB2, err := c.Acquire(ctx, b, false)
	if err != nil {
		t.Fatal(err)
	}
	releaseB()
	if _, r, err := c.Acquire(ctx, cc, false); err != nil {
		t.Fatal(err)
	} else {
		r()
	}
	if !exists(pb) {
		t.Error("b, still referenced once, was evicted")
	}
	releaseB2()
	if s := c.Stats(); s.Bytes > 10 || s.Referenced != 0 {
		t.Errorf("stats = %+v, want at most 10 bytes, nothing referenced", s)
	}
}

func TestRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mem := blobstore.NewMemory(0)
	a, b := put(t, mem, "first"), put(t, mem, "second")
	c1 := newCache(t, dir, 0, mem)
	for _, x := range []struct {
		d    digest.Digest
		exec bool
	}{{a, false}, {b, true}} {
		_, release, err := c1.Acquire(ctx, x.d, x.exec)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	good := c1.pathFor(key{d: a})

	// Plant malformed files: junk names, a wrong size, a wrong mode, a
	// stray directory and a leftover download.
	bad := digest.Compute(digest.SHA256, []byte("xyz"))
	wrongSize := c1.pathFor(key{d: digest.Digest{Function: digest.SHA256, Hash: bad.Hash, Size: 99}})
	wrongMode := c1.pathFor(key{d: bad})
	junk := []string{
		filepath.Join(dir, "junk"),
		filepath.Join(dir, "sha256", "zz", "nonsense"),
		filepath.Join(dir, "sha256", bad.Hash[:2], bad.Hash+"-3-y"),
		filepath.Join(dir, "md7", "ab", "ab-1"),
		wrongSize,
		filepath.Join(dir, "tmp", "dl-123"),
		filepath.Join(dir, "sha256", "ab", "deeper", "file"),
	}
	for _, p := range junk {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("xyz"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(wrongMode, []byte("xyz"), 0o644); err != nil {
		t.Fatal(err)
	}

	cs := &countingStore{Store: mem}
	c2 := newCache(t, dir, 0, cs)
	if s := c2.Stats(); s.Entries != 2 || s.Bytes != a.Size+b.Size {
		t.Errorf("after restart stats = %+v, want the 2 good entries", s)
	}
	for _, p := range append(junk, wrongMode) {
		if exists(p) {
			t.Errorf("malformed %s survived the restart", p)
		}
	}
	p, release, err := c2.Acquire(ctx, a, false)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if p != good {
		t.Errorf("path = %s, want %s", p, good)
	}
	if _, release, err := c2.Acquire(ctx, b, true); err != nil {
		t.Fatal(err)
	} else {
		release()
	}
	if n := cs.opens.Load(); n != 0 {
		t.Errorf("CAS opened %d times after restart, want 0", n)
	}
}

func TestRestartEvictsOverBudget(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mem := blobstore.NewMemory(0)
	c1 := newCache(t, dir, 0, mem)
	for i := range 5 {
		_, release, err := c1.Acquire(ctx, put(t, mem, fmt.Sprintf("blob-%d", i)), false)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	c2 := newCache(t, dir, 14, mem)
	if s := c2.Stats(); s.Entries != 2 || s.Evictions != 3 {
		t.Errorf("stats = %+v, want 2 entries after 3 evictions", s)
	}
	if n := countFiles(t, dir); n != 2 {
		t.Errorf("%d files on disk, want 2", n)
	}
}

func TestModifiedEntryIsDropped(t *testing.T) {
	ctx := context.Background()
	cs := &countingStore{Store: blobstore.NewMemory(0)}
	d := put(t, cs.Store, "pristine")
	tests := []struct {
		name   string
		tamper func(p string) error
	}{
		{"content written", func(p string) error {
			if err := os.Chmod(p, 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte("tampered"), 0o644); err != nil {
				return err
			}
			return os.Chmod(p, 0o444)
		}},
		{"mode changed", func(p string) error { return os.Chmod(p, 0o644) }},
		{"deleted", os.Remove},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs.opens.Store(0)
			c := newCache(t, t.TempDir(), 0, cs)
			p, release, err := c.Acquire(ctx, d, false)
			if err != nil {
				t.Fatal(err)
			}
			// Make sure a rewrite gets a different mtime even on coarse clocks.
			old := time.Now().Add(-time.Hour)
			if err := tt.tamper(p); err != nil {
				t.Fatal(err)
			}
			if exists(p) {
				os.Chtimes(p, old, old)
			}
			release()
			if s := c.Stats(); s.Dropped != 1 || s.Entries != 0 {
				t.Errorf("stats = %+v, want the entry dropped", s)
			}
			p, release, err = c.Acquire(ctx, d, false)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			if got, _ := os.ReadFile(p); string(got) != "pristine" {
				t.Errorf("content = %q after re-download", got)
			}
			if n := cs.opens.Load(); n != 2 {
				t.Errorf("CAS opened %d times, want 2", n)
			}
		})
	}
}

func TestLink(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMemory(0)
	d := put(t, mem, "linked")
	c := newCache(t, t.TempDir(), 0, mem)
	out := t.TempDir()

	dst := filepath.Join(out, "a")
	release, err := c.Link(ctx, d, true, dst)
	if err != nil {
		t.Fatal(err)
	}
	src, r2, _ := c.Acquire(ctx, d, true)
	r2()
	si, _ := os.Stat(src)
	di, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(si, di) {
		t.Error("Link did not hardlink the cached file")
	}
	if di.Mode().Perm() != 0o555 {
		t.Errorf("mode = %v, want 0555", di.Mode().Perm())
	}
	if s := c.Stats(); s.Referenced != 1 {
		t.Errorf("Referenced = %d while linked, want 1", s.Referenced)
	}
	release()
	if s := c.Stats(); s.Referenced != 0 {
		t.Errorf("Referenced = %d after release, want 0", s.Referenced)
	}

	// An existing destination is an error and leaks no reference.
	if _, err := c.Link(ctx, d, true, dst); err == nil || !strings.Contains(err.Error(), dst) {
		t.Errorf("Link onto an existing file = %v, want an error naming %s", err, dst)
	}
	if s := c.Stats(); s.Referenced != 0 {
		t.Errorf("Referenced = %d after a failed Link, want 0", s.Referenced)
	}

	// A cached file deleted behind the cache's back is downloaded again.
	os.Remove(src)
	release, err = c.Link(ctx, d, true, filepath.Join(out, "b"))
	if err != nil {
		t.Fatalf("Link after the cached file vanished: %v", err)
	}
	release()
	if got, _ := os.ReadFile(filepath.Join(out, "b")); string(got) != "linked" {
		t.Errorf("content = %q", got)
	}
}

func TestLinkFallsBackToCopy(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMemory(0)
	d := put(t, mem, "copied")
	c := newCache(t, t.TempDir(), 0, mem)
	defer func(f func(string, string) error) { linkFile = f }(linkFile)
	for _, errno := range []syscall.Errno{syscall.EXDEV, syscall.EMLINK} {
		t.Run(errno.Error(), func(t *testing.T) {
			linkFile = func(o, n string) error { return &os.LinkError{Op: "link", Old: o, New: n, Err: errno} }
			dst := filepath.Join(t.TempDir(), "f")
			release, err := c.Link(ctx, d, false, dst)
			if err != nil {
				t.Fatal(err)
			}
			release()
			info, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(dst); string(got) != "copied" {
				t.Errorf("content = %q", got)
			}
			if info.Mode().Perm() != 0o444 {
				t.Errorf("mode = %v, want 0444", info.Mode().Perm())
			}
			src, r, _ := c.Acquire(ctx, d, false)
			r()
			si, _ := os.Stat(src)
			if os.SameFile(si, info) {
				t.Error("copy fallback produced a hardlink")
			}
		})
	}
	if s := c.Stats(); s.CopyFallbacks != 2 || s.Referenced != 0 {
		t.Errorf("stats = %+v, want 2 copy fallbacks and no references", s)
	}
}

func TestConcurrentMixedUse(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMemory(0)
	var ds []digest.Digest
	for i := range 20 {
		ds = append(ds, put(t, mem, strings.Repeat(fmt.Sprint(i%10), 10+i)))
	}
	c := newCache(t, t.TempDir(), 100, mem)
	out := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				d := ds[(g+i)%len(ds)]
				release, err := c.Link(ctx, d, i%2 == 0, filepath.Join(out, fmt.Sprintf("%d-%d", g, i)))
				if err != nil {
					errs <- err
					return
				}
				release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := c.Stats(); s.Bytes > 100 || s.Referenced != 0 {
		t.Errorf("stats = %+v, want at most 100 bytes and nothing referenced", s)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(t.TempDir(), 0, nil); err == nil {
		t.Error("New with a nil CAS succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := New(f, 0, blobstore.NewMemory(0)); err == nil {
		t.Error("New on a regular file succeeded")
	}
}

// TestHolds: Holds says whether Acquire would find a blob ready, with
// that executable bit, without downloading or referencing it.
func TestHolds(t *testing.T) {
	cs := &countingStore{Store: blobstore.NewMemory(0)}
	d := put(t, cs, "held")
	c := newCache(t, t.TempDir(), 0, cs)
	if c.Holds(d, false) {
		t.Fatal("an empty cache holds the blob")
	}
	_, release, err := c.Acquire(context.Background(), d, false)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if !c.Holds(d, false) {
		t.Error("after Acquire the cache does not hold the blob")
	}
	if c.Holds(d, true) {
		t.Error("the cache holds the executable variant it never made")
	}
	if n := cs.opens.Load(); n != 1 {
		t.Errorf("%d downloads; Holds must not download", n)
	}
}

package blobstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// fakeNow is a clock tests move by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeNow() *fakeNow { return &fakeNow{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)} }

func (c *fakeNow) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeNow) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// lifetimeBackends are the bounded stores that keep a lifetime promise.
func lifetimeBackends(life Lifetime) []backend {
	disk := func(opts DiskOptions) func(t *testing.T, maxBytes int64) Store {
		return func(t *testing.T, maxBytes int64) Store {
			opts.MaxBytes, opts.Lifetime = maxBytes, life
			s, err := NewDisk(t.TempDir(), opts)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	return []backend{
		{"memory", func(t *testing.T, maxBytes int64) Store { return NewMemoryLifetime(maxBytes, life) }},
		{"disk", disk(DiskOptions{})},
		{"disk-files", disk(DiskOptions{PackThreshold: -1})},
	}
}

// TestStoreLifetimeKeepsPromisedBlobs fills a store with room for four
// blobs: a blob FindMissing reported present outlives more recently used
// ones for the lifetime; when only promised blobs are left, a new one is
// refused with an error naming the setting, and once the lifetime is
// over it goes like any other.
func TestStoreLifetimeKeepsPromisedBlobs(t *testing.T) {
	clock := newFakeNow()
	const min = time.Hour
	for _, b := range lifetimeBackends(Lifetime{Min: min, Now: clock.Now}) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const size = 1000
			s := b.open(t, 4*size+size/2)
			a := mustPut(t, s, blob("a", size), digest.SHA256)
			if missing, _ := s.FindMissing(ctx, []digest.Digest{a}); len(missing) != 0 {
				t.Fatal("a missing right after its upload")
			}
			clock.advance(time.Minute)
			bb := mustPut(t, s, blob("b", size), digest.SHA256)
			c := mustPut(t, s, blob("c", size), digest.SHA256)
			d := mustPut(t, s, blob("d", size), digest.SHA256)
			// a is now the least recently used blob; b the next.
			e := mustPut(t, s, blob("e", size), digest.SHA256)
			missing, _ := s.FindMissing(ctx, []digest.Digest{a, bb, c, d, e})
			if len(missing) != 1 || missing[0] != bb {
				t.Fatalf("after adding e, missing = %v; want only b (a is promised for %s)", missing, min)
			}
			// Every blob is promised now: a fifth does not fit.
			f := blob("f", size)
			fd := digest.Compute(digest.SHA256, f)
			err := Put(ctx, s, fd, f)
			var le *LifetimeError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), "storage.cas.min_lifetime") {
				t.Fatalf("Put into a store full of promised blobs: %v; want a *LifetimeError naming storage.cas.min_lifetime", err)
			}
			if r := s.(interface{ Refused() int64 }).Refused(); r != 1 {
				t.Errorf("Refused() = %d, want 1", r)
			}
			if missing, _ := s.FindMissing(ctx, []digest.Digest{a, c, d, e, fd}); len(missing) != 1 || missing[0] != fd {
				t.Fatalf("after the refusal, missing = %v; want only f", missing)
			}
			// The promise lasts min from the last FindMissing; then the
			// least recently used blob goes again.
			clock.advance(min + time.Minute)
			mustPut(t, s, f, digest.SHA256)
			missing, _ = s.FindMissing(ctx, []digest.Digest{a, c, d, e, fd})
			if len(missing) != 1 || missing[0] != a {
				t.Fatalf("after the lifetime, missing = %v; want only a (least recently used)", missing)
			}
		})
	}
}

// TestStoreLifetimeRefusalEvictsNothing: a blob that would fit only by
// evicting promised blobs is refused without evicting the others first.
func TestStoreLifetimeRefusalEvictsNothing(t *testing.T) {
	for _, b := range lifetimeBackends(Lifetime{Min: time.Hour}) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const size = 1000
			s := b.open(t, 3*size+size/2)
			a := mustPut(t, s, blob("a", size), digest.SHA256)
			bb := mustPut(t, s, blob("b", size), digest.SHA256)
			c := mustPut(t, s, blob("c", size), digest.SHA256)
			s.FindMissing(ctx, []digest.Digest{a, c})
			big := blob("big", 2*size)
			var le *LifetimeError
			if err := Put(ctx, s, digest.Compute(digest.SHA256, big), big); !errors.As(err, &le) {
				t.Fatalf("Put of a blob that fits only by evicting promised ones: %v, want a *LifetimeError", err)
			}
			if missing, _ := s.FindMissing(ctx, []digest.Digest{a, bb, c}); len(missing) != 0 {
				t.Fatalf("missing after the refusal: %v; the refusal evicted b for nothing", missing)
			}
		})
	}
}

// TestStoreNoLifetimeEvictsPromised checks the test above can fail: with
// no lifetime, the store is plain LRU and evicts the blob FindMissing saw.
func TestStoreNoLifetimeEvictsPromised(t *testing.T) {
	for _, b := range lifetimeBackends(Lifetime{}) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const size = 1000
			s := b.open(t, 2*size+size/2)
			a := mustPut(t, s, blob("a", size), digest.SHA256)
			s.FindMissing(ctx, []digest.Digest{a})
			mustPut(t, s, blob("b", size), digest.SHA256)
			mustPut(t, s, blob("c", size), digest.SHA256)
			if missing, _ := s.FindMissing(ctx, []digest.Digest{a}); len(missing) != 1 {
				t.Fatal("a survived with no lifetime promise; want plain LRU")
			}
		})
	}
}

func TestTickClockCutoff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newTickClock(Lifetime{Min: 64 * time.Minute}) // grain: a minute
	c.mark(t0, 10)
	c.mark(t0.Add(30*time.Second), 20) // within the grain: moves the mark
	c.mark(t0.Add(2*time.Minute), 30)
	for _, tc := range []struct {
		now  time.Duration
		want uint64
	}{
		{0, 0},
		{64*time.Minute + 29*time.Second, 0},
		{64*time.Minute + 30*time.Second, 20},
		{66 * time.Minute, 30},
		{100 * time.Hour, 30},
	} {
		if got := c.cutoff(t0.Add(tc.now), 64*time.Minute); got != tc.want {
			t.Errorf("cutoff at +%s = %d, want %d", tc.now, got, tc.want)
		}
	}
}

package blobstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// rangeStore is a Store whose OpenRange slices the blob itself, as a
// backend with ranged requests does; it counts its calls so that a test
// can tell it was used.
type rangeStore struct {
	Store
	ranges atomic.Int64
}

func (s *rangeStore) OpenRange(ctx context.Context, d digest.Digest, offset, limit int64) (io.ReadCloser, error) {
	s.ranges.Add(1)
	data, err := Get(ctx, s.Store, d)
	if err != nil {
		return nil, err
	}
	offset = min(offset, int64(len(data)))
	end := int64(len(data))
	if limit > 0 {
		end = min(end, offset+limit)
	}
	return io.NopCloser(bytes.NewReader(data[offset:end])), nil
}

// closeCounter is a Store whose readers count how often they are closed.
type closeCounter struct {
	Store
	closes atomic.Int64
}

func (s *closeCounter) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	r, err := s.Store.Open(ctx, d, offset)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{r, closerFunc(func() error { s.closes.Add(1); return r.Close() })}, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func TestOpenRange(t *testing.T) {
	ctx := context.Background()
	const size = 100
	data := blob("range", size)
	d := digest.Compute(digest.SHA256, data)
	plain := &closeCounter{Store: NewMemory(0)}
	mustPut(t, plain, data, digest.SHA256)
	ranged := &rangeStore{Store: NewMemory(0)}
	mustPut(t, ranged, data, digest.SHA256)

	read := func(s Store, offset, limit int64) []byte {
		t.Helper()
		r, err := OpenRange(ctx, s, d, offset, limit)
		if err != nil {
			t.Fatalf("OpenRange(%d, %d): %v", offset, limit, err)
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("reading range (%d, %d): %v", offset, limit, err)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return got
	}
	calls := 0
	for _, offset := range []int64{0, 1, size / 2, size - 1, size} {
		for _, limit := range []int64{0, 1, 10, size - 1, size, size + 1, 10 * size} {
			t.Run(fmt.Sprintf("%d+%d", offset, limit), func(t *testing.T) {
				end := int64(size)
				if limit > 0 {
					end = min(end, offset+limit)
				}
				want := data[offset:end]
				if got := read(plain, offset, limit); !bytes.Equal(got, want) {
					t.Errorf("through Open: %d bytes, want %d", len(got), len(want))
				}
				if got := read(ranged, offset, limit); !bytes.Equal(got, want) {
					t.Errorf("through OpenRange: %d bytes, want %d", len(got), len(want))
				}
			})
			calls++
		}
	}
	if n := ranged.ranges.Load(); n != int64(calls) {
		t.Errorf("the RangeOpener's OpenRange was called %d times, want %d", n, calls)
	}
	// The limited reader still closes the store's reader.
	if n := plain.closes.Load(); n != int64(calls) {
		t.Errorf("%d of the %d readers of the store were closed", n, calls)
	}

	if _, err := OpenRange(ctx, plain, d, 0, -1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("OpenRange with limit -1: %v, want an error saying it is negative", err)
	}
}

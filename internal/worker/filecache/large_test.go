package filecache

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// largeReader serves blobs through ReadTo from a store, or wrong data.
type largeReader struct {
	s     blobstore.Store
	calls int
	wrong bool
}

func (l *largeReader) ReadTo(ctx context.Context, d digest.Digest, w io.Writer) error {
	l.calls++
	if l.wrong {
		io.WriteString(w, strings.Repeat("x", int(d.Size)))
		return &blobstore.MismatchError{Want: d, Got: digest.Compute(d.Function, []byte(strings.Repeat("x", int(d.Size))))}
	}
	r, err := l.s.Open(ctx, d, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}

// TestLargeBlobsGoThroughLargeReader: blobs from the threshold on are
// fetched through the LargeReader, smaller ones whole; a reader that
// finds its data wrong leaves nothing cached.
func TestLargeBlobsGoThroughLargeReader(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{Store: blobstore.NewMemory(0)}
	large := &largeReader{s: store.Store}
	c, err := NewWithLarge(t.TempDir(), 0, store, large, 100)
	if err != nil {
		t.Fatal(err)
	}
	small, big := put(t, store, "small"), put(t, store, strings.Repeat("large blob ", 20))
	for _, d := range []digest.Digest{small, big} {
		p, release, err := c.Acquire(ctx, d, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); digest.Compute(digest.SHA256, got) != d {
			t.Errorf("cached file of %s has other content", d)
		}
		release()
	}
	if large.calls != 1 || store.opens.Load() != 1 {
		t.Errorf("%d large reads and %d whole opens; want one of each", large.calls, store.opens.Load())
	}

	wrong := put(t, store, strings.Repeat("another large blob ", 20))
	large.wrong = true
	if _, _, err := c.Acquire(ctx, wrong, false); !errors.As(err, new(*blobstore.MismatchError)) {
		t.Fatalf("Acquire over a reader writing wrong data: %v; want its MismatchError", err)
	}
	if c.Holds(wrong, false) {
		t.Error("the wrong data was cached")
	}
}

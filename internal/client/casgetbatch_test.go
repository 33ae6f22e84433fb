package client

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
)

// TestGetBatch reads present, missing, empty, duplicated and large blobs
// in one GetBatch: each has its own outcome, small ones come in as few
// BatchReadBlobs calls as the batch limit allows, large ones by ByteStream.
func TestGetBatch(t *testing.T) {
	const maxBatch = 64 << 10
	conn, mem, calls := startFrontend(t, frontend.Options{MaxBatchSize: maxBatch})
	ctx := context.Background()
	cas := NewCAS(conn, "inst", digest.SHA256, maxBatch)

	want := map[digest.Digest][]byte{}
	var ds []digest.Digest
	add := func(data []byte, store bool) digest.Digest {
		d := digest.Compute(digest.SHA256, data)
		if store {
			if err := blobstore.Put(ctx, mem, d, data); err != nil {
				t.Fatal(err)
			}
			want[d] = data
		}
		ds = append(ds, d)
		return d
	}
	add(nil, true)
	for i := range 20 {
		add(testData(100+i*10, byte(i)), true) // 20 small blobs: one batch
	}
	absent := add([]byte("never stored"), false)
	add(testData(2*maxBatch, 200), true) // too large for a batch
	ds = append(ds, ds[3])               // a duplicate

	data, errs := make([][]byte, len(ds)), make([]error, len(ds))
	cas.GetBatch(ctx, ds, data, errs)
	for i, d := range ds {
		if d == absent {
			if !errors.Is(errs[i], blobstore.ErrNotFound) {
				t.Errorf("blob %d (never stored): error %v, want one wrapping ErrNotFound", i, errs[i])
			}
			continue
		}
		if errs[i] != nil || data[i] == nil || !bytes.Equal(data[i], want[d]) {
			t.Errorf("blob %d (%s): %d bytes, %v; want its %d bytes", i, d, len(data[i]), errs[i], len(want[d]))
		}
	}
	if n := calls.get("BatchReadBlobs"); n != 1 {
		t.Errorf("GetBatch made %d BatchReadBlobs calls for 21 small blobs; want 1", n)
	}
	if n := calls.get("Read"); n != 1 {
		t.Errorf("GetBatch made %d ByteStream Read calls; want 1, for the blob too large for a batch", n)
	}

	// blobstore.GetBatch uses it.
	data, errs = blobstore.GetBatch(ctx, cas, ds[1:3])
	if errs[0] != nil || errs[1] != nil || !bytes.Equal(data[1], want[ds[2]]) {
		t.Errorf("blobstore.GetBatch through the client: %v %v", errs[0], errs[1])
	}
	if n := calls.get("BatchReadBlobs"); n != 2 {
		t.Errorf("blobstore.GetBatch made %d BatchReadBlobs calls in all; want 2", n)
	}

	// A cancelled context fails every blob still to read.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	data, errs = make([][]byte, 2), make([]error, 2)
	cas.GetBatch(cctx, ds[1:3], data, errs)
	for i := range errs {
		if errs[i] == nil {
			t.Errorf("blob %d read with a cancelled context: no error", i)
		}
	}
}

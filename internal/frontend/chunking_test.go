package frontend

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/cdc"
	"github.com/gantry-build/gantry/internal/digest"
)

// watchedStore is a CAS that can forget blobs, as eviction does, and
// counts the reads of each blob.
type watchedStore struct {
	blobstore.Store
	mu    sync.Mutex
	gone  map[digest.Digest]bool
	opens map[digest.Digest]int
}

func newWatchedStore() *watchedStore {
	return &watchedStore{Store: blobstore.NewMemory(0), gone: map[digest.Digest]bool{}, opens: map[digest.Digest]int{}}
}

func (w *watchedStore) evict(d digest.Digest) { w.mu.Lock(); w.gone[d] = true; w.mu.Unlock() }

func (w *watchedStore) openCount(d digest.Digest) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opens[d]
}

func (w *watchedStore) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	missing, err := w.Store.FindMissing(ctx, ds)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []digest.Digest
	for _, d := range ds {
		if w.gone[d] || (len(missing) > 0 && missing[0] == d) {
			out = append(out, d)
		}
		if len(missing) > 0 && missing[0] == d {
			missing = missing[1:]
		}
	}
	return out, nil
}

func (w *watchedStore) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	w.mu.Lock()
	gone := w.gone[d]
	w.opens[d]++
	w.mu.Unlock()
	if gone {
		return nil, blobstore.ErrNotFound
	}
	return w.Store.Open(ctx, d, offset)
}

func (w *watchedStore) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	w.mu.Lock()
	delete(w.gone, d) // stored again
	w.mu.Unlock()
	return w.Store.Create(ctx, d)
}

// getMapping runs GetChunkMapping and joins its pages.
func (e *env) getMapping(t *testing.T, req *repb.GetChunkMappingRequest) (repb.ChunkingFunction_Value, []*repb.Digest, error) {
	t.Helper()
	stream, err := e.cas.GetChunkMapping(testCtx(t), req)
	if err != nil {
		return 0, nil, err
	}
	var ds []*repb.Digest
	var fn repb.ChunkingFunction_Value
	for i := 0; ; i++ {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fn, ds, nil
		}
		if err != nil {
			return fn, ds, err
		}
		if i == 0 {
			fn = resp.ChunkingFunction
		}
		ds = append(ds, resp.ChunkDigests...)
	}
}

// readChunks downloads the chunks with ByteStream Read and concatenates them.
func (e *env) readChunks(t *testing.T, fn digest.Function, ds []*repb.Digest) []byte {
	t.Helper()
	var out []byte
	for _, pd := range ds {
		d, err := digest.FromProto(fn, pd)
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment()})
		if err != nil {
			t.Fatalf("reading chunk %s: %v", d, err)
		}
		out = append(out, data...)
	}
	return out
}

func TestCapabilitiesAdvertiseChunking(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	caps, err := e.caps.GetCapabilities(testCtx(t), &repb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c := caps.CacheCapabilities
	if !c.SplitBlobSupport || !c.SpliceBlobSupport || c.FastCdc_2020Params.GetAvgChunkSizeBytes() != 512<<10 ||
		c.RepMaxCdcParams.GetMinChunkSizeBytes() != 256<<10 || c.RepMaxCdcParams.GetHorizonSizeBytes() != 2<<20 {
		t.Errorf("chunking capabilities = split %v splice %v fastcdc %v repmax %v", c.SplitBlobSupport, c.SpliceBlobSupport, c.FastCdc_2020Params, c.RepMaxCdcParams)
	}
}

func TestGetChunkMapping(t *testing.T) {
	for _, tt := range []struct {
		name   string
		fn     digest.Function
		ask    repb.ChunkingFunction_Value
		want   repb.ChunkingFunction_Value
		size   int
		minLen int // every chunk but the last is at least this long
		maxLen int
	}{
		{"server's choice", digest.SHA256, repb.ChunkingFunction_UNKNOWN, repb.ChunkingFunction_FAST_CDC_2020, 6 << 20, 128 << 10, 2 << 20},
		{"FastCDC", digest.SHA256, repb.ChunkingFunction_FAST_CDC_2020, repb.ChunkingFunction_FAST_CDC_2020, 6 << 20, 128 << 10, 2 << 20},
		{"RepMaxCDC", digest.SHA256, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_REP_MAX_CDC, 6 << 20, 256 << 10, 512<<10 - 1},
		{"SHA-1", digest.SHA1, repb.ChunkingFunction_UNKNOWN, repb.ChunkingFunction_FAST_CDC_2020, 2 << 20, 128 << 10, 2 << 20},
		{"MD5", digest.MD5, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_REP_MAX_CDC, 2 << 20, 256 << 10, 512<<10 - 1},
		{"SHA-384", digest.SHA384, repb.ChunkingFunction_FAST_CDC_2020, repb.ChunkingFunction_FAST_CDC_2020, 2 << 20, 128 << 10, 2 << 20},
		{"SHA-512", digest.SHA512, repb.ChunkingFunction_UNKNOWN, repb.ChunkingFunction_FAST_CDC_2020, 2 << 20, 128 << 10, 2 << 20},
		{"BLAKE3", digest.BLAKE3, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_REP_MAX_CDC, 2 << 20, 256 << 10, 512<<10 - 1},
		{"small blob", digest.SHA256, repb.ChunkingFunction_UNKNOWN, repb.ChunkingFunction_FAST_CDC_2020, 1000, 0, 1000},
		{"empty blob", digest.SHA256, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_REP_MAX_CDC, 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newWatchedStore()
			e := newEnv(t, store, defaultOptions())
			data := randomBlob(tt.name, tt.size)
			d := e.put(t, tt.fn, data)
			req := &repb.GetChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: tt.fn, ChunkingFunction: tt.ask}
			fn, chunks, err := e.getMapping(t, req)
			if err != nil {
				t.Fatal(err)
			}
			if fn != tt.want {
				t.Errorf("chunking function %v, want %v", fn, tt.want)
			}
			if tt.size > 4*tt.maxLen && len(chunks) < 3 {
				t.Errorf("%d bytes split into %d chunks", tt.size, len(chunks))
			}
			for i, c := range chunks {
				if c.SizeBytes > int64(tt.maxLen) || (i < len(chunks)-1 && c.SizeBytes < int64(tt.minLen)) {
					t.Errorf("chunk %d of %d is %d bytes, outside [%d, %d]", i, len(chunks), c.SizeBytes, tt.minLen, tt.maxLen)
				}
			}
			if got := e.readChunks(t, tt.fn, chunks); !bytes.Equal(got, data) {
				t.Fatalf("the %d chunks concatenate to %d bytes that are not the blob", len(chunks), len(got))
			}
			// The mapping is kept: asking again reads no blob.
			opened := store.openCount(d)
			fn2, chunks2, err := e.getMapping(t, req)
			if err != nil || fn2 != fn || len(chunks2) != len(chunks) {
				t.Fatalf("second call: %v, %d chunks, %v", fn2, len(chunks2), err)
			}
			if store.openCount(d) != opened {
				t.Error("the second GetChunkMapping split the blob again instead of using the kept mapping")
			}
			// SplitBlob, the v2.12 form, gives the same answer.
			resp, err := e.cas.SplitBlob(testCtx(t), &repb.SplitBlobRequest{BlobDigest: d.Proto(), DigestFunction: tt.fn, ChunkingFunction: tt.ask})
			if err != nil || resp.ChunkingFunction != fn || len(resp.ChunkDigests) != len(chunks) {
				t.Fatalf("SplitBlob: %v, %v", resp, err)
			}
		})
	}
}

func TestGetChunkMappingErrors(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	absent := digest.Compute(digest.SHA256, []byte("never uploaded"))
	_, _, err := e.getMapping(t, &repb.GetChunkMappingRequest{BlobDigest: absent.Proto(), DigestFunction: digest.SHA256})
	wantCode(t, err, codes.NotFound, "upload it first")
	_, _, err = e.getMapping(t, &repb.GetChunkMappingRequest{DigestFunction: digest.SHA256})
	wantCode(t, err, codes.InvalidArgument, "blob_digest")
	_, _, err = e.getMapping(t, &repb.GetChunkMappingRequest{InstanceName: "a/blobs", BlobDigest: absent.Proto()})
	wantCode(t, err, codes.InvalidArgument, "reserved")
	_, _, err = e.getMapping(t, &repb.GetChunkMappingRequest{BlobDigest: &repb.Digest{Hash: "xyz", SizeBytes: 3}, DigestFunction: digest.SHA256})
	wantCode(t, err, codes.InvalidArgument, "blob_digest")
}

// An evicted chunk makes the kept mapping a miss: the blob is split again
// and the chunk stored again.
func TestChunkMappingMissesAfterEviction(t *testing.T) {
	store := newWatchedStore()
	e := newEnv(t, store, defaultOptions())
	data := randomBlob("evict", 3<<20)
	d := e.put(t, digest.SHA256, data)
	req := &repb.GetChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: digest.SHA256}
	_, chunks, err := e.getMapping(t, req)
	if err != nil {
		t.Fatal(err)
	}
	victim, _ := digest.FromProto(digest.SHA256, chunks[1])
	store.evict(victim)
	opened := store.openCount(d)
	_, again, err := e.getMapping(t, req)
	if err != nil {
		t.Fatal(err)
	}
	if store.openCount(d) == opened {
		t.Fatal("a mapping with an evicted chunk was served")
	}
	if !e.has(t, victim) {
		t.Fatal("splitting again did not store the evicted chunk again")
	}
	if got := e.readChunks(t, digest.SHA256, again); !bytes.Equal(got, data) {
		t.Fatal("the new mapping's chunks are not the blob")
	}
}

// Mappings are kept in the action cache: a server restarted over the
// same disk action cache serves them without splitting again.
func TestChunkMappingSurvivesRestart(t *testing.T) {
	store := newWatchedStore()
	dir := t.TempDir()
	ac, err := actioncache.NewDisk(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvAC(t, store, ac, defaultOptions())
	d := e.put(t, digest.SHA256, randomBlob("restart", 2<<20))
	req := &repb.GetChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkingFunction: repb.ChunkingFunction_REP_MAX_CDC}
	_, chunks, err := e.getMapping(t, req)
	if err != nil {
		t.Fatal(err)
	}
	ac.Close()
	ac2, err := actioncache.NewDisk(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ac2.Close()
	e2 := newEnvAC(t, store, ac2, defaultOptions())
	opened := store.openCount(d)
	_, again, err := e2.getMapping(t, req)
	if err != nil || len(again) != len(chunks) {
		t.Fatalf("after restart: %d chunks, %v", len(again), err)
	}
	if store.openCount(d) != opened {
		t.Error("the restarted server split the blob again")
	}
}

// cutLocally splits data as a client would, and stores the chunks.
func (e *env) cutLocally(t *testing.T, fn digest.Function, data []byte) []*repb.Digest {
	t.Helper()
	f, err := cdc.NewFastCDC2020(512<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.NewSplitter(bytes.NewReader(data))
	var out []*repb.Digest
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.put(t, fn, c).Proto())
	}
}

func (e *env) register(t *testing.T, reqs ...*repb.RegisterChunkMappingRequest) (*repb.RegisterChunkMappingResponse, error) {
	t.Helper()
	stream, err := e.cas.RegisterChunkMapping(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	return stream.CloseAndRecv()
}

func TestRegisterChunkMapping(t *testing.T) {
	for _, fn := range []digest.Function{digest.SHA256, digest.BLAKE3} {
		t.Run(digest.Name(fn), func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			data := randomBlob("splice", 5<<20)
			d := digest.Compute(fn, data)
			chunks := e.cutLocally(t, fn, data)
			if len(chunks) < 4 {
				t.Fatalf("only %d chunks", len(chunks))
			}
			// The list split over three requests; only the first names the blob.
			resp, err := e.register(t,
				&repb.RegisterChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: fn, ChunkingFunction: repb.ChunkingFunction_FAST_CDC_2020, ChunkDigests: chunks[:1]},
				&repb.RegisterChunkMappingRequest{},
				&repb.RegisterChunkMappingRequest{ChunkDigests: chunks[1:]})
			if err != nil {
				t.Fatal(err)
			}
			if resp.BlobDigest.Hash != d.Hash || resp.BlobDigest.SizeBytes != d.Size {
				t.Errorf("response digest %v, want %v", resp.BlobDigest, d)
			}
			got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment()})
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ByteStream Read of the spliced blob: %d bytes, %v", len(got), err)
			}
			// GetChunkMapping serves the registered chunks.
			cf, mapped, err := e.getMapping(t, &repb.GetChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: fn, ChunkingFunction: repb.ChunkingFunction_FAST_CDC_2020})
			if err != nil || cf != repb.ChunkingFunction_FAST_CDC_2020 || len(mapped) != len(chunks) {
				t.Fatalf("GetChunkMapping after splice: %v, %d chunks (want %d), %v", cf, len(mapped), len(chunks), err)
			}
			// Registering again is accepted as a no-op.
			if _, err := e.register(t, &repb.RegisterChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: fn, ChunkingFunction: repb.ChunkingFunction_FAST_CDC_2020, ChunkDigests: chunks}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSpliceBlob(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	parts := [][]byte{randomBlob("a", 1000), randomBlob("b", 3000), randomBlob("c", 10)}
	var chunks []*repb.Digest
	for _, p := range parts {
		chunks = append(chunks, e.put(t, digest.SHA256, p).Proto())
	}
	whole := bytes.Join(parts, nil)
	d := digest.Compute(digest.SHA256, whole)
	resp, err := e.cas.SpliceBlob(testCtx(t), &repb.SpliceBlobRequest{BlobDigest: d.Proto(), ChunkDigests: chunks})
	if err != nil {
		t.Fatal(err)
	}
	if resp.BlobDigest.Hash != d.Hash {
		t.Errorf("response digest %v", resp.BlobDigest)
	}
	if got, code := e.readAll(t, d.Proto()); code != codes.OK || !bytes.Equal(got, whole) {
		t.Fatalf("BatchReadBlobs of the spliced blob: %v, %d bytes", code, len(got))
	}
}

func TestSpliceErrors(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	parts := [][]byte{randomBlob("x", 2000), randomBlob("y", 2000)}
	var chunks []*repb.Digest
	for _, p := range parts {
		chunks = append(chunks, e.put(t, digest.SHA256, p).Proto())
	}
	d := digest.Compute(digest.SHA256, bytes.Join(parts, nil))
	absent := digest.Compute(digest.SHA256, randomBlob("z", 2000))
	for _, tt := range []struct {
		name   string
		reqs   []*repb.RegisterChunkMappingRequest
		code   codes.Code
		substr string
	}{
		{"wrong order", []*repb.RegisterChunkMappingRequest{{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: []*repb.Digest{chunks[1], chunks[0]}}}, codes.InvalidArgument, "not to blob_digest"},
		{"missing chunk", []*repb.RegisterChunkMappingRequest{{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: []*repb.Digest{chunks[0], absent.Proto()}}}, codes.NotFound, absent.Hash},
		{"too few bytes", []*repb.RegisterChunkMappingRequest{{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: chunks[:1]}}, codes.InvalidArgument, "hold 2000 bytes"},
		{"too many bytes", []*repb.RegisterChunkMappingRequest{{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: []*repb.Digest{chunks[0], chunks[1], chunks[0]}}}, codes.InvalidArgument, "more than the 4000"},
		{"bad chunk digest", []*repb.RegisterChunkMappingRequest{{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: []*repb.Digest{{Hash: "nothex", SizeBytes: 4000}}}}, codes.InvalidArgument, "chunk_digests[0]"},
		{"unknown chunking function", []*repb.RegisterChunkMappingRequest{{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkingFunction: 9, ChunkDigests: chunks}}, codes.InvalidArgument, "chunking_function"},
		{"no blob digest first", []*repb.RegisterChunkMappingRequest{{ChunkDigests: chunks}, {BlobDigest: d.Proto()}}, codes.InvalidArgument, "first"},
		{"empty stream", nil, codes.InvalidArgument, "without a request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.register(t, tt.reqs...)
			wantCode(t, err, tt.code, tt.substr)
			if e.has(t, d) {
				t.Fatal("a failed splice stored the blob")
			}
		})
	}
}

// A blob kept only as registered chunks can still be mapped with another
// chunking function: the server reads it from the chunks.
func TestGetChunkMappingFromChunksOnly(t *testing.T) {
	store := newWatchedStore()
	e := newEnv(t, store, defaultOptions())
	data := randomBlob("chunks only", 3<<20)
	d := digest.Compute(digest.SHA256, data)
	chunks := e.cutLocally(t, digest.SHA256, data)
	if _, err := e.register(t, &repb.RegisterChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: chunks}); err != nil {
		t.Fatal(err)
	}
	store.evict(d)
	cf, mapped, err := e.getMapping(t, &repb.GetChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkingFunction: repb.ChunkingFunction_REP_MAX_CDC})
	if err != nil || cf != repb.ChunkingFunction_REP_MAX_CDC {
		t.Fatalf("GetChunkMapping: %v, %v", cf, err)
	}
	if got := e.readChunks(t, digest.SHA256, mapped); !bytes.Equal(got, data) {
		t.Fatal("chunks cut from the registered chunks are not the blob")
	}
}

// The RPCs use only the blobstore.Store interface; the disk store (with
// its own writers and readers) serves them as the memory store does.
func TestChunkingOnDiskStore(t *testing.T) {
	e := newEnv(t, diskStore(t), defaultOptions())
	data := randomBlob("disk", 3<<20)
	d := e.put(t, digest.SHA256, data)
	_, chunks, err := e.getMapping(t, &repb.GetChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkingFunction: repb.ChunkingFunction_REP_MAX_CDC})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.readChunks(t, digest.SHA256, chunks); !bytes.Equal(got, data) {
		t.Fatal("the chunks are not the blob")
	}
	other := randomBlob("disk spliced", 3<<20)
	od := digest.Compute(digest.SHA256, other)
	if _, err := e.register(t, &repb.RegisterChunkMappingRequest{BlobDigest: od.Proto(), DigestFunction: digest.SHA256, ChunkDigests: e.cutLocally(t, digest.SHA256, other)}); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + od.ResourceSegment()})
	if err != nil || !bytes.Equal(got, other) {
		t.Fatalf("ByteStream Read of the spliced blob: %d bytes, %v", len(got), err)
	}
}

// ByteStream Read serves a blob that left the CAS while a mapping and
// its chunks stayed, from the chunks, at any offset and limit.
func TestByteStreamReadFromChunks(t *testing.T) {
	store := newWatchedStore()
	e := newEnv(t, store, defaultOptions())
	data := randomBlob("read chunks", 3<<20)
	d := digest.Compute(digest.SHA256, data)
	chunks := e.cutLocally(t, digest.SHA256, data)
	if _, err := e.register(t, &repb.RegisterChunkMappingRequest{BlobDigest: d.Proto(), DigestFunction: digest.SHA256, ChunkDigests: chunks}); err != nil {
		t.Fatal(err)
	}
	store.evict(d)
	first := chunks[0].SizeBytes
	for _, tt := range []struct{ offset, limit int64 }{{0, 0}, {1, 0}, {first, 0}, {first - 1, 2}, {first + 5, 100000}, {int64(len(data)), 0}} {
		got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment(), ReadOffset: tt.offset, ReadLimit: tt.limit})
		want := data[tt.offset:]
		if tt.limit > 0 {
			want = want[:tt.limit]
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("offset %d limit %d: %d bytes (want %d), %v", tt.offset, tt.limit, len(got), len(want), err)
		}
	}
	// Without a mapping, a blob that is gone is NOT_FOUND as before.
	gone := e.put(t, digest.SHA256, randomBlob("gone", 100))
	store.evict(gone)
	_, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + gone.ResourceSegment()})
	wantCode(t, err, codes.NotFound, "")
}

package client

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/cdc"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
)

// chunkedBlob is the size of the blobs the chunking tests move: about 16
// chunks of the server's 512 KiB average.
const chunkedBlob = 8 << 20

// changed returns data with n bytes in the middle replaced.
func changed(data []byte, n int) []byte {
	out := bytes.Clone(data)
	copy(out[len(out)/2:], testData(n, 99))
	return out
}

// newChunked returns chunked transfers against the server behind conn,
// with the support its capabilities advertise.
func newChunked(t testing.TB, conn *grpc.ClientConn, cache *ChunkCache, obs ChunkObserver) *Chunked {
	t.Helper()
	caps, err := GetCapabilities(context.Background(), conn, "")
	if err != nil {
		t.Fatal(err)
	}
	return NewChunked(NewCAS(conn, "", digest.SHA256, BatchLimit(caps)), ChunkingOf(caps), cache, obs)
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// observed records what a Chunked reports.
type observed struct{ up, down []ChunkStats }

func (o *observed) ChunkedUpload(s ChunkStats)   { o.up = append(o.up, s) }
func (o *observed) ChunkedDownload(s ChunkStats) { o.down = append(o.down, s) }

func TestChunkingOfGantryCapabilities(t *testing.T) {
	conn, _, _ := startFrontend(t, frontend.Options{})
	ch := newChunked(t, conn, nil, nil).Chunking()
	if !ch.Split || !ch.Splice || !ch.Streaming || ch.Function != repb.ChunkingFunction_FAST_CDC_2020 {
		t.Fatalf("Gantry's capabilities read as %s; want FAST_CDC_2020 with split, splice and streaming", ch)
	}
	if got := ChunkingOf(&repb.ServerCapabilities{}); got.Split || got.Splice {
		t.Errorf("empty capabilities read as %s; want no chunking", got)
	}
}

func TestChunkedUploadSendsOnlyChangedChunks(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "RegisterChunkMapping", false: "SpliceBlob"}[streaming], func(t *testing.T) {
			conn, mem, calls := startFrontend(t, frontend.Options{})
			ctx := context.Background()
			var obs observed
			c := newChunked(t, conn, nil, &obs)
			c.ch.Streaming = streaming
			v1 := testData(chunkedBlob, 1)
			v2 := changed(v1, 64<<10)
			for i, data := range [][]byte{v1, v2} {
				d := digest.Compute(digest.SHA256, data)
				before := calls.in.Load()
				st, err := c.UploadFile(ctx, d, writeTemp(t, data))
				if err != nil {
					t.Fatalf("upload %d: %v", i+1, err)
				}
				received := calls.in.Load() - before
				if got, err := blobstore.Get(ctx, mem, d); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("upload %d: the server holds %d bytes (err %v), want the blob", i+1, len(got), err)
				}
				if !st.Chunked || st.Chunks < 8 {
					t.Fatalf("upload %d: %+v; want a chunked upload of about 16 chunks", i+1, st)
				}
				if i == 0 {
					if st.BytesTransferred != d.Size || received < d.Size {
						t.Errorf("first upload sent %d bytes (server received %d); want the whole %d", st.BytesTransferred, received, d.Size)
					}
					continue
				}
				// 64 KiB changed touch one or two chunks (at most 2 MiB each).
				if st.Transferred > 3 || received > 4<<20 || st.BytesSaved < d.Size-4<<20 {
					t.Errorf("second upload: %+v, server received %d bytes; want only the changed chunks sent", st, received)
				}
			}
			if len(obs.up) != 2 || obs.up[1].BytesSaved == 0 {
				t.Errorf("observer saw %+v; want two uploads, the second saving bytes", obs.up)
			}
			splices := calls.get("SpliceBlob") + calls.get("RegisterChunkMapping")
			if splices != 2 || (calls.get("RegisterChunkMapping") == 2) != streaming {
				t.Errorf("%d SpliceBlob and %d RegisterChunkMapping calls; want two of the one the server's version asks for", calls.get("SpliceBlob"), calls.get("RegisterChunkMapping"))
			}
		})
	}
}

func TestChunkedUploadOfChangedFileStoresNothing(t *testing.T) {
	conn, mem, calls := startFrontend(t, frontend.Options{})
	c := newChunked(t, conn, nil, nil)
	data := testData(chunkedBlob/4, 2)
	d := digest.Compute(digest.SHA256, data)
	_, err := c.UploadFile(context.Background(), d, writeTemp(t, changed(data, 10)))
	if !errors.As(err, new(*blobstore.MismatchError)) {
		t.Fatalf("upload of a file that changed after hashing: %v; want a MismatchError", err)
	}
	if ok, _ := blobstore.Has(context.Background(), mem, d); ok || calls.get("RegisterChunkMapping") != 1 {
		t.Errorf("the server holds the blob (%v) after %d RegisterChunkMapping calls; want one refused", ok, calls.get("RegisterChunkMapping"))
	}
	// A file of another size is caught before anything is sent.
	_, err = c.UploadFile(context.Background(), d, writeTemp(t, data[1:]))
	if !errors.As(err, new(*blobstore.MismatchError)) || calls.get("RegisterChunkMapping") != 1 {
		t.Fatalf("upload of a file that shrank: %v; want a MismatchError and no splice", err)
	}
}

func TestChunkedDownloadFetchesOnlyMissingChunks(t *testing.T) {
	conn, mem, calls := startFrontend(t, frontend.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	cache, err := OpenChunkCache(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var obs observed
	c := newChunked(t, conn, cache, &obs)
	v1 := testData(chunkedBlob, 3)
	v2 := changed(v1, 64<<10)
	read := func(data []byte) ChunkStats {
		t.Helper()
		d := digest.Compute(digest.SHA256, data)
		if err := blobstore.Put(ctx, mem, d, data); err != nil {
			t.Fatal(err)
		}
		before := calls.out.Load()
		var buf bytes.Buffer
		st, err := c.ReadTo(ctx, d, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("read %d bytes that differ from the blob's %d", buf.Len(), len(data))
		}
		if sent := calls.out.Load() - before; sent < st.BytesTransferred || sent > st.BytesTransferred+1<<20 {
			t.Errorf("the server sent %d bytes; the stats say %d of chunks", sent, st.BytesTransferred)
		}
		return st
	}

	cold := read(v1)
	if !cold.Chunked || cold.BytesTransferred != int64(len(v1)) || cold.BytesSaved != 0 {
		t.Fatalf("cold download: %+v; want every chunk fetched", cold)
	}
	warm := read(v2)
	if warm.Transferred > 3 || warm.BytesTransferred > 4<<20 || warm.BytesSaved < int64(len(v2))-4<<20 {
		t.Fatalf("warm download of a changed blob: %+v; want only the changed chunks fetched", warm)
	}
	again := read(v2)
	if again.Transferred != 0 || again.BytesSaved != int64(len(v2)) {
		t.Errorf("third download of the same blob: %+v; want every chunk from the cache", again)
	}
	if calls.get("GetChunkMapping") != 3 || len(obs.down) != 3 {
		t.Errorf("%d GetChunkMapping calls, %d observed downloads; want 3 of each", calls.get("GetChunkMapping"), len(obs.down))
	}
	if cache.Size() < int64(len(v1)) {
		t.Errorf("the cache holds %d bytes; want the chunks of both versions", cache.Size())
	}

	damage := func() {
		t.Helper()
		des, _ := os.ReadDir(dir)
		for _, de := range des {
			p := filepath.Join(dir, de.Name())
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Damage every cached chunk: each is detected, removed and fetched.
	damage()
	damaged := read(v2)
	if damaged.Corrupt != damaged.Chunks || damaged.BytesTransferred != int64(len(v2)) {
		t.Errorf("download over a damaged cache: %+v; want every chunk found corrupt and fetched", damaged)
	}

	// Into a file, cached chunks are trusted until the whole blob comes
	// out wrong; then each is checked and the blob written again.
	damage()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := c.ReadTo(ctx, digest.Compute(digest.SHA256, v2), f)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(f.Name()); !bytes.Equal(got, v2) {
		t.Fatalf("the file holds %d bytes that differ from the blob's %d", len(got), len(v2))
	}
	if st.Corrupt != st.Chunks || st.BytesTransferred != int64(len(v2)) {
		t.Errorf("download into a file over a damaged cache: %+v; want every chunk found corrupt and fetched", st)
	}
}

// noChunking serves Gantry's CAS as a server without chunking would:
// capabilities that do not mention it, and the four calls unimplemented.
type noChunking struct{ *frontend.Server }

func (s noChunking) GetCapabilities(ctx context.Context, req *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	caps, err := s.Server.GetCapabilities(ctx, req)
	if err == nil {
		cc := caps.CacheCapabilities
		cc.SplitBlobSupport, cc.SpliceBlobSupport, cc.FastCdc_2020Params, cc.RepMaxCdcParams = false, false, nil, nil
	}
	return caps, err
}

func (noChunking) SplitBlob(context.Context, *repb.SplitBlobRequest) (*repb.SplitBlobResponse, error) {
	return nil, status.Error(codes.Unimplemented, "no")
}

func (noChunking) GetChunkMapping(*repb.GetChunkMappingRequest, repb.ContentAddressableStorage_GetChunkMappingServer) error {
	return status.Error(codes.Unimplemented, "no")
}

func (noChunking) SpliceBlob(context.Context, *repb.SpliceBlobRequest) (*repb.SpliceBlobResponse, error) {
	return nil, status.Error(codes.Unimplemented, "no")
}

func (noChunking) RegisterChunkMapping(repb.ContentAddressableStorage_RegisterChunkMappingServer) error {
	return status.Error(codes.Unimplemented, "no")
}

func TestChunkedTransfersWithoutServerSupport(t *testing.T) {
	mem := blobstore.NewMemory(0)
	fe := noChunking{frontend.New(mem, actioncache.NewMemory(0), frontend.Options{})}
	conn, calls := startServer(t, func(g *grpc.Server) {
		repb.RegisterCapabilitiesServer(g, fe)
		repb.RegisterContentAddressableStorageServer(g, fe)
		bspb.RegisterByteStreamServer(g, fe.Server)
	})
	ctx := context.Background()
	cache, err := OpenChunkCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	c := newChunked(t, conn, cache, nil)
	data := testData(chunkedBlob/4, 4)
	d := digest.Compute(digest.SHA256, data)
	up, err := c.UploadFile(ctx, d, writeTemp(t, data))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := blobstore.Get(ctx, mem, d); err != nil || !bytes.Equal(got, data) || up.Chunked {
		t.Fatalf("upload without chunking: %+v, server holds %d bytes (err %v); want the whole blob uploaded", up, len(got), err)
	}
	var buf bytes.Buffer
	down, err := c.ReadTo(ctx, d, &buf)
	if err != nil || !bytes.Equal(buf.Bytes(), data) || down.Chunked {
		t.Fatalf("download without chunking: %+v, %d bytes, %v; want the whole blob", down, buf.Len(), err)
	}
	if n := calls.get("SplitBlob") + calls.get("GetChunkMapping") + calls.get("SpliceBlob") + calls.get("RegisterChunkMapping"); n != 0 {
		t.Errorf("%d chunking calls to a server that does not advertise chunking; want none", n)
	}

	// A server that advertises chunking but does not serve it still
	// takes and serves the blob whole.
	c.ch = newChunked(t, conn, nil, nil).Chunking()
	c.ch.Split, c.ch.Splice, c.ch.Streaming = true, true, true
	c.ch.Function = repb.ChunkingFunction_FAST_CDC_2020
	c.ch.fn = newChunkedFastCDC(t)
	data = testData(chunkedBlob/4, 6)
	d = digest.Compute(digest.SHA256, data)
	if up, err = c.UploadFile(ctx, d, writeTemp(t, data)); err != nil {
		t.Fatalf("upload to a server whose RegisterChunkMapping is unimplemented: %v", err)
	}
	if got, err := blobstore.Get(ctx, mem, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("upload to a server whose RegisterChunkMapping is unimplemented: %+v, server holds %d bytes (err %v); want the blob", up, len(got), err)
	}
	buf.Reset()
	if down, err = c.ReadTo(ctx, d, &buf); err != nil || !bytes.Equal(buf.Bytes(), data) || down.Chunked {
		t.Fatalf("download from a server whose GetChunkMapping fails: %+v, %d bytes, %v; want the whole blob", down, buf.Len(), err)
	}
}

func TestChunkCacheBoundAndRestart(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenChunkCache(dir, 3000)
	if err != nil {
		t.Fatal(err)
	}
	var ds []digest.Digest
	for i := range 4 {
		data := testData(1000, byte(i))
		d := digest.Compute(digest.SHA256, data)
		ds = append(ds, d)
		if err := c.Put(d, data); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			time.Sleep(10 * time.Millisecond)
			if _, ok, _ := c.Get(ds[0], true); !ok { // ds[0] becomes the most recent
				t.Fatal("chunk 0 is not in the cache")
			}
		}
	}
	if _, ok, _ := c.Get(ds[1], true); ok {
		t.Errorf("chunk 1, the least recently used, is still there after a fourth chunk; want it removed")
	}
	for _, i := range []int{0, 2, 3} {
		if _, ok, _ := c.Get(ds[i], true); !ok {
			t.Errorf("chunk %d is gone; want it kept", i)
		}
	}
	if c.Size() != 3000 {
		t.Errorf("cache size %d; want 3000", c.Size())
	}
	again, err := OpenChunkCache(dir, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if again.Size() != 2000 {
		t.Errorf("reopened with a 2000-byte bound it holds %d bytes", again.Size())
	}
	if _, err := OpenChunkCache(dir, 0); err == nil {
		t.Error("a zero bound was accepted")
	}
}

// TestChunkedDownloadWithUnusableCache: a chunk cache whose directory
// cannot be made costs fetches, never the download.
func TestChunkedDownloadWithUnusableCache(t *testing.T) {
	conn, mem, _ := startFrontend(t, frontend.Options{})
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cache, err := OpenChunkCache(filepath.Join(file, "chunks"), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	c := newChunked(t, conn, cache, nil)
	data := testData(chunkedBlob/4, 5)
	d := digest.Compute(digest.SHA256, data)
	if err := blobstore.Put(context.Background(), mem, d, data); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var buf bytes.Buffer
		st, err := c.ReadTo(context.Background(), d, &buf)
		if err != nil || !bytes.Equal(buf.Bytes(), data) || st.BytesTransferred != d.Size {
			t.Fatalf("download through an unusable cache: %+v, %v; want the blob, every chunk fetched", st, err)
		}
	}
}

// newChunkedFastCDC is REAPI's recommended FastCDC, for tests that fake
// a server's capabilities.
func newChunkedFastCDC(t *testing.T) cdc.Function {
	t.Helper()
	f, err := cdc.NewFastCDC2020(512<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

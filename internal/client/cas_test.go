package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
)

func TestCASRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		size      int
		instance  string
		fn        digest.Function
		wantBatch bool // uploaded with BatchUpdateBlobs, else ByteStream Write
	}{
		{"empty", 0, "", digest.SHA256, false},
		{"one byte", 1, "", digest.SHA256, true},
		{"small", 1000, "", digest.SHA256, true},
		{"small with instance", 1000, "a/b", digest.SHA256, true},
		{"small blake3", 1000, "", digest.BLAKE3, true},
		{"at the small limit", SmallBlobLimit, "", digest.SHA256, true},
		{"just over the small limit", SmallBlobLimit + 1, "", digest.SHA256, false},
		{"exact chunks", 3 * ChunkSize, "", digest.SHA256, false},
		{"uneven chunks", 2*ChunkSize + 12345, "main", digest.SHA256, false},
		{"large blake3", 2*ChunkSize + 7, "", digest.BLAKE3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, mem, calls := startFrontend(t, frontend.Options{})
			ctx := context.Background()
			cas := NewCAS(conn, tt.instance, tt.fn, 0)
			data := testData(tt.size, 1)
			d := digest.Compute(tt.fn, data)

			if err := put(ctx, cas, d, data); err != nil {
				t.Fatalf("upload: %v", err)
			}
			if got, err := blobstore.Get(ctx, mem, d); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("server holds %d bytes (err %v), want the %d uploaded", len(got), err, len(data))
			}
			batch, write := calls.get("BatchUpdateBlobs"), calls.get("Write")
			switch {
			case tt.size == 0 && batch+write != 0:
				t.Errorf("the empty blob was uploaded (%d batch, %d write calls); it is always present", batch, write)
			case tt.size > 0 && tt.wantBatch && (batch != 1 || write != 0):
				t.Errorf("got %d BatchUpdateBlobs and %d Write calls, want one BatchUpdateBlobs", batch, write)
			case tt.size > 0 && !tt.wantBatch && (batch != 0 || write != 1):
				t.Errorf("got %d BatchUpdateBlobs and %d Write calls, want one Write", batch, write)
			}

			got, err := read(ctx, cas, d, 0)
			if err != nil {
				t.Fatalf("read back: %v", err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(data))
			}
			missing, err := cas.FindMissing(ctx, []digest.Digest{d})
			if err != nil || len(missing) != 0 {
				t.Errorf("FindMissing after upload = %v, %v; want none missing", missing, err)
			}
		})
	}
}

// put uploads data with Create/Write/Commit, writing in odd-sized pieces
// so that chunk boundaries do not line up with writes.
func put(ctx context.Context, cas *CAS, d digest.Digest, data []byte) error {
	w, err := cas.Create(ctx, d)
	if err != nil {
		return err
	}
	defer w.Close()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 300001)
		if _, err := w.Write(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	if w.Written() != int64(len(data)) {
		return fmt.Errorf("Written() = %d after writing %d bytes", w.Written(), len(data))
	}
	return w.Commit()
}

func read(ctx context.Context, cas *CAS, d digest.Digest, offset int64) ([]byte, error) {
	r, err := cas.Open(ctx, d, offset)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestCASOpenRanges(t *testing.T) {
	conn, mem, _ := startFrontend(t, frontend.Options{ReadChunkSize: 64 << 10})
	ctx := context.Background()
	data := testData(3*ChunkSize+5, 2)
	d := digest.Compute(digest.SHA256, data)
	if err := blobstore.Put(ctx, mem, d, data); err != nil {
		t.Fatal(err)
	}
	cas := NewCAS(conn, "", digest.SHA256, 0)
	for _, offset := range []int64{0, 1, 64 << 10, ChunkSize, d.Size - 1, d.Size} {
		t.Run(fmt.Sprint(offset), func(t *testing.T) {
			got, err := read(ctx, cas, d, offset)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data[offset:]) {
				t.Errorf("read from %d: got %d bytes, want the blob's last %d", offset, len(got), len(data[offset:]))
			}
		})
	}
	for _, offset := range []int64{-1, d.Size + 1} {
		if _, err := cas.Open(ctx, d, offset); err == nil || !strings.Contains(err.Error(), "outside the blob") {
			t.Errorf("Open at offset %d: %v, want an 'outside the blob' error", offset, err)
		}
	}
}

func TestCASNotFound(t *testing.T) {
	conn, _, _ := startFrontend(t, frontend.Options{})
	ctx := context.Background()
	cas := NewCAS(conn, "", digest.SHA256, 0)
	small := digest.Compute(digest.SHA256, []byte("never uploaded"))
	large := digest.Compute(digest.SHA256, testData(DefaultMaxBatch+1, 3))
	empty := digest.Empty(digest.SHA256)

	for _, d := range []digest.Digest{small, large} {
		if _, err := cas.Open(ctx, d, 0); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("Open(%s) = %v, want ErrNotFound", d, err)
		}
		if _, err := cas.GetMany(ctx, []digest.Digest{d, empty}); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("GetMany(%s) = %v, want ErrNotFound", d, err)
		}
	}
	missing, err := cas.FindMissing(ctx, []digest.Digest{small, empty, large})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 2 || missing[0] != small || missing[1] != large {
		t.Errorf("FindMissing = %v, want [%s %s] (the empty blob is always present)", missing, small, large)
	}
	got, err := cas.GetMany(ctx, []digest.Digest{empty})
	if err != nil || got[empty] == nil || len(got[empty]) != 0 {
		t.Errorf("GetMany(empty) = %v, %v; want the empty blob", got, err)
	}
}

func TestCASMismatch(t *testing.T) {
	small := testData(1000, 4)
	large := testData(2*ChunkSize+3, 5)
	flip := func(b []byte) []byte { c := bytes.Clone(b); c[len(c)/2] ^= 1; return c }
	tests := []struct {
		name       string
		want       []byte // the blob the digest is of
		send       []byte
		serverSide bool // skip the client's check to see the server's error
	}{
		{"small wrong bytes", small, flip(small), false},
		{"small too short", small, small[:999], false},
		{"small too long", small, append(bytes.Clone(small), 0), false},
		{"large wrong bytes", large, flip(large), false},
		{"large too short", large, large[:len(large)-1], false},
		{"large too long", large, append(bytes.Clone(large), 0), false},
		{"small wrong bytes, server check", small, flip(small), true},
		{"small too short, server check", small, small[:999], true},
		{"large wrong bytes, server check", large, flip(large), true},
		{"large too short, server check", large, large[:len(large)-1], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, mem, _ := startFrontend(t, frontend.Options{})
			ctx := context.Background()
			cas := NewCAS(conn, "", digest.SHA256, 0)
			cas.skipLocalVerify = tt.serverSide
			d := digest.Compute(digest.SHA256, tt.want)
			err := put(ctx, cas, d, tt.send)
			if err == nil {
				t.Fatal("upload of wrong data succeeded")
			}
			var me *blobstore.MismatchError
			if tt.serverSide {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), d.Hash) {
					t.Errorf("error %q (code %s), want the server's INVALID_ARGUMENT naming the blob", err, status.Code(err))
				}
			} else if !errors.As(err, &me) || me.Want != d {
				t.Errorf("error %v (%T), want a *blobstore.MismatchError for %s", err, err, d)
			}
			if ok, _ := blobstore.Has(ctx, mem, d); ok {
				t.Error("the server stored the blob anyway")
			}
			if err := cas.PutMany(ctx, map[digest.Digest][]byte{d: tt.send}); err == nil {
				t.Error("PutMany of wrong data succeeded")
			}
		})
	}
}

func TestCASRejectsOtherFunction(t *testing.T) {
	conn, _, _ := startFrontend(t, frontend.Options{})
	cas := NewCAS(conn, "", digest.SHA256, 0)
	d := digest.Compute(digest.BLAKE3, []byte("x"))
	ctx := context.Background()
	_, err1 := cas.FindMissing(ctx, []digest.Digest{d})
	_, err2 := cas.Open(ctx, d, 0)
	_, err3 := cas.Create(ctx, d)
	for i, err := range []error{err1, err2, err3} {
		if err == nil || !strings.Contains(err.Error(), "one client per digest function") {
			t.Errorf("call %d: %v, want an error about the digest function", i, err)
		}
	}
}

func TestPutManyGetMany(t *testing.T) {
	const maxBatch = 64 << 10
	conn, mem, calls := startFrontend(t, frontend.Options{MaxBatchSize: maxBatch})
	ctx := context.Background()
	cas := NewCAS(conn, "inst", digest.SHA256, maxBatch)
	blobs := map[digest.Digest][]byte{}
	var ds []digest.Digest
	add := func(data []byte) {
		d := digest.Compute(digest.SHA256, data)
		blobs[d] = data
		ds = append(ds, d)
	}
	add(nil) // the empty blob
	for i := range 40 {
		add(testData(i*500, byte(i))) // 0..19.5 KB: several batches
	}
	add(testData(maxBatch-batchOverhead, 100)) // exactly fills a batch
	add(testData(maxBatch, 101))               // too large for a batch
	add(testData(3*ChunkSize/2, 102))          // streamed in two chunks

	if err := cas.PutMany(ctx, blobs); err != nil {
		t.Fatal(err)
	}
	for d, data := range blobs {
		if got, err := blobstore.Get(ctx, mem, d); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("server copy of %s: %d bytes, %v", d, len(got), err)
		}
	}
	batches, writes := calls.get("BatchUpdateBlobs"), calls.get("Write")
	if batches < 2 || writes != 2 {
		t.Errorf("PutMany made %d BatchUpdateBlobs and %d Write calls; want several batches and 2 streamed blobs", batches, writes)
	}

	// Everything is present now: a second PutMany only asks.
	if err := cas.PutMany(ctx, blobs); err != nil {
		t.Fatal(err)
	}
	if b, w := calls.get("BatchUpdateBlobs"), calls.get("Write"); b != batches || w != writes {
		t.Errorf("second PutMany uploaded again (%d batch, %d write calls); FindMissing should have found nothing to do", b-batches, w-writes)
	}

	got, err := cas.GetMany(ctx, append(ds, ds[3])) // a duplicate too
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(blobs) {
		t.Errorf("GetMany returned %d blobs, want %d", len(got), len(blobs))
	}
	for d, data := range blobs {
		if !bytes.Equal(got[d], data) || got[d] == nil {
			t.Errorf("GetMany %s: got %d bytes, want %d", d, len(got[d]), len(data))
		}
	}
	if n := calls.get("BatchReadBlobs"); n < 2 {
		t.Errorf("GetMany made %d BatchReadBlobs calls; want several", n)
	}
	if n := calls.get("Read"); n != 2 {
		t.Errorf("GetMany made %d ByteStream Read calls; want 2 for the blobs too large for a batch", n)
	}
}

func TestFindMissingSplitsLargeLists(t *testing.T) {
	conn, _, calls := startFrontend(t, frontend.Options{})
	cas := NewCAS(conn, "", digest.SHA256, 0)
	ds := []digest.Digest{digest.Empty(digest.SHA256)}
	for i := range 2*findMissingChunk + 1 {
		ds = append(ds, digest.Compute(digest.SHA256, []byte(fmt.Sprint(i))))
	}
	missing, err := cas.FindMissing(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != len(ds)-1 {
		t.Errorf("FindMissing reported %d missing, want %d", len(missing), len(ds)-1)
	}
	if n := calls.get("FindMissingBlobs"); n != 3 {
		t.Errorf("FindMissing made %d calls for %d digests, want 3", n, len(ds)-1)
	}
}

func TestPackBatches(t *testing.T) {
	dig := func(size int64) digest.Digest {
		return digest.Digest{Function: digest.SHA256, Hash: fmt.Sprintf("%064x", size), Size: size}
	}
	tests := []struct {
		name        string
		sizes       []int64
		max         int64
		wantBatches [][]int64
		wantLarge   []int64
	}{
		{"none", nil, 1000, nil, nil},
		{"one", []int64{10}, 1000, [][]int64{{10}}, nil},
		{"sorted into two", []int64{600, 100, 300}, 1000, [][]int64{{100, 300}, {600}}, nil},
		{"exact fit", []int64{1000 - batchOverhead}, 1000, [][]int64{{1000 - batchOverhead}}, nil},
		{"too large", []int64{1000 - batchOverhead + 1, 5}, 1000, [][]int64{{5}}, []int64{1000 - batchOverhead + 1}},
		{"overhead counts", []int64{0, 0, 0, 0, 0}, 3 * batchOverhead, [][]int64{{0, 0, 0}, {0, 0}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ds []digest.Digest
			for _, s := range tt.sizes {
				ds = append(ds, dig(s))
			}
			batches, large := packBatches(ds, tt.max)
			var gotBatches [][]int64
			for _, b := range batches {
				var sizes []int64
				var total int64
				for _, d := range b {
					sizes = append(sizes, d.Size)
					total += d.Size + batchOverhead
				}
				if total > tt.max {
					t.Errorf("batch %v costs %d, over the limit %d", sizes, total, tt.max)
				}
				gotBatches = append(gotBatches, sizes)
			}
			var gotLarge []int64
			for _, d := range large {
				gotLarge = append(gotLarge, d.Size)
			}
			if fmt.Sprint(gotBatches) != fmt.Sprint(tt.wantBatches) || fmt.Sprint(gotLarge) != fmt.Sprint(tt.wantLarge) {
				t.Errorf("packBatches = %v, large %v; want %v, large %v", gotBatches, gotLarge, tt.wantBatches, tt.wantLarge)
			}
		})
	}
}

// fakeByteStream serves scripted answers, for server behaviour Gantry's
// frontend does not show.
type fakeByteStream struct {
	bspb.UnimplementedByteStreamServer
	readChunks [][]byte          // Read sends these, then ends the stream
	readErr    error             // ...or this error after them
	committed  func(int64) int64 // Write: committed_size, from the blob size
}

func (f *fakeByteStream) Read(_ *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	for _, c := range f.readChunks {
		if err := stream.Send(&bspb.ReadResponse{Data: c}); err != nil {
			return err
		}
	}
	return f.readErr
}

// Write answers after the first request, as a server that already has
// the blob does.
func (f *fakeByteStream) Write(stream bspb.ByteStream_WriteServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	res, err := digest.ParseWriteResource(req.ResourceName)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: f.committed(res.Digest.Size)})
}

func TestCASReadChecksServerData(t *testing.T) {
	data := testData(1000, 6)
	d := digest.Compute(digest.SHA256, data)
	bad := bytes.Clone(data)
	bad[0] ^= 1
	tests := []struct {
		name    string
		chunks  [][]byte
		err     error
		offset  int64
		wantErr func(error) bool
	}{
		{"good", [][]byte{data[:10], data[10:]}, nil, 0, func(err error) bool { return err == nil }},
		{"good from offset", [][]byte{data[10:]}, nil, 10, func(err error) bool { return err == nil }},
		{"wrong bytes", [][]byte{bad}, nil, 0, func(err error) bool {
			var me *blobstore.MismatchError
			return errors.As(err, &me)
		}},
		{"short", [][]byte{data[:999]}, nil, 0, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"long", [][]byte{data, {0}}, nil, 0, func(err error) bool { return err != nil && strings.Contains(err.Error(), "more bytes") }},
		{"broken mid-way", [][]byte{data[:10]}, status.Error(codes.Internal, "disk on fire"), 0, func(err error) bool {
			return status.Code(err) == codes.Internal && strings.Contains(err.Error(), "disk on fire")
		}},
		{"not found", nil, status.Error(codes.NotFound, "gone"), 0, func(err error) bool { return errors.Is(err, blobstore.ErrNotFound) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeByteStream{readChunks: tt.chunks, readErr: tt.err}
			conn, _ := startServer(t, func(g *grpc.Server) { bspb.RegisterByteStreamServer(g, fake) })
			got, err := read(context.Background(), NewCAS(conn, "", digest.SHA256, 0), d, tt.offset)
			if !tt.wantErr(err) {
				t.Fatalf("read: %v (%T)", err, err)
			}
			if err == nil && !bytes.Equal(got, data[tt.offset:]) {
				t.Errorf("read %d bytes that differ from the blob", len(got))
			}
		})
	}
}

func TestCASWriteEarlyCompletion(t *testing.T) {
	data := testData(3*ChunkSize+1, 7)
	d := digest.Compute(digest.SHA256, data)
	tests := []struct {
		name      string
		committed func(int64) int64
		wantErr   string
	}{
		{"blob present", func(size int64) int64 { return size }, ""},
		{"compressed-style answer", func(int64) int64 { return -1 }, ""},
		{"partial commit", func(int64) int64 { return 5 }, "committed 5 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeByteStream{committed: tt.committed}
			conn, _ := startServer(t, func(g *grpc.Server) { bspb.RegisterByteStreamServer(g, fake) })
			err := put(context.Background(), NewCAS(conn, "", digest.SHA256, 0), d, data)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("upload: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("upload: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCASWriterLifecycle(t *testing.T) {
	conn, mem, _ := startFrontend(t, frontend.Options{})
	ctx := context.Background()
	cas := NewCAS(conn, "", digest.SHA256, 0)
	data := testData(100, 8)
	d := digest.Compute(digest.SHA256, data)

	// Close without Commit stores nothing and ends the writer.
	w, err := cas.Create(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	if ok, _ := blobstore.Has(ctx, mem, d); ok {
		t.Error("a closed, uncommitted writer stored its blob")
	}
	if _, err := w.Write(data); err == nil {
		t.Error("Write after Close succeeded")
	}
	if err := w.Commit(); err == nil {
		t.Error("Commit after Close succeeded")
	}

	// Commit twice is fine; Close after Commit is a no-op.
	w, _ = cas.Create(ctx, d)
	w.Write(data)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Errorf("second Commit: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close after Commit: %v", err)
	}
	if ok, _ := blobstore.Has(ctx, mem, d); !ok {
		t.Error("the committed blob is not on the server")
	}
}

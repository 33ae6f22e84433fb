package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// read runs a ByteStream Read and returns the data and the number of
// messages it came in.
func (e *env) read(ctx context.Context, req *bspb.ReadRequest) ([]byte, int, error) {
	stream, err := e.bs.Read(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	n := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), n, nil
		}
		if err != nil {
			return buf.Bytes(), n, err
		}
		buf.Write(resp.Data)
		n++
	}
}

func TestByteStreamRead(t *testing.T) {
	opts := defaultOptions()
	e := newEnv(t, nil, opts)
	big := randomBlob("big", 3<<20+123) // a multi-MiB blob spans several chunks
	bigD := e.put(t, digest.SHA256, big)
	small := []byte("a small blob for ranges")
	smallD := e.put(t, digest.SHA256, small)
	b3 := []byte("stored under blake3")
	b3D := e.put(t, digest.BLAKE3, b3)
	missing := digest.Compute(digest.SHA256, []byte("missing"))
	chunk := opts.ReadChunkSize

	tests := []struct {
		name     string
		resource string
		offset   int64
		limit    int64
		want     []byte
		wantMsgs int // expected messages; -1: don't check
		code     codes.Code
		msg      string
	}{
		{"whole multi-MiB blob", "blobs/" + bigD.ResourceSegment(), 0, 0, big, (len(big) + chunk - 1) / chunk, codes.OK, ""},
		{"offset into big blob", "blobs/" + bigD.ResourceSegment(), int64(chunk) + 7, 0, big[chunk+7:], -1, codes.OK, ""},
		{"limit across chunks", "blobs/" + bigD.ResourceSegment(), 5, int64(chunk) + 10, big[5 : chunk+15], 2, codes.OK, ""},
		{"offset", "blobs/" + smallD.ResourceSegment(), 2, 0, small[2:], 1, codes.OK, ""},
		{"offset and limit", "blobs/" + smallD.ResourceSegment(), 2, 5, small[2:7], 1, codes.OK, ""},
		{"limit beyond end", "blobs/" + smallD.ResourceSegment(), 20, 100, small[20:], 1, codes.OK, ""},
		{"offset at end", "blobs/" + smallD.ResourceSegment(), int64(len(small)), 0, nil, 0, codes.OK, ""},
		{"multi-segment instance", "a/b/c/blobs/" + smallD.ResourceSegment(), 0, 0, small, 1, codes.OK, ""},
		{"blake3", "blobs/" + b3D.ResourceSegment(), 0, 0, b3, 1, codes.OK, ""},
		{"empty blob never uploaded", "blobs/" + digest.Empty(digest.SHA256).ResourceSegment(), 0, 0, nil, 0, codes.OK, ""},
		{"empty blob, blake3", "blobs/" + digest.Empty(digest.BLAKE3).ResourceSegment(), 0, 0, nil, 0, codes.OK, ""},

		{"offset past end", "blobs/" + smallD.ResourceSegment(), int64(len(small)) + 1, 0, nil, 0, codes.OutOfRange, "read_offset"},
		{"negative offset", "blobs/" + smallD.ResourceSegment(), -1, 0, nil, 0, codes.OutOfRange, "read_offset"},
		{"negative limit", "blobs/" + smallD.ResourceSegment(), 0, -1, nil, 0, codes.InvalidArgument, "read_limit"},
		{"not found", "blobs/" + missing.ResourceSegment(), 0, 0, nil, 0, codes.NotFound, "not in the CAS"},
		{"blake3 hash read as sha256", "blobs/" + b3D.Hash + "/" + fmt.Sprint(b3D.Size), 0, 0, nil, 0, codes.NotFound, ""},
		{"compressed with limit", "compressed-blobs/zstd/" + smallD.ResourceSegment(), 0, 5, nil, 0, codes.InvalidArgument, "read_limit"},
		{"compressed not found", "compressed-blobs/zstd/" + missing.ResourceSegment(), 0, 0, nil, 0, codes.NotFound, ""},
		{"unsupported compressor", "compressed-blobs/brotli/" + smallD.ResourceSegment(), 0, 0, nil, 0, codes.InvalidArgument, "brotli"},
		{"write name", "uploads/u/blobs/" + smallD.ResourceSegment(), 0, 0, nil, 0, codes.InvalidArgument, "reserved word"},
		{"reserved instance", "capabilities/blobs/" + smallD.ResourceSegment(), 0, 0, nil, 0, codes.InvalidArgument, "reserved word"},
		{"bad hash", "blobs/xyz/5", 0, 0, nil, 0, codes.InvalidArgument, ""},
		{"no size", "blobs/" + smallD.Hash, 0, 0, nil, 0, codes.InvalidArgument, "{hash}/{size}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msgs, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: tt.resource, ReadOffset: tt.offset, ReadLimit: tt.limit})
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, tt.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("read %d bytes, want %d (or different contents)", len(got), len(tt.want))
			}
			if tt.wantMsgs >= 0 && msgs != tt.wantMsgs {
				t.Errorf("data came in %d messages, want %d (chunks of at most %d bytes)", msgs, tt.wantMsgs, chunk)
			}
		})
	}
}

func TestByteStreamReadCompressed(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	blobs := map[string][]byte{
		"compressible": bytes.Repeat([]byte("abcdefgh"), 500000),
		"random":       randomBlob("random", 2<<20+1),
		"tiny":         []byte("x"),
	}
	for name, data := range blobs {
		d := e.put(t, digest.SHA256, data)
		for _, off := range []int64{0, 1, int64(len(data)) / 2, int64(len(data))} {
			t.Run(fmt.Sprintf("%s@%d", name, off), func(t *testing.T) {
				got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "inst/compressed-blobs/zstd/" + d.ResourceSegment(), ReadOffset: off})
				if err != nil {
					t.Fatal(err)
				}
				plain, err := dec.DecodeAll(got, nil)
				if err != nil {
					t.Fatalf("the stream is not valid zstd: %v", err)
				}
				if !bytes.Equal(plain, data[off:]) {
					t.Errorf("decompressed %d bytes, want %d", len(plain), len(data)-int(off))
				}
			})
		}
	}
}

// writer drives one ByteStream Write stream.
type writer struct {
	stream bspb.ByteStream_WriteClient
	name   string
	offset int64
}

func (e *env) newWriter(t testing.TB, ctx context.Context, name string, offset int64) *writer {
	t.Helper()
	stream, err := e.bs.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &writer{stream: stream, name: name, offset: offset}
}

// send sends data in chunks of at most chunk bytes; finish marks the last.
func (w *writer) send(data []byte, chunk int, finish bool) error {
	for first := true; first || len(data) > 0; first = false {
		n := min(chunk, len(data))
		req := &bspb.WriteRequest{WriteOffset: w.offset, Data: data[:n], FinishWrite: finish && n == len(data)}
		if w.offset == 0 || first {
			req.ResourceName = w.name
		}
		if err := w.stream.Send(req); err != nil {
			return err
		}
		w.offset += int64(n)
		data = data[n:]
	}
	return nil
}

func (w *writer) close() (*bspb.WriteResponse, error) { return w.stream.CloseAndRecv() }

// upload writes data under name in one stream.
func (e *env) upload(t testing.TB, name string, data []byte, chunk int) (*bspb.WriteResponse, error) {
	t.Helper()
	w := e.newWriter(t, testCtx(t), name, 0)
	if err := w.send(data, chunk, true); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return w.close()
}

func TestByteStreamWrite(t *testing.T) {
	data := randomBlob("write", 300<<10)
	d := digest.Compute(digest.SHA256, data)
	b3 := digest.Compute(digest.BLAKE3, data)
	sha1 := digest.Compute(digest.SHA1, data)
	tests := []struct {
		name     string
		resource string
		data     []byte
		chunk    int
		stored   digest.Digest
		code     codes.Code
		msg      string
	}{
		{"plain", "uploads/u1/blobs/" + d.ResourceSegment(), data, 64 << 10, d, codes.OK, ""},
		{"one message", "uploads/u1/blobs/" + d.ResourceSegment(), data, 1 << 20, d, codes.OK, ""},
		{"small chunks", "uploads/u1/blobs/" + d.ResourceSegment(), data, 1000, d, codes.OK, ""},
		{"multi-segment instance", "team/project/ci/uploads/u1/blobs/" + d.ResourceSegment(), data, 64 << 10, d, codes.OK, ""},
		{"blake3 segment", "uploads/u1/blobs/blake3/" + b3.Hash + "/" + fmt.Sprint(b3.Size), data, 64 << 10, b3, codes.OK, ""},
		{"sha1 inferred", "uploads/u1/blobs/" + sha1.ResourceSegment(), data, 64 << 10, sha1, codes.OK, ""},
		{"metadata after size", "uploads/u1/blobs/" + d.ResourceSegment() + "/some/metadata", data, 64 << 10, d, codes.OK, ""},

		{"too few bytes", "uploads/u1/blobs/" + d.ResourceSegment(), data[:len(data)-1], 64 << 10, d, codes.InvalidArgument, "received"},
		{"too many bytes", "uploads/u1/blobs/" + d.ResourceSegment(), append(append([]byte{}, data...), 0), 64 << 10, d, codes.InvalidArgument, "received"},
		{"hash mismatch", "uploads/u1/blobs/" + digest.Digest{Function: digest.SHA256, Hash: strings.Repeat("0", 64), Size: d.Size}.ResourceSegment(), data, 64 << 10,
			digest.Digest{Function: digest.SHA256, Hash: strings.Repeat("0", 64), Size: d.Size}, codes.InvalidArgument, "hashes to"},
		{"blake3 data under sha256 name", "uploads/u1/blobs/" + b3.Hash + "/" + fmt.Sprint(b3.Size), data, 64 << 10,
			digest.Digest{Function: digest.SHA256, Hash: b3.Hash, Size: b3.Size}, codes.InvalidArgument, "hashes to"},
		{"reserved word in instance", "main/blobs/uploads/u1/blobs/" + d.ResourceSegment(), data, 64 << 10, d, codes.InvalidArgument, "reserved word"},
		{"read name", "blobs/" + d.ResourceSegment(), data, 64 << 10, d, codes.InvalidArgument, "not an upload name"},
		{"unsupported function", "uploads/u1/blobs/md6/" + d.ResourceSegment(), data, 64 << 10, d, codes.InvalidArgument, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			resp, err := e.upload(t, tt.resource, tt.data, tt.chunk)
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, tt.msg)
				if e.has(t, tt.stored) {
					t.Errorf("blob %s stored after a failed write", tt.stored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.CommittedSize != tt.stored.Size {
				t.Errorf("committed_size %d, want %d", resp.CommittedSize, tt.stored.Size)
			}
			got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + tt.stored.ResourceSegment()})
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("reading the written blob: %d bytes, %v", len(got), err)
			}
		})
	}
}

func TestByteStreamWriteCompressed(t *testing.T) {
	data := bytes.Repeat([]byte("compressible data "), 100000)
	d := digest.Compute(digest.SHA256, data)
	b3 := digest.Compute(digest.BLAKE3, data)
	tests := []struct {
		name       string
		resource   string
		compressed []byte
		chunk      int
		stored     digest.Digest
		code       codes.Code
		msg        string
	}{
		{"zstd", "uploads/u/compressed-blobs/zstd/" + d.ResourceSegment(), zstdCompress(t, data), 16 << 10, d, codes.OK, ""},
		{"zstd one message", "i/uploads/u/compressed-blobs/zstd/" + d.ResourceSegment(), zstdCompress(t, data), 4 << 20, d, codes.OK, ""},
		{"zstd blake3", "uploads/u/compressed-blobs/zstd/blake3/" + b3.Hash + "/" + fmt.Sprint(b3.Size), zstdCompress(t, data), 1000, b3, codes.OK, ""},
		{"not zstd", "uploads/u/compressed-blobs/zstd/" + d.ResourceSegment(), data[:5000], 1000, d, codes.InvalidArgument, "zstd"},
		{"decompresses short", "uploads/u/compressed-blobs/zstd/" + d.ResourceSegment(), zstdCompress(t, data[1:]), 1000, d, codes.InvalidArgument, "received"},
		{"decompresses long", "uploads/u/compressed-blobs/zstd/" + d.ResourceSegment(), zstdCompress(t, append([]byte("x"), data...)), 1000, d, codes.InvalidArgument, "received"},
		{"hash mismatch", "uploads/u/compressed-blobs/zstd/" + d.ResourceSegment(), zstdCompress(t, bytes.ToUpper(data)), 1000, d, codes.InvalidArgument, "hashes to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			resp, err := e.upload(t, tt.resource, tt.compressed, tt.chunk)
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, tt.msg)
				if e.has(t, tt.stored) {
					t.Errorf("blob %s stored after a failed write", tt.stored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// committed_size of a finished compressed write counts the
			// compressed bytes received, which is what Bazel checks.
			if resp.CommittedSize != int64(len(tt.compressed)) {
				t.Errorf("committed_size %d, want %d", resp.CommittedSize, len(tt.compressed))
			}
			if !e.has(t, tt.stored) {
				t.Fatalf("blob %s not stored", tt.stored)
			}
			got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + tt.stored.ResourceSegment()})
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("reading the written blob: %d bytes, %v", len(got), err)
			}
		})
	}
}

// TestByteStreamWriteExisting checks that an upload of a blob the CAS holds
// finishes at once, after its first message.
func TestByteStreamWriteExisting(t *testing.T) {
	data := randomBlob("existing", 1<<20)
	tests := []struct {
		name     string
		resource func(d digest.Digest) string
		first    []byte
		want     int64 // -1 for compressed uploads; else the size
	}{
		{"plain", func(d digest.Digest) string { return "uploads/u/blobs/" + d.ResourceSegment() }, data[:1000], int64(len(data))},
		{"compressed", func(d digest.Digest) string { return "uploads/u/compressed-blobs/zstd/" + d.ResourceSegment() }, zstdCompress(t, data)[:100], -1},
		{"empty blob", func(d digest.Digest) string {
			return "uploads/u/blobs/" + digest.Empty(digest.SHA256).ResourceSegment()
		}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			d := e.put(t, digest.SHA256, data)
			w := e.newWriter(t, testCtx(t), tt.resource(d), 0)
			if err := w.send(tt.first, len(tt.first)+1, false); err != nil {
				t.Fatal(err)
			}
			// The client has not finished; the server answers anyway.
			resp, err := w.close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.CommittedSize != tt.want {
				t.Errorf("committed_size %d, want %d", resp.CommittedSize, tt.want)
			}
		})
	}
}

// waitCommitted polls QueryWriteStatus until the server holds want bytes
// of the upload. It waits for a condition, not for a time.
func (e *env) waitCommitted(t *testing.T, ctx context.Context, name string, want int64) {
	t.Helper()
	for {
		st, err := e.bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
		if err == nil && st.CommittedSize == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the server never held %d bytes of %s: %v %v", want, name, st, err)
		}
	}
}

func TestByteStreamResumableWrite(t *testing.T) {
	data := randomBlob("resumable", 2<<20)
	d := digest.Compute(digest.SHA256, data)
	name := "inst/uploads/3f1d4a4e/blobs/" + d.ResourceSegment()
	tests := []struct {
		name   string
		resume func(committed int64) int64 // offset of the resuming stream
		code   codes.Code
	}{
		{"resume at committed size", func(c int64) int64 { return c }, codes.OK},
		{"resume earlier: resent bytes are skipped", func(c int64) int64 { return c - 1000 }, codes.OK},
		{"restart at zero", func(int64) int64 { return 0 }, codes.OK},
		{"resume past committed size", func(c int64) int64 { return c + 1 }, codes.InvalidArgument},
	}
	// On the memory store, and on the disk store (the blob has a
	// temporary file) with two request sizes.
	for _, tt := range tests {
		for _, c := range []struct {
			disk  bool
			chunk int
		}{{false, 64 << 10}, {true, 64 << 10}, {true, 512 << 10}} {
			store := "memory"
			if c.disk {
				store = "disk"
			}
			t.Run(fmt.Sprintf("%s/%s/chunk=%dKiB", tt.name, store, c.chunk>>10), func(t *testing.T) {
				var s blobstore.Store
				if c.disk {
					s = diskStore(t)
				}
				testResumableWrite(t, s, data, name, c.chunk, tt.resume, tt.code)
			})
		}
	}
}

// testResumableWrite writes the first half of data under name in
// requests of chunk bytes, breaks the stream, and resumes at the offset
// resume returns, expecting code.
func testResumableWrite(t *testing.T, store blobstore.Store, data []byte, name string, chunk int, resume func(committed int64) int64, code codes.Code) {
	d := digest.Compute(digest.SHA256, data)
	half := int64(len(data) / 2)
	e := newEnv(t, store, defaultOptions())
	// Write half, make sure the server has it, then break the stream.
	ctx, cancel := context.WithCancel(testCtx(t))
	w := e.newWriter(t, ctx, name, 0)
	if err := w.send(data[:half], chunk, false); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(t, testCtx(t), name, half)
	cancel()
	if _, err := w.close(); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled stream ended with %v", err)
	}
	st, err := e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: name})
	if err != nil {
		t.Fatal(err)
	}
	if st.CommittedSize != half || st.Complete {
		t.Fatalf("QueryWriteStatus = %v, want committed_size %d, not complete", st, half)
	}
	if e.has(t, d) {
		t.Fatal("half a blob is visible")
	}

	off := resume(st.CommittedSize)
	w = e.newWriter(t, testCtx(t), name, off)
	sendErr := w.send(data[off:], chunk, true)
	resp, err := w.close()
	if code != codes.OK {
		wantCode(t, err, code, "write_offset")
		// The kept bytes survive a bad resumption attempt.
		st, err := e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: name})
		if err != nil || st.CommittedSize != half {
			t.Errorf("after a bad resume QueryWriteStatus = %v, %v; want %d", st, err, half)
		}
		return
	}
	if sendErr != nil || err != nil {
		t.Fatalf("resuming: %v, %v", sendErr, err)
	}
	if resp.CommittedSize != d.Size {
		t.Errorf("committed_size %d, want %d", resp.CommittedSize, d.Size)
	}
	got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment()})
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the resumed blob: %d bytes, %v", len(got), err)
	}
	st, err = e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: name})
	if err != nil || !st.Complete || st.CommittedSize != d.Size {
		t.Errorf("QueryWriteStatus after completion = %v, %v", st, err)
	}
}

// diskStore is a disk store in a temporary directory.
func diskStore(t *testing.T) *blobstore.Disk {
	t.Helper()
	s, err := blobstore.NewDisk(t.TempDir(), blobstore.DiskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestByteStreamEndWithoutFinish checks that a stream closed without
// finish_write is an error whose bytes are kept for resumption.
func TestByteStreamEndWithoutFinish(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	data := randomBlob("unfinished", 100000)
	d := digest.Compute(digest.SHA256, data)
	name := "uploads/u/blobs/" + d.ResourceSegment()
	w := e.newWriter(t, testCtx(t), name, 0)
	if err := w.send(data[:40000], 10000, false); err != nil {
		t.Fatal(err)
	}
	_, err := w.close()
	wantCode(t, err, codes.InvalidArgument, "finish_write")
	st, err := e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: name})
	if err != nil || st.CommittedSize != 40000 {
		t.Fatalf("QueryWriteStatus = %v, %v; want 40000", st, err)
	}
	w = e.newWriter(t, testCtx(t), name, 40000)
	if err := w.send(data[40000:], 10000, true); err != nil {
		t.Fatal(err)
	}
	if resp, err := w.close(); err != nil || resp.CommittedSize != d.Size {
		t.Fatalf("finishing: %v, %v", resp, err)
	}
}

func TestByteStreamWriteBadStreams(t *testing.T) {
	data := randomBlob("bad", 10000)
	d := digest.Compute(digest.SHA256, data)
	name := "uploads/u/blobs/" + d.ResourceSegment()
	tests := []struct {
		name string
		reqs []*bspb.WriteRequest
		msg  string
	}{
		{"no requests", nil, "before its first request"},
		{"first offset not zero", []*bspb.WriteRequest{{ResourceName: name, WriteOffset: 5, Data: data[5:], FinishWrite: true}}, "write_offset 5"},
		{"offset skips ahead", []*bspb.WriteRequest{
			{ResourceName: name, Data: data[:100]},
			{WriteOffset: 200, Data: data[200:], FinishWrite: true},
		}, "write_offset 200"},
		{"offset goes back", []*bspb.WriteRequest{
			{ResourceName: name, Data: data[:100]},
			{WriteOffset: 50, Data: data[50:], FinishWrite: true},
		}, "write_offset 50"},
		{"resource name changes", []*bspb.WriteRequest{
			{ResourceName: name, Data: data[:100]},
			{ResourceName: "uploads/other/blobs/" + d.ResourceSegment(), WriteOffset: 100, Data: data[100:], FinishWrite: true},
		}, "resource_name changed"},
		{"no resource name", []*bspb.WriteRequest{{Data: data, FinishWrite: true}}, "not an upload name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			stream, err := e.bs.Write(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.reqs {
				if err := stream.Send(r); err != nil {
					break // the server already answered
				}
			}
			_, err = stream.CloseAndRecv()
			wantCode(t, err, codes.InvalidArgument, tt.msg)
			if e.has(t, d) {
				t.Error("blob stored by a bad stream")
			}
		})
	}
}

func TestByteStreamConcurrentWrites(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprint("compressed=", compressed), func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			data := randomBlob("concurrent", 1<<20)
			d := digest.Compute(digest.SHA256, data)
			payload := data
			if compressed {
				payload = zstdCompress(t, data)
			}
			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("uploads/uuid-%d/blobs/%s", i, d.ResourceSegment())
					if compressed {
						name = fmt.Sprintf("uploads/uuid-%d/compressed-blobs/zstd/%s", i, d.ResourceSegment())
					}
					resp, err := e.upload(t, name, payload, 32<<10)
					switch {
					case err != nil:
						errs[i] = err
					case !compressed && resp.CommittedSize != d.Size:
						errs[i] = fmt.Errorf("committed_size %d, want %d", resp.CommittedSize, d.Size)
					case compressed && resp.CommittedSize != -1 && resp.CommittedSize != int64(len(payload)):
						errs[i] = fmt.Errorf("committed_size %d, want -1 or %d", resp.CommittedSize, len(payload))
					}
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
				}
			}
			got, _, err := e.read(testCtx(t), &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment()})
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("reading the blob: %d bytes, %v", len(got), err)
			}
		})
	}
}

// TestByteStreamSameUploadName checks that two streams with one upload
// name (a client bug, but possible on retries) take turns without harm.
func TestByteStreamSameUploadName(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	data := randomBlob("same name", 512<<10)
	d := digest.Compute(digest.SHA256, data)
	name := "uploads/same/blobs/" + d.ResourceSegment()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.upload(t, name, data, 16<<10)
			if err == nil && resp.CommittedSize != d.Size {
				err = fmt.Errorf("committed_size %d", resp.CommittedSize)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("stream %d: %v", i, err)
		}
	}
	if !e.has(t, d) {
		t.Error("blob not stored")
	}
}

func TestQueryWriteStatus(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	present := e.put(t, digest.SHA256, []byte("present"))
	absent := digest.Compute(digest.SHA256, []byte("absent"))
	tests := []struct {
		name     string
		resource string
		want     *bspb.QueryWriteStatusResponse
		code     codes.Code
	}{
		{"unknown upload", "uploads/nobody/blobs/" + absent.ResourceSegment(), nil, codes.NotFound},
		{"blob already present", "uploads/nobody/blobs/" + present.ResourceSegment(), &bspb.QueryWriteStatusResponse{CommittedSize: present.Size, Complete: true}, codes.OK},
		{"compressed name, blob present", "uploads/x/compressed-blobs/zstd/" + present.ResourceSegment(), &bspb.QueryWriteStatusResponse{CommittedSize: present.Size, Complete: true}, codes.OK},
		{"empty blob", "uploads/x/blobs/" + digest.Empty(digest.SHA256).ResourceSegment(), &bspb.QueryWriteStatusResponse{CommittedSize: 0, Complete: true}, codes.OK},
		{"read name", "blobs/" + absent.ResourceSegment(), nil, codes.InvalidArgument},
		{"bad instance", "a/../uploads/x/blobs/" + absent.ResourceSegment(), nil, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: tt.resource})
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.CommittedSize != tt.want.CommittedSize || got.Complete != tt.want.Complete {
				t.Errorf("QueryWriteStatus = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestByteStreamUploadExpiry checks that an interrupted upload is dropped
// once it has been idle for longer than UploadIdle.
func TestByteStreamUploadExpiry(t *testing.T) {
	opts := defaultOptions()
	opts.UploadIdle = time.Nanosecond // anything idle at the next upload is expired
	e := newEnv(t, nil, opts)
	data := randomBlob("expiry", 100000)
	d := digest.Compute(digest.SHA256, data)
	name := "uploads/old/blobs/" + d.ResourceSegment()
	w := e.newWriter(t, testCtx(t), name, 0)
	if err := w.send(data[:50000], 10000, false); err != nil {
		t.Fatal(err)
	}
	if _, err := w.close(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unfinished stream: %v", err)
	}
	if _, err := e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: name}); err != nil {
		t.Fatalf("the interrupted upload is not kept: %v", err)
	}
	// Another upload starts: the idle one is expired.
	other := []byte("another blob")
	if _, err := e.upload(t, "uploads/new/blobs/"+digest.Compute(digest.SHA256, other).ResourceSegment(), other, 100); err != nil {
		t.Fatal(err)
	}
	_, err := e.bs.QueryWriteStatus(testCtx(t), &bspb.QueryWriteStatusRequest{ResourceName: name})
	wantCode(t, err, codes.NotFound, "start a new Write")
}

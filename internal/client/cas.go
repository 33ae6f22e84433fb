package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

const (
	// SmallBlobLimit is the largest blob a Writer from CAS.Create buffers
	// and sends with BatchUpdateBlobs; larger blobs are streamed with
	// ByteStream Write.
	SmallBlobLimit = 1 << 20
	// ChunkSize is the data size of one ByteStream WriteRequest.
	ChunkSize = 1 << 20
	// findMissingChunk bounds the digests in one FindMissingBlobs call
	// (about 100 bytes each, so well under any message limit).
	findMissingChunk = 10000
	// batchOverhead is what a batch message spends per blob besides its
	// data (digest, status, framing), counted against the batch limit.
	batchOverhead = 256
	// parallelCalls bounds the concurrent calls of PutMany and GetMany.
	parallelCalls = 4
)

// CAS is a client of a REAPI server's ContentAddressableStorage and
// ByteStream services for one instance and one digest function. It
// implements blobstore.Store, so code written against a local store can
// run against a remote one. A CAS is safe for concurrent use.
//
// All data is verified: uploads are hashed before they are committed and
// whole-blob downloads are hashed as they are read, so a mismatch surfaces
// as a *blobstore.MismatchError.
type CAS struct {
	cas      repb.ContentAddressableStorageClient
	bs       bspb.ByteStreamClient
	instance string
	fn       digest.Function
	maxBatch int64

	// join shares BatchUpdateBlobs calls among concurrent PutNew calls.
	join joiner

	// skipLocalVerify lets tests send wrong data to see the server's error.
	skipLocalVerify bool
}

var _ blobstore.Store = (*CAS)(nil)

// NewCAS returns a CAS client over conn for the given instance name and
// digest function. maxBatch bounds the bytes of one batch call; pass the
// server's max_batch_total_size_bytes (see BatchLimit), or 0 for
// DefaultMaxBatch.
func NewCAS(conn *grpc.ClientConn, instance string, fn digest.Function, maxBatch int64) *CAS {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	return &CAS{
		cas:      repb.NewContentAddressableStorageClient(conn),
		bs:       bspb.NewByteStreamClient(conn),
		instance: instance,
		fn:       fn,
		maxBatch: maxBatch,
	}
}

// Instance is the instance name the CAS talks to.
func (c *CAS) Instance() string { return c.instance }

// Function is the digest function of the CAS.
func (c *CAS) Function() digest.Function { return c.fn }

// check rejects digests the CAS cannot handle.
func (c *CAS) check(d digest.Digest) error {
	if d.Function != c.fn {
		return fmt.Errorf("blob %s uses digest function %s, but this CAS client was created for %s; use one client per digest function", d, digest.Name(d.Function), digest.Name(c.fn))
	}
	if d.Size < 0 {
		return fmt.Errorf("blob %s has a negative size", d)
	}
	return nil
}

func (c *CAS) prefix() string {
	if c.instance == "" {
		return ""
	}
	return c.instance + "/"
}

// readResource is the ByteStream Read name of d.
func (c *CAS) readResource(d digest.Digest) string {
	return c.prefix() + "blobs/" + d.ResourceSegment()
}

// writeResource is a fresh ByteStream Write name for d.
func (c *CAS) writeResource(d digest.Digest) string {
	return c.prefix() + "uploads/" + NewUUID() + "/blobs/" + d.ResourceSegment()
}

// FindMissing implements blobstore.Store with FindMissingBlobs calls of at
// most 10,000 digests each. The empty blob is never reported missing.
func (c *CAS) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	var missing []digest.Digest
	req := &repb.FindMissingBlobsRequest{InstanceName: c.instance, DigestFunction: c.fn}
	flush := func() error {
		if len(req.BlobDigests) == 0 {
			return nil
		}
		resp, err := c.cas.FindMissingBlobs(ctx, req)
		if err != nil {
			return fmt.Errorf("FindMissingBlobs of %d blobs: %w", len(req.BlobDigests), err)
		}
		for _, pd := range resp.MissingBlobDigests {
			d, err := digest.FromProto(c.fn, pd)
			if err != nil {
				return fmt.Errorf("FindMissingBlobs: the server answered with an invalid digest: %w", err)
			}
			missing = append(missing, d)
		}
		req.BlobDigests = req.BlobDigests[:0]
		return nil
	}
	for _, d := range ds {
		if err := c.check(d); err != nil {
			return nil, err
		}
		if d.IsEmpty() {
			continue
		}
		req.BlobDigests = append(req.BlobDigests, d.Proto())
		if len(req.BlobDigests) == findMissingChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return missing, nil
}

// Open implements blobstore.Store with ByteStream Read. A blob that is not
// in the CAS yields an error wrapping blobstore.ErrNotFound. Reading a
// whole blob (offset 0) verifies its digest; the reader then returns a
// *blobstore.MismatchError instead of io.EOF if the data is wrong. The
// reader must be closed; ctx bounds the whole read.
func (c *CAS) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	if err := c.check(d); err != nil {
		return nil, err
	}
	if offset < 0 || offset > d.Size {
		return nil, fmt.Errorf("reading blob %s: offset %d is outside the blob (size %d)", d, offset, d.Size)
	}
	if d.IsEmpty() {
		return io.NopCloser(&emptyReader{}), nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.bs.Read(ctx, &bspb.ReadRequest{ResourceName: c.readResource(d), ReadOffset: offset})
	if err != nil {
		cancel()
		return nil, c.readError(d, err)
	}
	r := &blobReader{stream: stream, cancel: cancel, c: c, d: d, remaining: d.Size - offset}
	if offset == 0 {
		r.h = digest.NewHasher(d.Function)
	}
	// Receive the first message now, so that a missing blob is reported
	// by Open, as blobstore.Store promises.
	r.fill()
	if r.err != nil && r.err != io.EOF {
		err := r.err
		r.Close()
		return nil, err
	}
	return r, nil
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

// readError describes a failed ByteStream Read of d.
func (c *CAS) readError(d digest.Digest, err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("blob %s is not in the CAS of instance %q: %w", d, c.instance, blobstore.ErrNotFound)
	}
	return fmt.Errorf("reading blob %s: %w", d, err)
}

// blobReader reads a ByteStream Read stream, checking the length and,
// when reading from offset 0, the digest.
type blobReader struct {
	stream    bspb.ByteStream_ReadClient
	cancel    context.CancelFunc
	c         *CAS
	d         digest.Digest
	remaining int64     // bytes still expected from the server
	h         hash.Hash // nil unless the whole blob is read
	buf       []byte
	err       error // sticky; io.EOF at a verified end
}

// fill receives one message into r.buf or sets r.err.
func (r *blobReader) fill() {
	resp, err := r.stream.Recv()
	if err == io.EOF {
		r.err = r.finish()
		return
	}
	if err != nil {
		r.err = r.c.readError(r.d, err)
		return
	}
	if int64(len(resp.Data)) > r.remaining {
		r.err = fmt.Errorf("reading blob %s: the server sent more bytes than the blob's size %d; the server is faulty", r.d, r.d.Size)
		return
	}
	r.remaining -= int64(len(resp.Data))
	if r.h != nil {
		r.h.Write(resp.Data)
	}
	r.buf = resp.Data
}

// finish checks the data once the server has ended the stream.
func (r *blobReader) finish() error {
	if r.remaining > 0 {
		return fmt.Errorf("reading blob %s: the server ended the stream %d bytes short of the blob's end: %w", r.d, r.remaining, io.ErrUnexpectedEOF)
	}
	if r.h != nil {
		if got := digest.HexOf(r.h.Sum(nil)); got != r.d.Hash {
			return &blobstore.MismatchError{Want: r.d, Got: digest.Digest{Function: r.d.Function, Hash: got, Size: r.d.Size}}
		}
	}
	return io.EOF
}

// Read implements io.Reader.
func (r *blobReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.fill()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close ends the read stream.
func (r *blobReader) Close() error {
	r.cancel()
	return nil
}

// Create implements blobstore.Store. Blobs of up to SmallBlobLimit bytes
// (and within the batch limit) are buffered and sent with
// BatchUpdateBlobs on Commit; larger ones are streamed with ByteStream
// Write in ChunkSize pieces, the last one with finish_write on Commit. If
// the server already has the blob it may end the upload early; the rest of
// the data is then only hashed. ctx bounds the whole upload.
func (c *CAS) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	if err := c.check(d); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &casWriter{c: c, ctx: ctx, cancel: cancel, d: d, h: digest.NewHasher(d.Function)}
	w.small = d.Size <= SmallBlobLimit && d.Size+batchOverhead <= c.maxBatch
	if w.small {
		w.buf = make([]byte, 0, d.Size)
	} else {
		w.buf = make([]byte, 0, ChunkSize)
	}
	return w, nil
}

// casWriter is the blobstore.Writer of CAS.Create.
type casWriter struct {
	c      *CAS
	ctx    context.Context
	cancel context.CancelFunc
	d      digest.Digest
	h      hash.Hash
	small  bool
	n      int64  // bytes written by the caller
	buf    []byte // small: the whole blob; large: the chunk not yet sent

	stream   bspb.ByteStream_WriteClient // large blobs; opened on the first send
	resource string
	sent     int64 // bytes sent on stream
	present  bool  // the server ended the upload early: it has the blob

	committed bool
	closed    bool
	err       error // sticky: a failed send ends the upload
}

// Write implements io.Writer.
func (w *casWriter) Write(p []byte) (int, error) {
	if w.committed || w.closed {
		return 0, fmt.Errorf("writing blob %s: the writer is already committed or closed", w.d)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.n+int64(len(p)) > w.d.Size {
		return 0, &blobstore.MismatchError{Want: w.d, Got: digest.Digest{Function: w.d.Function, Size: w.n + int64(len(p))}}
	}
	w.h.Write(p)
	w.n += int64(len(p))
	if w.small {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	written := len(p)
	for len(p) > 0 && !w.present {
		// A full chunk is sent only once more data follows, so that the
		// last chunk can carry finish_write.
		if len(w.buf) == ChunkSize {
			if err := w.send(false); err != nil {
				w.err = err
				return 0, err
			}
			continue
		}
		k := min(len(p), ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
	}
	return written, nil
}

// Written implements blobstore.Writer.
func (w *casWriter) Written() int64 { return w.n }

// send sends the buffered chunk on the write stream.
func (w *casWriter) send(finish bool) error {
	if w.stream == nil {
		var err error
		w.resource = w.c.writeResource(w.d)
		if w.stream, err = w.c.bs.Write(w.ctx); err != nil {
			return w.writeError(err)
		}
	}
	req := &bspb.WriteRequest{WriteOffset: w.sent, Data: w.buf, FinishWrite: finish}
	if w.sent == 0 {
		req.ResourceName = w.resource
	}
	err := w.stream.Send(req)
	if err == io.EOF {
		// The server ended the stream: either it has the blob already
		// (early completion), or it failed; CloseAndRecv tells which.
		return w.closeAndCheck()
	}
	if err != nil {
		return w.writeError(err)
	}
	w.sent += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// closeAndCheck receives the WriteResponse and checks that the whole blob
// is committed.
func (w *casWriter) closeAndCheck() error {
	resp, err := w.stream.CloseAndRecv()
	if err != nil {
		return w.writeError(err)
	}
	// -1 is what servers answer for an early-completed compressed upload.
	if resp.CommittedSize != w.d.Size && resp.CommittedSize != -1 {
		return fmt.Errorf("uploading blob %s: the server committed %d bytes, not the blob's %d; upload it again", w.d, resp.CommittedSize, w.d.Size)
	}
	w.present = true
	w.buf = w.buf[:0]
	return nil
}

func (w *casWriter) writeError(err error) error {
	return fmt.Errorf("uploading blob %s with ByteStream Write: %w", w.d, err)
}

// verify checks the written data against the digest.
func (w *casWriter) verify() error {
	if w.n != w.d.Size {
		return &blobstore.MismatchError{Want: w.d, Got: digest.Digest{Function: w.d.Function, Size: w.n}}
	}
	if got := digest.HexOf(w.h.Sum(nil)); got != w.d.Hash {
		return &blobstore.MismatchError{Want: w.d, Got: digest.Digest{Function: w.d.Function, Hash: got, Size: w.n}}
	}
	return nil
}

// Commit implements blobstore.Writer: it verifies the data, then uploads
// the buffered blob or finishes the stream.
func (w *casWriter) Commit() error {
	if w.committed {
		return nil
	}
	if w.closed {
		return fmt.Errorf("committing blob %s: the writer is already closed", w.d)
	}
	if w.err != nil {
		return w.err
	}
	if !w.c.skipLocalVerify {
		if err := w.verify(); err != nil {
			w.Close()
			return err
		}
	}
	var err error
	switch {
	case w.d.IsEmpty() && w.n == 0:
		// The empty blob is always present.
	case w.small:
		err = w.c.batchUpdate(w.ctx, []digest.Digest{w.d}, map[digest.Digest][]byte{w.d: w.buf})
	case !w.present:
		if err = w.send(true); err == nil && !w.present {
			err = w.closeAndCheck()
		}
	}
	if err != nil {
		w.Close()
		return err
	}
	w.committed = true
	w.buf = nil
	w.cancel()
	return nil
}

// Close implements blobstore.Writer. Without a Commit it abandons the
// upload.
func (w *casWriter) Close() error {
	if !w.committed {
		w.closed = true
		w.buf = nil
	}
	w.cancel()
	return nil
}

// batchUpdate uploads blobs ds (which must fit one batch) with
// BatchUpdateBlobs and checks every blob's status.
func (c *CAS) batchUpdate(ctx context.Context, ds []digest.Digest, data map[digest.Digest][]byte) error {
	req := &repb.BatchUpdateBlobsRequest{InstanceName: c.instance, DigestFunction: c.fn}
	var total int64
	for _, d := range ds {
		req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: d.Proto(), Data: data[d]})
		total += d.Size
	}
	resp, err := c.cas.BatchUpdateBlobs(ctx, req)
	if err != nil {
		if len(ds) == 1 {
			return fmt.Errorf("uploading blob %s with BatchUpdateBlobs: %w", ds[0], err)
		}
		return fmt.Errorf("uploading %d blobs (%d bytes) with BatchUpdateBlobs: %w", len(ds), total, err)
	}
	statuses := make(map[digest.Digest]*status.Status, len(resp.Responses))
	for _, r := range resp.Responses {
		d, err := digest.FromProto(c.fn, r.Digest)
		if err != nil {
			return fmt.Errorf("BatchUpdateBlobs: the server answered with an invalid digest: %w", err)
		}
		statuses[d] = status.FromProto(r.Status)
	}
	return batchErrors("stored", ds, func(d digest.Digest) error {
		st, ok := statuses[d]
		if !ok {
			return errMissingStatus
		}
		return st.Err()
	})
}

// batchErrors checks the outcome of each of ds and summarises the failures
// as one error that wraps the first.
func batchErrors(verb string, ds []digest.Digest, outcome func(digest.Digest) error) error {
	var first error
	var firstD digest.Digest
	failed := 0
	for _, d := range ds {
		if err := outcome(d); err != nil {
			if failed == 0 {
				first, firstD = err, d
			}
			failed++
		}
	}
	switch {
	case failed == 0:
		return nil
	case len(ds) == 1:
		return fmt.Errorf("blob %s was not %s: %w", firstD, verb, first)
	default:
		return fmt.Errorf("%d of %d blobs were not %s; the first, %s: %w", failed, len(ds), verb, firstD, first)
	}
}

// packBatches groups ds, sorted by size, into batches whose data plus
// per-blob overhead fit maxBatch. Blobs too large for any batch are
// returned separately.
func packBatches(ds []digest.Digest, maxBatch int64) (batches [][]digest.Digest, large []digest.Digest) {
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b digest.Digest) int {
		return cmp.Or(cmp.Compare(a.Size, b.Size), cmp.Compare(a.Hash, b.Hash))
	})
	var cur []digest.Digest
	var curSize int64
	for _, d := range ds {
		cost := d.Size + batchOverhead
		if cost > maxBatch {
			large = append(large, d)
			continue
		}
		if curSize+cost > maxBatch {
			batches = append(batches, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, d)
		curSize += cost
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches, large
}

// PutMany uploads blobs: it asks which the server lacks (FindMissingBlobs),
// sends those in BatchUpdateBlobs calls within the batch limit and streams
// any too large for a batch with ByteStream Write. Every blob's data is
// checked against its digest first.
func (c *CAS) PutMany(ctx context.Context, blobs map[digest.Digest][]byte) error {
	return c.putMany(ctx, blobs, true)
}

// PutNew is PutMany without the FindMissingBlobs call, for blobs the
// caller knows the server lacks (for example the Command of an action
// made unique): one BatchUpdateBlobs call uploads up to the batch limit.
// Blobs that fit one call may share it with those of concurrent PutNew
// calls (see joiner). Data is not re-hashed: the caller computed the
// digests.
func (c *CAS) PutNew(ctx context.Context, blobs map[digest.Digest][]byte) error {
	if size, ok := c.joinable(blobs); ok {
		return c.putJoined(ctx, blobs, size)
	}
	return c.putMany(ctx, blobs, false)
}

func (c *CAS) putMany(ctx context.Context, blobs map[digest.Digest][]byte, findMissing bool) error {
	ds := make([]digest.Digest, 0, len(blobs))
	for d, data := range blobs {
		if err := c.check(d); err != nil {
			return err
		}
		if findMissing && !c.skipLocalVerify {
			if got := digest.Compute(d.Function, data); got != d {
				return &blobstore.MismatchError{Want: d, Got: got}
			}
		}
		ds = append(ds, d)
	}
	missing := ds
	if findMissing {
		var err error
		if missing, err = c.FindMissing(ctx, ds); err != nil {
			return err
		}
	}
	batches, large := packBatches(missing, c.maxBatch)
	return runParallel(ctx, len(batches)+len(large), func(ctx context.Context, i int) error {
		if i < len(batches) {
			return c.batchUpdate(ctx, batches[i], blobs)
		}
		d := large[i-len(batches)]
		return blobstore.Put(ctx, c, d, blobs[d])
	})
}

// GetMany downloads blobs ds, in BatchReadBlobs calls within the batch
// limit and with ByteStream Read for blobs too large for a batch (GetBatch).
// Every blob is checked against its digest. If any blob is missing the
// error wraps blobstore.ErrNotFound. On error the map is nil.
func (c *CAS) GetMany(ctx context.Context, ds []digest.Digest) (map[digest.Digest][]byte, error) {
	for _, d := range ds {
		if err := c.check(d); err != nil {
			return nil, err
		}
	}
	data, errs := make([][]byte, len(ds)), make([]error, len(ds))
	c.GetBatch(ctx, ds, data, errs)
	out := make(map[digest.Digest][]byte, len(ds))
	failed := make(map[digest.Digest]error)
	var distinct []digest.Digest
	for i, d := range ds {
		if _, seen := out[d]; seen || failed[d] != nil {
			continue
		}
		distinct = append(distinct, d)
		if errs[i] != nil {
			failed[d] = errs[i]
		} else {
			out[d] = data[i]
		}
	}
	if err := batchErrors("read", distinct, func(d digest.Digest) error { return failed[d] }); err != nil {
		return nil, err
	}
	return out, nil
}

// batchReadEach reads blobs ds (which must fit one batch) with one
// BatchReadBlobs call: the blobs read, checked against their digests, and
// why each other blob was not (wrapping blobstore.ErrNotFound for a missing
// one). The error is the call's own failure.
func (c *CAS) batchReadEach(ctx context.Context, ds []digest.Digest) (map[digest.Digest][]byte, map[digest.Digest]error, error) {
	req := &repb.BatchReadBlobsRequest{InstanceName: c.instance, DigestFunction: c.fn}
	for _, d := range ds {
		req.Digests = append(req.Digests, d.Proto())
	}
	resp, err := c.cas.BatchReadBlobs(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %d blobs with BatchReadBlobs: %w", len(ds), err)
	}
	got := make(map[digest.Digest][]byte, len(ds))
	errs := make(map[digest.Digest]error)
	for _, r := range resp.Responses {
		d, err := digest.FromProto(c.fn, r.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("BatchReadBlobs: the server answered with an invalid digest: %w", err)
		}
		switch st := status.FromProto(r.Status); {
		case st.Code() == codes.NotFound:
			errs[d] = fmt.Errorf("it is not in the CAS of instance %q: %w", c.instance, blobstore.ErrNotFound)
		case st.Code() != codes.OK:
			errs[d] = st.Err()
		case r.Compressor != repb.Compressor_IDENTITY:
			errs[d] = fmt.Errorf("the server sent it compressed with %s although the client accepts no compression; the server is faulty", r.Compressor)
		default:
			if sum := digest.Compute(d.Function, r.Data); sum != d {
				errs[d] = &blobstore.MismatchError{Want: d, Got: sum}
			} else {
				got[d] = r.Data
			}
		}
	}
	for _, d := range ds {
		if _, ok := got[d]; !ok && errs[d] == nil {
			errs[d] = errors.New("the server's BatchReadBlobs response does not mention it")
		}
	}
	return got, errs, nil
}

// runParallel calls fn(ctx, i) for i in [0, n), at most parallelCalls at
// a time. The first error cancels the calls still running and is returned.
func runParallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	sem := make(chan struct{}, parallelCalls)
loop:
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil {
		return parent.Err()
	}
	return first
}

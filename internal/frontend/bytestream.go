package frontend

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/logstream"
)

// Read implements ByteStream Read for blobs/ and compressed-blobs/zstd/.
func (s *Server) Read(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	if logstream.Is(req.ResourceName) {
		return s.opts.LogStreams.ReadLog(req, stream)
	}
	res, err := digest.ParseReadResource(req.ResourceName)
	if err != nil {
		return storeError(err, "")
	}
	d := res.Digest
	if err := checkReadRange(req, res); err != nil {
		return err
	}
	r, err := blobstore.OpenRange(stream.Context(), s.cas, d, req.ReadOffset, req.ReadLimit)
	if errors.Is(err, blobstore.ErrNotFound) {
		r, err = s.openChunked(stream.Context(), d, req.ReadOffset, req.ReadLimit)
	}
	if err != nil {
		return storeError(err, "blob "+d.String())
	}
	defer r.Close()
	remaining := d.Size - req.ReadOffset
	if req.ReadLimit > 0 && req.ReadLimit < remaining {
		remaining = req.ReadLimit
	}
	chunk := s.opts.ReadChunkSize
	switch {
	case res.Compressor == repb.Compressor_ZSTD:
		return sendCompressed(stream, r, d, remaining, chunk)
	case remaining == 0:
		return nil
	case remaining <= int64(chunk):
		buf := make([]byte, remaining)
		if _, err := io.ReadFull(r, buf); err != nil {
			return status.Errorf(codes.Internal, "reading blob %s: %v", d, err)
		}
		return stream.Send(&bspb.ReadResponse{Data: buf})
	default:
		return sendChunks(stream, r, d, remaining, chunk)
	}
}

// checkReadRange refuses a read offset or limit outside the blob, and a
// limit on a compressed read.
func checkReadRange(req *bspb.ReadRequest, res digest.Resource) error {
	d := res.Digest
	if req.ReadOffset < 0 || req.ReadOffset > d.Size {
		return status.Errorf(codes.OutOfRange, "read_offset %d is outside blob %s (size %d)", req.ReadOffset, d, d.Size)
	}
	if req.ReadLimit < 0 {
		return invalid("read_limit %d is negative; use 0 for no limit", req.ReadLimit)
	}
	if res.Compressor != repb.Compressor_IDENTITY && req.ReadLimit != 0 {
		return invalid("read_limit must be 0 when reading compressed-blobs (the limit would cut a compressed stream)")
	}
	return nil
}

// sendCompressed sends the next remaining bytes of r zstd-compressed, in
// messages of about chunk bytes.
func sendCompressed(stream bspb.ByteStream_ReadServer, r io.Reader, d digest.Digest, remaining int64, chunk int) error {
	cw := &chunkSender{stream: stream, size: chunk}
	enc, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return status.Errorf(codes.Internal, "starting zstd encoder: %v", err)
	}
	if _, err := io.Copy(enc, io.LimitReader(r, remaining)); err != nil {
		enc.Close()
		return storeError(err, "reading blob "+d.String())
	}
	if err := enc.Close(); err != nil {
		return storeError(err, "compressing blob "+d.String())
	}
	return cw.flush()
}

// sendChunks sends the next remaining bytes of r in messages of chunk
// bytes, reading the next one while this one is sent. Each is read into a
// pooled buffer that goes back to the pool once gRPC has written it to the
// connection (see codec.Marshal): a sent message must not change, and gRPC
// writes it after Send returns.
func sendChunks(stream bspb.ByteStream_ReadServer, r io.Reader, d digest.Digest, remaining int64, chunk int) error {
	chunks := make(chan *pooledChunk, 2)
	stop := make(chan struct{})
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(chunks)
		for left := remaining; left > 0; {
			c := newPooledChunk(int(min(int64(chunk), left)))
			if _, err := io.ReadFull(r, c.data); err != nil {
				c.release()
				readErr = err
				return
			}
			left -= int64(len(c.data))
			select {
			case chunks <- c:
			case <-stop:
				c.release()
				return
			}
		}
	}()
	defer wg.Wait() // before the caller closes r
	defer close(stop)
	for c := range chunks {
		if err := stream.SendMsg(c); err != nil {
			// gRPC may or may not have taken the buffer: leave it, and the
			// chunks still queued, to the garbage collector. Closing stop
			// ends the reader.
			return err
		}
	}
	if readErr != nil {
		return status.Errorf(codes.Internal, "reading blob %s: %v", d, readErr)
	}
	return nil
}

// pooledChunk is a ReadResponse whose data is in a pooled buffer. The
// codec encodes it as a ReadResponse (the same bytes) and hands the buffer
// to gRPC, which returns it to the pool once it is written.
type pooledChunk struct {
	buf  *[]byte
	data []byte
}

func newPooledChunk(n int) *pooledChunk {
	b := getData(n)
	return &pooledChunk{buf: &b, data: b}
}

// release returns an unsent chunk's buffer.
func (c *pooledChunk) release() { releaseData(c.data) }

// chunkPool is the mem.BufferPool of pooledChunk buffers.
type chunkPool struct{}

func (chunkPool) Get(n int) *[]byte { b := getData(n); return &b }
func (chunkPool) Put(b *[]byte)     { releaseData(*b) }

// chunkSender turns a byte stream into ReadResponses of at most size bytes.
type chunkSender struct {
	stream bspb.ByteStream_ReadServer
	size   int
	buf    []byte
}

func (c *chunkSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, c.size)
		}
		k := min(len(p), cap(c.buf)-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkSender) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.stream.Send(&bspb.ReadResponse{Data: c.buf})
	c.buf = nil // a sent message must not change: the next chunk gets new memory
	return err
}

// upload is an unfinished uncompressed write kept for resumption.
type upload struct {
	// token holds one value; the stream writing to the upload takes it,
	// so that streams with the same resource name take turns.
	token chan struct{}
	w     blobstore.Writer // guarded by token
	// committed mirrors w.Written() for QueryWriteStatus, which must
	// answer while a stream is still writing.
	committed atomic.Int64
	lastUsed  atomic.Int64 // unix nanoseconds
}

func (u *upload) lock(ctx context.Context) error {
	select {
	case <-u.token:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (u *upload) tryLock() bool {
	select {
	case <-u.token:
		return true
	default:
		return false
	}
}

func (u *upload) unlock() { u.token <- struct{}{} }

func (u *upload) touch() { u.lastUsed.Store(time.Now().UnixNano()) }

// errAlreadyPresent tells Write that the blob was stored while it waited.
var errAlreadyPresent = errors.New("blob already present")

// Write implements ByteStream Write for uploads/{uuid}/blobs/ and
// uploads/{uuid}/compressed-blobs/zstd/. Data becomes visible only after
// its size and hash are verified.
//
// An interrupted uncompressed upload is kept (see Options.UploadIdle):
// QueryWriteStatus reports how many bytes it holds and a new stream may
// resume from there. A resuming stream may also start earlier than that:
// the bytes the server already has are skipped.
func (s *Server) Write(stream bspb.ByteStream_WriteServer) error {
	ctx := stream.Context()
	req, err := recvWrite(stream)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return invalid("write stream closed before its first request")
		}
		return err
	}
	defer req.free()
	name := req.resourceName
	if logstream.Is(name) {
		return s.opts.LogStreams.WriteLog(req.writeRequest(), stream)
	}
	res, err := digest.ParseWriteResource(name)
	if err != nil {
		return storeError(err, "")
	}
	d := res.Digest
	present, err := blobstore.Has(ctx, s.cas, d)
	if err != nil {
		return storeError(err, "blob "+d.String())
	}
	if present {
		return s.alreadyPresent(stream, name, res)
	}
	if res.Compressor == repb.Compressor_ZSTD {
		return s.writeCompressed(ctx, stream, req, d)
	}
	u, err := s.claimUpload(ctx, name, d)
	if errors.Is(err, errAlreadyPresent) {
		return s.alreadyPresent(stream, name, res)
	}
	if err != nil {
		return err
	}
	defer u.unlock()
	if req.writeOffset == 0 && u.w.Written() > 0 {
		// The client starts over rather than resuming: oblige it.
		w, err := s.cas.Create(ctx, d)
		if err != nil {
			s.dropUploadLocked(name, u)
			return storeError(err, "blob "+d.String())
		}
		u.w.Close()
		u.w = w
		u.committed.Store(0)
	}
	if req.writeOffset < 0 || req.writeOffset > u.w.Written() {
		return invalid("write_offset %d is beyond the %d bytes received for %s; ask QueryWriteStatus and resume from there", req.writeOffset, u.w.Written(), name)
	}
	return s.receiveUpload(stream, req, name, d, u)
}

// alreadyPresent finishes a write of a blob someone else already stored
// at once, as the spec says.
func (s *Server) alreadyPresent(stream bspb.ByteStream_WriteServer, name string, res digest.Resource) error {
	committed := res.Digest.Size
	if res.Compressor != repb.Compressor_IDENTITY {
		committed = -1
	}
	s.dropUpload(name)
	return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: committed})
}

// receiveUpload writes req and the stream's following requests into u,
// the upload of name, which the caller holds, and commits it at
// finish_write.
func (s *Server) receiveUpload(stream bspb.ByteStream_WriteServer, req *writeMsg, name string, d digest.Digest, u *upload) error {
	// Bytes before base are already held: a stream that resumes early
	// resends them, and they are skipped.
	base := u.w.Written()
	pos := req.writeOffset // where this stream is in the blob
	for {
		if req.resourceName != "" && req.resourceName != name {
			return invalid("resource_name changed within one write stream, from %q to %q", name, req.resourceName)
		}
		if req.writeOffset != pos {
			s.dropUploadLocked(name, u)
			return invalid("write_offset %d is not the first offset plus the data sent before (%d); nothing was stored, upload the blob again", req.writeOffset, pos)
		}
		start := pos
		pos += int64(req.n)
		req.skip(base - start)
		// The data is written here, in the handler: gRPC's reader goroutine
		// receives the next messages meanwhile, and the store writes the
		// file from its own goroutine while this one hashes.
		if err := writeData(u.w, req.data); err != nil {
			s.dropUploadLocked(name, u)
			return storeError(err, "blob "+d.String())
		}
		u.committed.Store(u.w.Written())
		if req.finishWrite {
			err := u.w.Commit()
			s.dropUploadLocked(name, u)
			if err != nil {
				return storeError(err, "blob "+d.String())
			}
			return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: d.Size})
		}
		u.touch()
		// The Writer keeps no reference to the data.
		req.free()
		if err := stream.RecvMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return invalid("write stream for %s ended without finish_write; the %d bytes received are kept, resume after QueryWriteStatus", name, u.w.Written())
			}
			return err // cancelled: the bytes so far are kept for resumption
		}
	}
}

// writeData writes the pieces of a request's data to w.
func writeData(w blobstore.Writer, data [][]byte) error {
	for _, b := range data {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// recvWrite receives the first WriteRequest of a Write stream, its data
// left in gRPC's buffers (see writeMsg); the handler receives the next
// ones into the same message. The caller must free it.
func recvWrite(stream bspb.ByteStream_WriteServer) (*writeMsg, error) {
	m := new(writeMsg)
	if err := stream.RecvMsg(m); err != nil {
		m.free()
		return m, err
	}
	return m, nil
}

// writeCompressed handles compressed-blobs uploads: the zstd stream is
// decompressed as it arrives, bounded by the announced size. req is the
// stream's first request; it receives the following ones too, and the
// caller frees it.
func (s *Server) writeCompressed(ctx context.Context, stream bspb.ByteStream_WriteServer, req *writeMsg, d digest.Digest) error {
	if req.writeOffset != 0 {
		return invalid("compressed uploads cannot be resumed; start again at write_offset 0")
	}
	w, err := s.cas.Create(ctx, d)
	if err != nil {
		return storeError(err, "blob "+d.String())
	}
	defer w.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		dec, err := zstd.NewReader(pr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(d.Size)+1<<20), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			pr.CloseWithError(err)
			done <- err
			return
		}
		defer dec.Close()
		_, err = io.Copy(w, io.LimitReader(dec, d.Size+1))
		if err == nil {
			// Drain the rest so the sender is not blocked.
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(err)
		done <- err
	}()
	received := int64(0)
	for {
		if req.writeOffset != received {
			pw.CloseWithError(errors.New("bad offset"))
			<-done
			return invalid("write_offset %d is not the sum of the compressed data sent before (%d)", req.writeOffset, received)
		}
		for _, b := range req.data {
			if _, err := pw.Write(b); err != nil {
				<-done
				return storeError(decodeErr(err), "blob "+d.String())
			}
		}
		received += int64(req.n)
		if req.finishWrite {
			break
		}
		// The pipe's reader has consumed the data: release it, and
		// receive the next request into the same message.
		req.free()
		if err = stream.RecvMsg(req); err != nil {
			pw.CloseWithError(err)
			<-done
			if errors.Is(err, io.EOF) {
				return invalid("write stream ended without finish_write; compressed uploads cannot be resumed, start again")
			}
			return err
		}
	}
	pw.Close()
	if err := <-done; err != nil {
		return storeError(decodeErr(err), "blob "+d.String())
	}
	if err := w.Commit(); err != nil {
		return storeError(err, "blob "+d.String())
	}
	return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: received})
}

func decodeErr(err error) error {
	var me *blobstore.MismatchError
	if errors.As(err, &me) {
		return err
	}
	return status.Errorf(codes.InvalidArgument, "the compressed data is not a valid zstd stream: %v", err)
}

// claimUpload returns the upload state for name, locked, creating it if
// new. If another stream writes to the same name, it waits its turn. It
// returns errAlreadyPresent if the blob was stored meanwhile.
func (s *Server) claimUpload(ctx context.Context, name string, d digest.Digest) (*upload, error) {
	for {
		s.uploadsMu.Lock()
		s.expireUploadsLocked()
		u, ok := s.uploads[name]
		s.uploadsMu.Unlock()
		if !ok {
			// Create the writer outside the map's lock: it may touch the disk.
			w, err := s.cas.Create(ctx, d)
			if err != nil {
				return nil, storeError(err, "blob "+d.String())
			}
			u = &upload{token: make(chan struct{}, 1), w: w}
			u.touch()
			s.uploadsMu.Lock()
			_, raced := s.uploads[name]
			if !raced {
				s.uploads[name] = u
			}
			s.uploadsMu.Unlock()
			if raced {
				w.Close()
				continue
			}
			return u, nil // created locked: the token is not in the channel yet
		}
		if err := u.lock(ctx); err != nil {
			return nil, storeError(err, "waiting for another write to "+name)
		}
		s.uploadsMu.Lock()
		current := s.uploads[name] == u
		s.uploadsMu.Unlock()
		if current {
			return u, nil
		}
		// The other stream finished or abandoned the upload while we waited.
		u.unlock()
		if present, err := blobstore.Has(ctx, s.cas, d); err != nil {
			return nil, storeError(err, "blob "+d.String())
		} else if present {
			return nil, errAlreadyPresent
		}
	}
}

// dropUploadLocked forgets an upload whose token the caller holds.
func (s *Server) dropUploadLocked(name string, u *upload) {
	s.uploadsMu.Lock()
	if s.uploads[name] == u {
		delete(s.uploads, name)
	}
	s.uploadsMu.Unlock()
	u.w.Close()
}

// dropUpload forgets an upload that is not in use.
func (s *Server) dropUpload(name string) {
	s.uploadsMu.Lock()
	u, ok := s.uploads[name]
	s.uploadsMu.Unlock()
	if ok && u.tryLock() {
		s.dropUploadLocked(name, u)
		u.unlock()
	}
}

// expireUploadsLocked drops uploads idle for longer than UploadIdle. The
// caller holds uploadsMu.
func (s *Server) expireUploadsLocked() {
	cutoff := time.Now().Add(-s.opts.UploadIdle).UnixNano()
	for name, u := range s.uploads {
		if u.lastUsed.Load() < cutoff && u.tryLock() {
			delete(s.uploads, name)
			u.w.Close()
			u.unlock()
		}
	}
}

// QueryWriteStatus implements ByteStream QueryWriteStatus.
func (s *Server) QueryWriteStatus(ctx context.Context, req *bspb.QueryWriteStatusRequest) (*bspb.QueryWriteStatusResponse, error) {
	res, err := digest.ParseWriteResource(req.ResourceName)
	if err != nil {
		return nil, storeError(err, "")
	}
	present, err := blobstore.Has(ctx, s.cas, res.Digest)
	if err != nil {
		return nil, storeError(err, "")
	}
	if present {
		return &bspb.QueryWriteStatusResponse{CommittedSize: res.Digest.Size, Complete: true}, nil
	}
	s.uploadsMu.Lock()
	u, ok := s.uploads[req.ResourceName]
	s.uploadsMu.Unlock()
	if ok {
		return &bspb.QueryWriteStatusResponse{CommittedSize: u.committed.Load()}, nil
	}
	return nil, status.Errorf(codes.NotFound, "no upload named %s is in progress (unknown, finished or expired); start a new Write at offset 0", req.ResourceName)
}

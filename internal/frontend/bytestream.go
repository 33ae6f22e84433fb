package frontend

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// Read implements ByteStream Read for blobs/ and compressed-blobs/zstd/.
func (s *Server) Read(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	ctx := stream.Context()
	res, err := digest.ParseReadResource(req.ResourceName)
	if err != nil {
		return storeError(err, "")
	}
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
	r, err := s.cas.Open(ctx, d, req.ReadOffset)
	if err != nil {
		return storeError(err, "blob "+d.String())
	}
	defer r.Close()
	remaining := d.Size - req.ReadOffset
	if req.ReadLimit > 0 && req.ReadLimit < remaining {
		remaining = req.ReadLimit
	}
	chunk := s.opts.ReadChunkSize
	if res.Compressor == repb.Compressor_ZSTD {
		cw := &chunkSender{stream: stream, buf: make([]byte, 0, chunk)}
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
	buf := make([]byte, min(int64(chunk), max(remaining, 1)))
	for remaining > 0 {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), remaining)])
		if n > 0 {
			if serr := stream.Send(&bspb.ReadResponse{Data: buf[:n]}); serr != nil {
				return serr
			}
			remaining -= int64(n)
		}
		if err != nil && remaining > 0 {
			return status.Errorf(codes.Internal, "reading blob %s: %v", d, err)
		}
	}
	return nil
}

// chunkSender turns a byte stream into ReadResponses of bounded size.
type chunkSender struct {
	stream bspb.ByteStream_ReadServer
	buf    []byte
}

func (c *chunkSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
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
	c.buf = c.buf[:0]
	return err
}

// upload is an unfinished uncompressed write kept for resumption.
type upload struct {
	mu       sync.Mutex // held by the stream writing to it
	w        blobstore.Writer
	lastUsed time.Time
}

// Write implements ByteStream Write for uploads/{uuid}/blobs/ and
// uploads/{uuid}/compressed-blobs/zstd/. Data becomes visible only after
// its size and hash are verified.
func (s *Server) Write(stream bspb.ByteStream_WriteServer) error {
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return invalid("write stream closed before its first request")
		}
		return err
	}
	name := req.ResourceName
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
		// Someone else already stored it: finish at once, as the spec says.
		committed := d.Size
		if res.Compressor != repb.Compressor_IDENTITY {
			committed = -1
		}
		s.dropUpload(name)
		return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: committed})
	}
	if res.Compressor == repb.Compressor_ZSTD {
		return s.writeCompressed(ctx, stream, req, d)
	}
	u, err := s.claimUpload(ctx, name, d)
	if err != nil {
		return err
	}
	defer u.mu.Unlock()
	if req.WriteOffset == 0 && u.w.Written() > 0 {
		// The client starts over rather than resuming: oblige it.
		u.w.Close()
		if u.w, err = s.cas.Create(ctx, d); err != nil {
			s.dropUploadLocked(name, u)
			return storeError(err, "blob "+d.String())
		}
	}
	if req.WriteOffset != u.w.Written() {
		return invalid("write_offset %d does not match the %d bytes committed for %s; ask QueryWriteStatus and resume from there", req.WriteOffset, u.w.Written(), name)
	}
	for {
		if req.ResourceName != "" && req.ResourceName != name {
			return invalid("resource_name changed within one write stream, from %q to %q", name, req.ResourceName)
		}
		if req.WriteOffset != u.w.Written() {
			s.dropUploadLocked(name, u)
			return invalid("write_offset %d is not the sum of the data sent before (%d)", req.WriteOffset, u.w.Written())
		}
		if _, err := u.w.Write(req.Data); err != nil {
			s.dropUploadLocked(name, u)
			return storeError(err, "blob "+d.String())
		}
		if req.FinishWrite {
			err := u.w.Commit()
			s.dropUploadLocked(name, u)
			if err != nil {
				return storeError(err, "blob "+d.String())
			}
			return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: d.Size})
		}
		u.lastUsed = time.Now()
		req, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			return invalid("write stream for %s ended without finish_write; %d bytes are kept, resume with QueryWriteStatus", name, u.w.Written())
		}
		if err != nil {
			return err // cancelled: the bytes so far are kept for resumption
		}
	}
}

// writeCompressed handles compressed-blobs uploads: the zstd stream is
// decompressed as it arrives, bounded by the announced size.
func (s *Server) writeCompressed(ctx context.Context, stream bspb.ByteStream_WriteServer, req *bspb.WriteRequest, d digest.Digest) error {
	if req.WriteOffset != 0 {
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
		dec, err := zstd.NewReader(pr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(d.Size)+1<<20))
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
		if req.WriteOffset != received {
			pw.CloseWithError(errors.New("bad offset"))
			<-done
			return invalid("write_offset %d is not the sum of the compressed data sent before (%d)", req.WriteOffset, received)
		}
		if _, err := pw.Write(req.Data); err != nil {
			<-done
			return storeError(decodeErr(err), "blob "+d.String())
		}
		received += int64(len(req.Data))
		if req.FinishWrite {
			break
		}
		req, err = stream.Recv()
		if err != nil {
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

// claimUpload returns the upload state for name, locked, creating it if new.
func (s *Server) claimUpload(ctx context.Context, name string, d digest.Digest) (*upload, error) {
	s.uploadsMu.Lock()
	s.expireUploadsLocked()
	u, ok := s.uploads[name]
	if !ok {
		w, err := s.cas.Create(ctx, d)
		if err != nil {
			s.uploadsMu.Unlock()
			return nil, storeError(err, "blob "+d.String())
		}
		u = &upload{w: w, lastUsed: time.Now()}
		s.uploads[name] = u
	}
	s.uploadsMu.Unlock()
	if !u.mu.TryLock() {
		return nil, status.Errorf(codes.Aborted, "another write to %s is in progress; use a new upload id for a concurrent upload", name)
	}
	return u, nil
}

// dropUploadLocked forgets an upload whose lock the caller holds.
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
	if ok && u.mu.TryLock() {
		s.dropUploadLocked(name, u)
		u.mu.Unlock()
	}
}

func (s *Server) expireUploadsLocked() {
	now := time.Now()
	for name, u := range s.uploads {
		if now.Sub(u.lastUsed) > s.opts.UploadIdle && u.mu.TryLock() {
			delete(s.uploads, name)
			u.w.Close()
			u.mu.Unlock()
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
	if ok && u.mu.TryLock() {
		n := u.w.Written()
		u.mu.Unlock()
		return &bspb.QueryWriteStatusResponse{CommittedSize: n}, nil
	}
	if ok {
		return nil, status.Errorf(codes.Unavailable, "a write to %s is in progress; ask again when it has stopped", req.ResourceName)
	}
	return nil, status.Errorf(codes.NotFound, "no upload named %s is in progress; start a new Write at offset 0", req.ResourceName)
}

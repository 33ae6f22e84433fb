package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// A writer may outlive the call that created it (the frontend keeps an
// interrupted ByteStream upload for its client to resume), so its
// requests do not end with that call's context: each is bounded by
// requestTimeout instead, and the abort of a failed upload by
// abortTimeout.
const (
	requestTimeout = 5 * time.Minute
	abortTimeout   = 30 * time.Second
)

// detached is ctx's values without its cancellation, for a writer.
func detached(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// bounded runs f with a context of the writer's bounded by requestTimeout.
func bounded(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return f(ctx)
}

// tally counts the bytes of a blob its writer's caller verifies,
// refusing any beyond the blob's size.
type tally struct {
	d digest.Digest
	n int64
}

func (t *tally) add(p []byte) error {
	if t.n+int64(len(p)) > t.d.Size {
		return &blobstore.MismatchError{Want: t.d, Got: digest.Digest{Function: t.d.Function, Size: t.n + int64(len(p))}}
	}
	t.n += int64(len(p))
	return nil
}

// putWriter buffers a small blob, and PUTs it once its caller proved it
// is the blob.
type putWriter struct {
	c    *CAS
	ctx  context.Context
	d    digest.Digest
	t    tally
	buf  []byte
	done bool
}

func (w *putWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone
	}
	if err := w.t.add(p); err != nil {
		return 0, err
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, w.d.Size)
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *putWriter) Written() int64 { return w.t.n }

func (w *putWriter) CommitVerified(proof blobstore.Proof) error {
	if w.done {
		return errWriterDone
	}
	w.done = true
	if err := proof.Vouches(w.d, w.t.n); err != nil {
		w.buf = nil
		return err
	}
	name := w.c.name(w.d)
	// The payload's SHA-256 signs the request, so the store rejects
	// bytes damaged on the way. For a SHA-256 blob that is its hash.
	sum := w.d.Hash
	if w.d.Function != digest.SHA256 {
		s := sha256.Sum256(w.buf)
		sum = hex.EncodeToString(s[:])
	}
	start := time.Now()
	err := bounded(w.ctx, func(ctx context.Context) error {
		_, err := w.c.b.core.PutObject(ctx, w.c.b.cfg.Bucket, name, bytes.NewReader(w.buf), w.d.Size, "", sum, minio.PutObjectOptions{})
		return err
	})
	w.c.b.observe("put", start, err)
	w.buf = nil
	if err != nil {
		return w.c.b.fail("PUT "+name, err)
	}
	w.c.b.exist.add(name, time.Now())
	return nil
}

func (w *putWriter) Close() error {
	w.done, w.buf = true, nil
	return nil
}

// multipartWriter sends a large blob as a multipart upload: one part is
// filled while the previous one is sent, so an upload holds at most two
// parts in memory whatever the blob's size. The parts are copies of what
// Write is given, not streamed from it: a part's body must be seekable
// for minio-go to retry a failed request (it does not retry a stream),
// and the upload receives the next part while sending one.
type multipartWriter struct {
	c        *CAS
	ctx      context.Context
	d        digest.Digest
	name     string
	t        tally
	partSize int64
	buf      []byte // the part being filled
	spare    []byte // the part being sent, reused once sent
	uploadID string
	parts    []minio.CompletePart
	sending  sync.WaitGroup
	sendErr  error // of the part in flight, read after sending.Wait
	err      error // sticky: the upload failed
	done     bool
}

// maxParts is S3's limit on the parts of one upload.
const maxParts = 10000

func newMultipartWriter(ctx context.Context, c *CAS, d digest.Digest) *multipartWriter {
	size := c.b.cfg.PartSize
	if need := (d.Size + maxParts - 1) / maxParts; need > size {
		size = (need + 1<<20 - 1) &^ (1<<20 - 1)
	}
	return &multipartWriter{c: c, ctx: detached(ctx), d: d, name: c.name(d), t: tally{d: d}, partSize: size}
}

func (w *multipartWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone
	}
	if w.err != nil {
		return 0, w.err
	}
	if err := w.t.add(p); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, w.partSize)
		}
		k := min(len(p), int(w.partSize)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		// A full part goes out unless it may be the last one, which
		// Commit sends (Written already counts all of p).
		if int64(len(w.buf)) == w.partSize && (len(p) > 0 || w.t.n < w.d.Size) {
			if err := w.send(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// send waits for the part in flight, then starts sending the filled
// buffer as the next part and swaps in the spare buffer for filling.
func (w *multipartWriter) send() error {
	if err := w.wait(); err != nil {
		return err
	}
	if w.uploadID == "" {
		start := time.Now()
		var id string
		err := bounded(w.ctx, func(ctx context.Context) (err error) {
			id, err = w.c.b.core.NewMultipartUpload(ctx, w.c.b.cfg.Bucket, w.name, minio.PutObjectOptions{})
			return err
		})
		w.c.b.observe("multipart_create", start, err)
		if err != nil {
			w.err = w.c.b.fail("starting the multipart upload of "+w.name, err)
			return w.err
		}
		w.uploadID = id
	}
	part := w.buf
	number := len(w.parts) + 1
	w.parts = append(w.parts, minio.CompletePart{PartNumber: number})
	w.buf, w.spare = w.spare[:0], nil
	w.sending.Add(1)
	go func() {
		defer w.sending.Done()
		start := time.Now()
		// The parts are verified as a whole at Commit, so the payload is
		// not hashed again to sign each one.
		var info minio.ObjectPart
		err := bounded(w.ctx, func(ctx context.Context) (err error) {
			info, err = w.c.b.core.PutObjectPart(ctx, w.c.b.cfg.Bucket, w.name, w.uploadID, number, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{DisableContentSha256: true})
			return err
		})
		w.c.b.observe("multipart_part", start, err)
		if err != nil {
			w.sendErr = w.c.b.fail("sending part "+strconv.Itoa(number)+" of "+w.name, err)
			return
		}
		w.parts[number-1].ETag = info.ETag
		w.spare = part
	}()
	return nil
}

// wait waits for the part in flight and takes its error.
func (w *multipartWriter) wait() error {
	w.sending.Wait()
	if w.sendErr != nil && w.err == nil {
		w.err = w.sendErr
	}
	return w.err
}

func (w *multipartWriter) Written() int64 { return w.t.n }

// CommitVerified sends the last part and completes the upload, only if
// the caller proved that the bytes written are the blob.
func (w *multipartWriter) CommitVerified(proof blobstore.Proof) error {
	if w.done {
		return errWriterDone
	}
	if err := proof.Vouches(w.d, w.t.n); err != nil {
		w.Close()
		return err
	}
	if err := w.send(); err != nil { // the last part
		w.Close()
		return err
	}
	if err := w.wait(); err != nil {
		w.Close()
		return err
	}
	start := time.Now()
	err := bounded(w.ctx, func(ctx context.Context) error {
		_, err := w.c.b.core.CompleteMultipartUpload(ctx, w.c.b.cfg.Bucket, w.name, w.uploadID, w.parts, minio.PutObjectOptions{})
		return err
	})
	w.c.b.observe("multipart_complete", start, err)
	if err != nil {
		w.err = w.c.b.fail("completing the multipart upload of "+w.name, err)
		w.Close()
		return w.err
	}
	w.done, w.buf, w.spare = true, nil, nil
	w.c.b.exist.add(w.name, time.Now())
	return nil
}

// Close abandons an upload not committed: the parts sent are deleted,
// and nothing becomes visible.
func (w *multipartWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	w.sending.Wait()
	w.buf, w.spare = nil, nil
	if w.uploadID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(w.ctx, abortTimeout)
	defer cancel()
	start := time.Now()
	err := w.c.b.core.AbortMultipartUpload(ctx, w.c.b.cfg.Bucket, w.name, w.uploadID)
	w.c.b.observe("multipart_abort", start, err)
	if err != nil {
		// The upload's parts stay until the bucket's rule for incomplete
		// uploads removes them; they are never visible as an object.
		w.c.b.log.Warn("aborting a failed multipart upload failed; the bucket's AbortIncompleteMultipartUpload rule removes its parts", "object", w.name, "err", err)
	}
	return nil
}

package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// CAS is the bucket's content-addressable store.
type CAS struct{ b *Bucket }

var (
	_ blobstore.Trusting    = (*CAS)(nil)
	_ blobstore.RangeOpener = (*CAS)(nil)
)

// name is the object name of blob d.
func (c *CAS) name(d digest.Digest) string {
	return c.b.objectName("cas", digest.Name(d.Function), d.Hash+"-"+strconv.FormatInt(d.Size, 10))
}

// FindMissing implements blobstore.Store: digests this process saw
// present recently are answered from memory, the others with HEAD
// requests, HeadConcurrency at a time.
func (c *CAS) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = c.name(d)
	}
	present := make([]bool, len(ds))
	c.b.exist.lookup(names, c.b.freshSince(), present)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.b.cfg.HeadConcurrency)
	for i, d := range ds {
		if present[i] || d.IsEmpty() {
			present[i] = true
			continue
		}
		g.Go(func() error {
			ok, err := c.head(gctx, names[i], d.Size)
			present[i] = ok
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var missing []digest.Digest
	for i, d := range ds {
		if !present[i] {
			missing = append(missing, d)
		}
	}
	return missing, nil
}

// head reports whether object name holds a blob of size bytes. An
// object of another size is not that blob (it can only be damage): it
// reads as missing, so the client uploads the blob again over it.
func (c *CAS) head(ctx context.Context, name string, size int64) (bool, error) {
	start := time.Now()
	info, err := c.b.client.StatObject(ctx, c.b.cfg.Bucket, name, minio.StatObjectOptions{})
	c.b.observe("head", start, err)
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, c.b.fail("HEAD "+name, err)
	}
	if info.Size != size {
		return false, nil
	}
	c.b.used(name, size, info.LastModified)
	return true, nil
}

// Open implements blobstore.Store.
func (c *CAS) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	return c.OpenRange(ctx, d, offset, 0)
}

// OpenRange implements blobstore.RangeOpener with one ranged GET for
// exactly the bytes asked for (limit 0: to the end).
func (c *CAS) OpenRange(ctx context.Context, d digest.Digest, offset, limit int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("reading blob %s: offset %d is negative; offsets count bytes from the start of the blob", d, offset)
	}
	if d.IsEmpty() {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	name := c.name(d)
	end := d.Size
	if limit > 0 && offset+limit < end {
		end = offset + limit
	}
	if offset >= end {
		// Nothing to read, but the blob must still exist.
		ok, err := c.head(ctx, name, d.Size)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, blobstore.ErrNotFound
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(offset, end-1); err != nil {
		return nil, err
	}
	start := time.Now()
	body, info, header, err := c.b.core.GetObject(ctx, c.b.cfg.Bucket, name, opts)
	c.b.observe("get", start, err)
	if err != nil {
		if isNotFound(err) {
			c.b.exist.forget(name)
		}
		return nil, c.b.fail("GET "+name, err)
	}
	if total := rangeTotal(header.Get("Content-Range"), info.Size); total != d.Size {
		body.Close()
		c.b.exist.forget(name)
		return nil, blobstore.ErrNotFound
	}
	c.b.used(name, d.Size, info.LastModified)
	return &objectReader{body: body, left: end - offset, b: c.b, name: name}, nil
}

// rangeTotal is the object's whole size from a Content-Range header
// ("bytes 0-99/1234"), or size when there is none (the whole object was
// sent).
func rangeTotal(contentRange string, size int64) int64 {
	i := strings.LastIndexByte(contentRange, '/')
	if i < 0 {
		return size
	}
	n, err := strconv.ParseInt(contentRange[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// objectReader reads a GET's body, turning a failure midway into an
// UnavailableError and a body that ends early into one too (never into
// a short blob).
type objectReader struct {
	body io.ReadCloser
	left int64
	b    *Bucket
	name string
}

func (r *objectReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.body.Read(p)
	r.left -= int64(n)
	switch {
	case err == io.EOF && r.left > 0:
		return n, r.b.fail("GET "+r.name, io.ErrUnexpectedEOF)
	case err == io.EOF:
		return n, io.EOF
	case err != nil:
		return n, r.b.fail("GET "+r.name, err)
	}
	return n, nil
}

func (r *objectReader) Close() error { return r.body.Close() }

// Create implements blobstore.Store: the blob is verified as it passes,
// once, and written as CreateTrusted does.
func (c *CAS) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	tw, err := c.CreateTrusted(ctx, d)
	if err != nil {
		return nil, err
	}
	return blobstore.NewChecked(d, tw), nil
}

// CreateTrusted implements blobstore.Trusting. A blob up to PartSize is
// buffered and sent in one PUT at commit; a larger one is sent as a
// multipart upload whose parts go out while later bytes arrive, and which
// is completed only with the caller's proof that the whole blob verified
// (aborted otherwise), so that no unverified or partial object is ever
// visible.
func (c *CAS) CreateTrusted(ctx context.Context, d digest.Digest) (blobstore.TrustedWriter, error) {
	if d.Size <= c.b.cfg.PartSize {
		return &putWriter{c: c, ctx: detached(ctx), d: d, t: tally{d: d}}, nil
	}
	return newMultipartWriter(ctx, c, d), nil
}

// errWriterDone is returned by a writer used after Commit or Close.
var errWriterDone = errors.New("blob writer already committed or closed; start a new one with Create")

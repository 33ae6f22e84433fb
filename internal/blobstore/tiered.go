package blobstore

import (
	"context"
	"errors"
	"hash"
	"io"

	"github.com/gantry-build/gantry/internal/digest"
)

// TierObserver is told what a Tiered store's cache does, for metrics.
// Its methods are called from the goroutines reading and writing blobs
// and must be safe for concurrent use.
type TierObserver interface {
	// CacheRead reports a finished read: hit says whether it was served
	// from the cache or else from the remote, bytes how many bytes the
	// caller read from that source.
	CacheRead(hit bool, bytes int64)
	// CacheFilled reports a blob of that many bytes copied into the
	// cache by a read that missed it. Uploads are not counted.
	CacheFilled(bytes int64)
	// CacheError reports a cache failure that was absorbed (the cache
	// was bypassed and the remote served the caller). op says what
	// failed: open, create, write, commit or touch on the cache, or
	// refresh (the remote's lifetime extension of a cache hit).
	CacheError(op string, err error)
}

// NoTierObserver is a TierObserver that ignores everything.
type NoTierObserver struct{}

// CacheRead implements TierObserver.
func (NoTierObserver) CacheRead(bool, int64) {}

// CacheFilled implements TierObserver.
func (NoTierObserver) CacheFilled(int64) {}

// CacheError implements TierObserver.
func (NoTierObserver) CacheError(string, error) {}

// Tiered is a Store with a local cache in front of a remote store. The
// remote (an object store bucket shared by every frontend) is the durable
// truth; the cache (this frontend's disk, bounded by its own size) holds
// recently used blobs so that reads of them do not go to the remote.
//
// Writes go to both, and count as done only when the remote has the blob:
// the cache only ever holds blobs the remote committed or served. Reads
// try the cache first and fill it from the remote on a miss. Existence
// (FindMissing) is the remote's alone: a blob only in the cache (the
// remote expired it) must be reported missing, so that the client uploads
// it again where every frontend sees it.
//
// The cache is an optimisation, never a source of failure: any error of
// the cache is reported to the observer and the remote used instead.
type Tiered struct {
	remote, cache Store
	obs           TierObserver
}

var (
	_ Trusting           = (*Tiered)(nil)
	_ RangeOpener        = (*Tiered)(nil)
	_ BatchPutter        = (*Tiered)(nil)
	_ TrustedBatchPutter = (*Tiered)(nil)
)

// NewTiered returns a store that caches remote's blobs in cache, telling
// obs what the cache does (NoTierObserver{} or nil for nothing).
func NewTiered(remote, cache Store, obs TierObserver) *Tiered {
	if obs == nil {
		obs = NoTierObserver{}
	}
	return &Tiered{remote: remote, cache: cache, obs: obs}
}

// FindMissing implements Store. It asks the remote; the blobs also held
// in the cache are marked used there, so that the cache keeps what this
// frontend's clients are about to read or reference.
func (t *Tiered) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	missing, err := t.remote.FindMissing(ctx, ds)
	if err != nil {
		return nil, err
	}
	if _, err := t.cache.FindMissing(ctx, ds); err != nil {
		t.obs.CacheError("touch", err)
	}
	return missing, nil
}

// Open implements Store.
func (t *Tiered) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	return t.OpenRange(ctx, d, offset, 0)
}

// OpenRange implements RangeOpener. A read of the whole blob that misses
// the cache fills it; a partial one reads only its range from the remote
// and leaves the cache alone.
func (t *Tiered) OpenRange(ctx context.Context, d digest.Digest, offset, limit int64) (io.ReadCloser, error) {
	if d.IsEmpty() {
		return emptyReader(), nil
	}
	if offset < 0 {
		return nil, negativeOffset(d, offset)
	}
	if limit < 0 {
		return nil, negativeLimit(d, limit)
	}
	r, err := OpenRange(ctx, t.cache, d, offset, limit)
	if err == nil {
		return t.hit(ctx, d, r), nil
	}
	if !errors.Is(err, ErrNotFound) {
		t.obs.CacheError("open", err)
	}
	if offset != 0 || (limit != 0 && limit < d.Size) {
		r, err := OpenRange(ctx, t.remote, d, offset, limit)
		if err != nil {
			t.obs.CacheRead(false, 0)
			return nil, err
		}
		return &tierReader{rc: r, t: t}, nil
	}
	r, err = t.remote.Open(ctx, d, 0)
	if err != nil {
		t.obs.CacheRead(false, 0)
		return nil, err
	}
	w, err := t.cache.Create(ctx, d)
	if err != nil {
		t.obs.CacheError("create", err)
		return &tierReader{rc: r, t: t}, nil
	}
	return &tierReader{rc: r, t: t, fill: w, d: d}, nil
}

// hit returns the reader of a cache hit. Meanwhile it asks the remote
// whether it holds d, which extends the blob's lifetime there as every
// FindMissing does: a blob read often, but only from caches, must not
// expire from the remote. The answer is not waited for before reading
// (it costs a round trip), only before Close returns.
func (t *Tiered) hit(ctx context.Context, d digest.Digest, r io.ReadCloser) io.ReadCloser {
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		// A blob the remote lost is still served from the cache: its
		// bytes are verified and content-addressed, so never wrong.
		if _, err := t.remote.FindMissing(ctx, []digest.Digest{d}); err != nil {
			t.obs.CacheError("refresh", err)
		}
	}()
	return &tierReader{rc: r, t: t, hit: true, refreshed: refreshed}
}

// tierReader counts the bytes read from one source for the observer and,
// on a miss of a whole blob, copies them into the cache. Read and Close
// must not be called concurrently.
type tierReader struct {
	rc        io.ReadCloser
	t         *Tiered
	hit       bool
	n         int64
	refreshed chan struct{} // closed when a hit's remote refresh is done
	// fill, when not nil, receives every byte read; it is committed once
	// the blob's d.Size bytes were read, and discarded if the caller
	// stops before.
	fill   Writer
	d      digest.Digest
	closed bool
}

func (r *tierReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.n += int64(n)
	if r.fill != nil && n > 0 {
		if _, werr := r.fill.Write(p[:n]); werr != nil {
			r.t.obs.CacheError("write", werr)
			r.dropFill()
		} else if r.fill.Written() == r.d.Size {
			// The disk writer verifies the digest here: a remote that
			// served wrong bytes does not get them into the cache.
			if cerr := r.fill.Commit(); cerr != nil {
				r.t.obs.CacheError("commit", cerr)
			} else {
				r.t.obs.CacheFilled(r.d.Size)
			}
			r.dropFill()
		}
	}
	return n, err
}

func (r *tierReader) dropFill() {
	r.fill.Close()
	r.fill = nil
}

func (r *tierReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.fill != nil {
		r.dropFill()
	}
	err := r.rc.Close()
	if r.refreshed != nil {
		<-r.refreshed
	}
	r.t.obs.CacheRead(r.hit, r.n)
	return err
}

// Create implements Store: the blob is verified once, here, and written
// to both stores as CreateTrusted does.
func (t *Tiered) Create(ctx context.Context, d digest.Digest) (Writer, error) {
	tw, err := t.CreateTrusted(ctx, d)
	if err != nil {
		return nil, err
	}
	return NewChecked(d, tw), nil
}

// CreateTrusted implements Trusting. The blob is written to the remote
// and the cache at once, neither hashing it; it is committed to the cache
// only once the remote committed it. A cache that fails is dropped, and
// the upload carries on to the remote alone.
func (t *Tiered) CreateTrusted(ctx context.Context, d digest.Digest) (TrustedWriter, error) {
	rw, err := createTrusted(ctx, t.remote, d)
	if err != nil {
		return nil, err
	}
	cw, err := createTrusted(ctx, t.cache, d)
	if err != nil {
		t.obs.CacheError("create", err)
		cw = nil
	}
	return &tieredWriter{t: t, remote: rw, cache: cw}, nil
}

// tieredWriter writes a blob to the remote and, while it can, the cache.
type tieredWriter struct {
	t      *Tiered
	remote TrustedWriter
	cache  TrustedWriter // nil once dropped
}

func (w *tieredWriter) Write(p []byte) (int, error) {
	if err := w.writeHashing(p, nil); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeHashing implements hashingWriter: whichever store hashes as it
// writes (the disk cache) hashes for the caller.
func (w *tieredWriter) writeHashing(p []byte, h hash.Hash) error {
	if _, err := w.remote.Write(p); err != nil {
		if h != nil {
			h.Write(p) // hashingWriter's promise
		}
		return err
	}
	if w.cache != nil {
		var err error
		if hw, ok := w.cache.(hashingWriter); ok && h != nil {
			err = hw.writeHashing(p, h)
			h = nil
		} else {
			_, err = w.cache.Write(p)
		}
		if err != nil {
			w.t.obs.CacheError("write", err)
			w.dropCache()
		}
	}
	if h != nil {
		h.Write(p)
	}
	return nil
}

func (w *tieredWriter) Written() int64 { return w.remote.Written() }

// CommitVerified commits the remote and only then the cache: a blob in
// the cache is always one the remote has (or had).
func (w *tieredWriter) CommitVerified(p Proof) error {
	if err := w.remote.CommitVerified(p); err != nil {
		if w.cache != nil {
			w.dropCache()
		}
		return err
	}
	if w.cache != nil {
		if err := w.cache.CommitVerified(p); err != nil {
			w.t.obs.CacheError("commit", err)
		}
		w.dropCache()
	}
	return nil
}

func (w *tieredWriter) dropCache() {
	w.cache.Close()
	w.cache = nil
}

func (w *tieredWriter) Close() error {
	if w.cache != nil {
		w.dropCache()
	}
	return w.remote.Close()
}

// PutBatch implements BatchPutter: every blob is verified once, here, and
// stored as PutVerified does.
func (t *Tiered) PutBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	VerifyThenPut(ctx, t, ds, data, errs)
}

// PutVerified implements TrustedBatchPutter: the batch goes to the
// remote, through its own batch path if it has one (an object store's
// parallel uploads), and then the blobs the remote stored go to the cache
// in a batch of their own (the disk store packs them in few writes).
func (t *Tiered) PutVerified(ctx context.Context, blobs []VerifiedBlob, errs []error) {
	copy(errs, PutVerifiedBatch(ctx, t.remote, blobs))
	var cached []VerifiedBlob
	for i, b := range blobs {
		if errs[i] == nil && !b.Digest().IsEmpty() {
			cached = append(cached, b)
		}
	}
	for _, err := range PutVerifiedBatch(ctx, t.cache, cached) {
		if err != nil {
			t.obs.CacheError("commit", err)
		}
	}
}

// Stats reports the number of blobs and bytes held in the cache (zero if
// it cannot tell): the remote's are the object store's to report.
func (t *Tiered) Stats() (blobs int, bytes int64) {
	if st, ok := t.cache.(interface{ Stats() (int, int64) }); ok {
		return st.Stats()
	}
	return 0, 0
}

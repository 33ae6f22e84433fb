package blobstore

import (
	"context"
	"fmt"
	"hash"
	"io"
	"sync/atomic"

	"github.com/gantry-build/gantry/internal/digest"
)

// A blob is hashed once on its way in. Store.Create and BatchPutter
// verify what they are given; underneath, stores that can take bytes
// already verified (Trusting) are handed them with a Proof, so that a
// decorator (Tiered) and the stores it writes to do not each hash the
// blob again. A Proof is made only by a verifier that hashed the bytes and
// found them to be the blob: unverified bytes cannot reach a TrustedWriter's
// Commit by accident. What a store reads back from its own medium (a disk
// after a crash) it still verifies where it did before.

// Proof is a verifier's word that the bytes it hashed are blob d. Its zero
// value proves nothing.
type Proof struct {
	d  digest.Digest
	ok bool
}

// Digest is the blob the proof is for.
func (p Proof) Digest() digest.Digest { return p.d }

// Vouches checks that p proves that the n bytes written are blob d, for a
// TrustedWriter's CommitVerified.
func (p Proof) Vouches(d digest.Digest, n int64) error {
	if !p.ok || p.d != d || n != d.Size {
		return fmt.Errorf("blob %s: commit of %d bytes without a proof that they are this blob (proof for %s); nothing was stored: this is a bug in the caller, report it", d, n, p.d)
	}
	return nil
}

// VerifiedBlob is a blob's bytes checked against its digest. Only Verify
// makes one.
type VerifiedBlob struct {
	proof Proof
	data  []byte
}

// Verify checks data against d.
func Verify(d digest.Digest, data []byte) (VerifiedBlob, error) {
	if err := verifyBlob(d, data); err != nil {
		return VerifiedBlob{}, err
	}
	return VerifiedBlob{proof: Proof{d: d, ok: true}, data: data}, nil
}

// Digest is the blob's digest.
func (b VerifiedBlob) Digest() digest.Digest { return b.proof.d }

// Data is the blob's bytes; the caller must not change them.
func (b VerifiedBlob) Data() []byte { return b.data }

// Proof is the proof that Data is the blob.
func (b VerifiedBlob) Proof() Proof { return b.proof }

// TrustedWriter receives a blob's bytes from a caller that verifies them
// itself: it does not hash them, and commits only with the caller's Proof.
// It still refuses bytes beyond the blob's size.
type TrustedWriter interface {
	io.Writer
	// Written is the number of bytes written so far.
	Written() int64
	// CommitVerified makes the blob visible. It fails, storing nothing,
	// unless p proves that the bytes written are the blob.
	CommitVerified(p Proof) error
	// Close releases the writer; after a successful commit it is a no-op.
	Close() error
}

// Trusting is a Store that takes bytes its caller verified.
type Trusting interface {
	Store
	// CreateTrusted starts writing blob d, which the caller verifies.
	CreateTrusted(ctx context.Context, d digest.Digest) (TrustedWriter, error)
}

// TrustedBatchPutter is a Store that stores many verified blobs at once
// more cheaply than one at a time.
type TrustedBatchPutter interface {
	// PutVerified stores every blob, and sets errs[i] to the outcome of
	// blobs[i].
	PutVerified(ctx context.Context, blobs []VerifiedBlob, errs []error)
}

// hashingWriter is a TrustedWriter that can hash what it writes while it
// writes it (the disk store's file writer hashes while its goroutine
// writes the previous buffer): NewChecked lets it, rather than hash first
// and write after.
type hashingWriter interface {
	// writeHashing is Write, writing p to h (if not nil) meanwhile; p is
	// written to h also when the write fails.
	writeHashing(p []byte, h hash.Hash) error
}

// NewChecked returns a Writer of blob d that verifies the bytes once, as
// they pass, and hands them to tw, committing it with the proof.
func NewChecked(d digest.Digest, tw TrustedWriter) Writer {
	w := &checkedWriter{v: newVerifier(d), tw: tw}
	w.hw, _ = tw.(hashingWriter)
	return w
}

type checkedWriter struct {
	v  verifier
	tw TrustedWriter
	hw hashingWriter // tw, if it hashes as it writes
}

func (w *checkedWriter) Write(p []byte) (int, error) {
	if err := w.v.count(p); err != nil {
		return 0, err
	}
	if w.hw != nil {
		if err := w.hw.writeHashing(p, w.v.h); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	w.v.h.Write(p)
	return w.tw.Write(p)
}

func (w *checkedWriter) Written() int64 { return w.v.n }

func (w *checkedWriter) Commit() error {
	p, err := w.v.prove()
	if err != nil {
		w.tw.Close()
		return err
	}
	return w.tw.CommitVerified(p)
}

func (w *checkedWriter) Close() error { return w.tw.Close() }

// createTrusted starts a trusted write of d to s: its own if s is
// Trusting, else its Create's, which verifies the bytes once more.
func createTrusted(ctx context.Context, s Store, d digest.Digest) (TrustedWriter, error) {
	if ts, ok := s.(Trusting); ok {
		return ts.CreateTrusted(ctx, d)
	}
	w, err := s.Create(ctx, d)
	if err != nil {
		return nil, err
	}
	return distrusting{w}, nil
}

// distrusting is a store's verifying Writer used as a TrustedWriter.
type distrusting struct{ Writer }

func (w distrusting) CommitVerified(Proof) error { return w.Commit() }

// PutVerified stores one verified blob in s.
func PutVerified(ctx context.Context, s Store, b VerifiedBlob) error {
	d := b.Digest()
	if d.IsEmpty() {
		return nil
	}
	w, err := createTrusted(ctx, s, d)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := w.Write(b.data); err != nil {
		return err
	}
	return w.CommitVerified(b.proof)
}

// PutVerifiedBatch stores verified blobs in s, through its
// TrustedBatchPutter if it has one; a store that is not Trusting verifies
// them again. It returns one error (or nil) per blob.
func PutVerifiedBatch(ctx context.Context, s Store, blobs []VerifiedBlob) []error {
	errs := make([]error, len(blobs))
	switch st := s.(type) {
	case TrustedBatchPutter:
		st.PutVerified(ctx, blobs, errs)
	case Trusting:
		for i, b := range blobs {
			errs[i] = PutVerified(ctx, s, b)
		}
	default:
		ds := make([]digest.Digest, len(blobs))
		data := make([][]byte, len(blobs))
		for i, b := range blobs {
			ds[i], data[i] = b.Digest(), b.data
		}
		copy(errs, PutBatch(ctx, s, ds, data))
	}
	return errs
}

// VerifyBatch verifies data[i] against ds[i], on all cores for large
// batches, setting errs[i] for those that do not match, and returns the
// others with their positions in ds.
func VerifyBatch(ds []digest.Digest, data [][]byte, errs []error) ([]VerifiedBlob, []int) {
	verifyAll(ds, data, errs, maxInt64)
	blobs := make([]VerifiedBlob, 0, len(ds))
	idx := make([]int, 0, len(ds))
	for i, d := range ds {
		if errs[i] == nil {
			blobs = append(blobs, VerifiedBlob{proof: Proof{d: d, ok: true}, data: data[i]})
			idx = append(idx, i)
		}
	}
	return blobs, idx
}

// VerifyThenPut is BatchPutter.PutBatch for a TrustedBatchPutter:
// every blob is verified once, here (on all cores for large batches), and
// the good ones are handed to s.
func VerifyThenPut(ctx context.Context, s TrustedBatchPutter, ds []digest.Digest, data [][]byte, errs []error) {
	blobs, idx := VerifyBatch(ds, data, errs)
	out := make([]error, len(blobs))
	s.PutVerified(ctx, blobs, out)
	for k, i := range idx {
		errs[i] = out[k]
	}
}

const maxInt64 = int64(^uint64(0) >> 1)

// hashedBytes, when not nil (a test sets it), counts the bytes hashed to
// verify blobs being stored.
var hashedBytes *atomic.Int64

// countingHash is a hash that adds what it is given to hashedBytes.
type countingHash struct{ hash.Hash }

func (h countingHash) Write(p []byte) (int, error) {
	hashedBytes.Add(int64(len(p)))
	return h.Hash.Write(p)
}

// Package blobstore stores content-addressed blobs. A Store is an interface
// so that caching, metrics and sharding can wrap it as decorators.
package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/gantry-build/gantry/internal/digest"
)

// ErrNotFound is returned when a blob is not in the store.
var ErrNotFound = errors.New("blob not found")

// MismatchError is returned by Writer.Commit when the data written does not
// have the digest it was announced with. Nothing is stored.
type MismatchError struct {
	Want digest.Digest
	Got  digest.Digest
}

func (e *MismatchError) Error() string {
	if e.Got.Size != e.Want.Size {
		return fmt.Sprintf("blob %s: received %d bytes, but the digest says %d; nothing was stored, upload the blob again", e.Want, e.Got.Size, e.Want.Size)
	}
	return fmt.Sprintf("blob %s: the data hashes to %s, not to the digest it was sent with; nothing was stored, upload the blob again", e.Want, e.Got.Hash)
}

// Store is a content-addressable blob store.
type Store interface {
	// FindMissing returns those of ds that the store does not hold, in
	// the order of ds. Blobs that are present have their lifetime
	// extended. The empty blob is always present.
	FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error)
	// Open returns a reader of the blob from byte offset on. It returns
	// ErrNotFound when the blob is absent.
	Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error)
	// Create starts writing blob d. The blob becomes visible only when
	// Commit verifies that what was written has digest d. This is where
	// untrusted bytes are hashed, once: a store that writes to others
	// (Tiered) hands them the bytes as trusted (see verified.go).
	Create(ctx context.Context, d digest.Digest) (Writer, error)
}

// Writer receives a blob's bytes. Close without Commit discards them.
type Writer interface {
	io.Writer
	// Written is the number of bytes written so far.
	Written() int64
	// Commit verifies the data and makes the blob visible. It returns a
	// *MismatchError if the data does not match the digest.
	Commit() error
	// Close releases the writer; after a successful Commit it is a no-op.
	Close() error
}

// Get reads a whole blob into memory.
func Get(ctx context.Context, s Store, d digest.Digest) ([]byte, error) {
	if d.IsEmpty() {
		return []byte{}, nil
	}
	r, err := s.Open(ctx, d, 0)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := make([]byte, d.Size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", d, err)
	}
	return buf, nil
}

// Put stores data as blob d, verifying it.
func Put(ctx context.Context, s Store, d digest.Digest, data []byte) error {
	if d.IsEmpty() && len(data) == 0 {
		return nil
	}
	w, err := s.Create(ctx, d)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := w.Write(data); err != nil {
		return err
	}
	return w.Commit()
}

// Has reports whether the store holds d.
func Has(ctx context.Context, s Store, d digest.Digest) (bool, error) {
	missing, err := s.FindMissing(ctx, []digest.Digest{d})
	return len(missing) == 0, err
}

// verifier hashes and counts bytes as they are written.
type verifier struct {
	want digest.Digest
	h    hash.Hash
	n    int64
	err  error // a Write that overflowed poisons the blob for good
}

func newVerifier(d digest.Digest) verifier {
	h := digest.NewHasher(d.Function)
	if hashedBytes != nil {
		h = countingHash{h}
	}
	return verifier{want: d, h: h}
}

func (v *verifier) write(p []byte) error {
	if err := v.count(p); err != nil {
		return err
	}
	v.h.Write(p)
	return nil
}

// count counts p's bytes, failing if they overflow the announced size;
// the caller must then write p to v.h.
func (v *verifier) count(p []byte) error {
	if v.err != nil {
		return v.err
	}
	if v.n+int64(len(p)) > v.want.Size {
		v.err = &MismatchError{Want: v.want, Got: digest.Digest{Function: v.want.Function, Size: v.n + int64(len(p))}}
		return v.err
	}
	v.n += int64(len(p))
	return nil
}

func (v *verifier) check() error {
	if v.err != nil {
		return v.err
	}
	got := digest.Digest{Function: v.want.Function, Size: v.n}
	if v.n != v.want.Size {
		return &MismatchError{Want: v.want, Got: got}
	}
	var sum [64]byte
	got.Hash = digest.HexOf(v.h.Sum(sum[:0]))
	if got.Hash != v.want.Hash {
		return &MismatchError{Want: v.want, Got: got}
	}
	return nil
}

// prove is check, with the proof that the bytes are the blob.
func (v *verifier) prove() (Proof, error) {
	if err := v.check(); err != nil {
		return Proof{}, err
	}
	return Proof{d: v.want, ok: true}, nil
}

// errWriterDone is returned by a Writer used after Commit or Close.
var errWriterDone = errors.New("blob writer already committed or closed; start a new one with Create")

func negativeOffset(d digest.Digest, offset int64) error {
	return fmt.Errorf("reading blob %s: offset %d is negative; offsets count bytes from the start of the blob", d, offset)
}

// emptyReader serves the empty blob.
func emptyReader() io.ReadCloser { return io.NopCloser(bytes.NewReader(nil)) }

// UnavailableError reports that a store's backend (an object store, say)
// could not serve a request. Nothing was changed; the same request may
// succeed once the backend is reachable again.
type UnavailableError struct {
	// Backend names what failed, with its address.
	Backend string
	// Op is what was asked of it.
	Op string
	// Err is the backend's own error.
	Err error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s: %s failed: %v; check that it is reachable, then retry", e.Backend, e.Op, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Verifier hashes and counts a blob's bytes as they pass, for stores
// kept outside this package: the bytes are written to Verifier and to
// the store side by side, and Check tells whether they are the blob.
type Verifier struct{ v verifier }

// NewVerifier starts verifying blob d.
func NewVerifier(d digest.Digest) *Verifier { return &Verifier{v: newVerifier(d)} }

// Write adds p. It fails with a *MismatchError once more bytes arrive
// than d's size, and keeps failing.
func (v *Verifier) Write(p []byte) error { return v.v.write(p) }

// Written is the number of bytes accepted so far.
func (v *Verifier) Written() int64 { return v.v.n }

// WriteAll checks that data, all of it, is the blob.
func (v *Verifier) WriteAll(data []byte) error {
	if err := v.Write(data); err != nil {
		return err
	}
	return v.Check()
}

// Check returns nil if the bytes written are blob d, else a
// *MismatchError.
func (v *Verifier) Check() error { return v.v.check() }

// Prove is Check, with the proof a TrustedWriter commits with.
func (v *Verifier) Prove() (Proof, error) { return v.v.prove() }

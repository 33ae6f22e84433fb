package chunkmap

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// ErrNotFound is returned when a blob has no usable mapping.
var ErrNotFound = errors.New("no chunk mapping")

// instance is the action cache instance mappings are kept under. Its
// segment "blobs" is reserved in REAPI instance names, so no client can
// read or overwrite a mapping through the ActionCache service.
const instance = "gantry/blobs/chunk-mappings"

// listPath names the output that points at a mapping's chunk list.
const listPath = "chunk-mapping"

// Store keeps mappings. The chunk list is a CAS blob, and an action
// cache entry keyed by the blob and the chunking variant points at it:
// the action cache's entries stay small, and both halves are as durable
// as the stores they live in, on every backend.
type Store struct {
	ac  actioncache.Store
	cas blobstore.Store
}

// New returns a Store over an action cache and the CAS that holds the
// chunks.
func New(ac actioncache.Store, cas blobstore.Store) *Store { return &Store{ac: ac, cas: cas} }

// key names blob's mapping for a variant: a chunking function with its
// parameters (for example "FAST_CDC_2020 avg=524288 seed=0"), so that
// mappings cut with other parameters are never served for these.
func key(blob digest.Digest, variant string) digest.Digest {
	h := digest.NewHasher(blob.Function)
	for _, s := range []string{"gantry chunk mapping v1", variant, blob.Hash, strconv.FormatInt(blob.Size, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return digest.Digest{Function: blob.Function, Hash: digest.HexOf(h.Sum(nil)), Size: blob.Size}
}

// Get returns blob's mapping for variant. It returns ErrNotFound when
// there is none, or when its list or any of its chunks is no longer in
// the CAS (the caller splits again); looking chunks up extends their
// lifetime.
func (s *Store) Get(ctx context.Context, blob digest.Digest, variant string) (Mapping, error) {
	ar, err := s.ac.Get(ctx, instance, key(blob, variant))
	if errors.Is(err, actioncache.ErrNotFound) {
		return Mapping{}, ErrNotFound
	}
	if err != nil {
		return Mapping{}, err
	}
	if len(ar.OutputFiles) != 1 || ar.OutputFiles[0].Path != listPath {
		return Mapping{}, ErrNotFound
	}
	list, err := digest.FromProto(blob.Function, ar.OutputFiles[0].Digest)
	if err != nil {
		return Mapping{}, ErrNotFound
	}
	data, err := blobstore.Get(ctx, s.cas, list)
	if errors.Is(err, blobstore.ErrNotFound) {
		return Mapping{}, ErrNotFound
	}
	if err != nil {
		return Mapping{}, err
	}
	m, err := Decode(blob.Function, blob.Size, data)
	if err != nil {
		return Mapping{}, fmt.Errorf("chunk mapping of %s (%s): %w", blob, variant, err)
	}
	missing, err := s.cas.FindMissing(ctx, m.Chunks)
	if err != nil {
		return Mapping{}, err
	}
	if len(missing) > 0 {
		return Mapping{}, ErrNotFound
	}
	return m, nil
}

// Put records m as blob's mapping for variant, replacing any other. The
// chunks must be in the CAS already.
func (s *Store) Put(ctx context.Context, blob digest.Digest, variant string, m Mapping) error {
	data := Encode(m)
	list := digest.Compute(blob.Function, data)
	if err := blobstore.Put(ctx, s.cas, list, data); err != nil {
		return fmt.Errorf("storing the chunk list of %s: %w", blob, err)
	}
	ar := &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: listPath, Digest: list.Proto()}}}
	if err := s.ac.Put(ctx, instance, key(blob, variant), ar); err != nil {
		return fmt.Errorf("storing the chunk mapping of %s: %w", blob, err)
	}
	return nil
}
